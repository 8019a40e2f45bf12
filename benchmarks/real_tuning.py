"""Real model tuning: calibo against Optuna GP and TPE, SMAC3, ConfOpt and random search.

The suite (``harness.tasks``: the tasks of kind ``real``): scikit-learn and LightGBM models on the datasets
scikit-learn ships, scored as people score them (1 - accuracy, balanced error, log loss, MSE,
MAE) by cross-validation on a fixed split; int, log-scale and categorical parameters; six tasks
with large plateaus. Every method runs every (task, seed) for ``--trials`` trials, side by side
in one run, sequentially (K = 1) and with ``--in-flight`` trials running at once (K = 8 by
default, results arriving out of order on a virtual clock: ``runner.run_crowd``).
ConfOpt has no ask/tell, so it runs sequentially only.

Reported per K: the mean rank of best-so-far (1 = best, ties share) over tasks x seeds at 25,
50 and 100 trials among the methods that ran at that K; per-task mean best at 100 trials;
sign tests of each calibo method against each peer (wins / losses / ties over task x seed,
two-sided binomial p); and, per task, whether calibo's mean best at 100 is worse than random's.

    python -m benchmarks.real_tuning --workers 2                      # everything (hours on 2 cores)
    python -m benchmarks.real_tuning --methods calibo,random --tasks knn_iris --seeds 2 --in-flight 1
    python -m benchmarks.real_tuning --merge a.json b.json             # combine partial runs
    python -m benchmarks.real_tuning --tasks heldout --methods calibo,optuna_gp,optuna_tpe,smac,random \
        --out benchmarks/results/real_tuning_heldout_tasks.json           # the held-out tasks

Writes benchmarks/results/real_tuning.json and real_tuning.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy / torch: one core per run

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report, runner  # noqa: E402
from benchmarks.harness.peers import LOOP_ONLY, check_methods, is_calibo, parse_methods  # noqa: E402
from benchmarks.harness.tasks import PLATEAU_TASKS, TASKS, select  # noqa: E402

METHODS = ("calibo", "optuna_gp", "optuna_tpe", "smac", "confopt", "random")
AT = (25, 50, 100)


# ------------------------------------------------------------------ analysis
def summarize_k(runs: list[dict], trials: int) -> dict[str, Any]:
    curves = {(r["method"], r["task"], r["seed"]): report.best_so_far(r, TASKS[r["task"]].direction, trials)
              for r in runs}
    methods = sorted({m for m, _, _ in curves}, key=lambda m: (not is_calibo(m), m))
    cells = sorted({(t, s) for _, t, s in curves})
    full = [c for c in cells if all((m, *c) in curves for m in methods)]
    ranks = report.mean_ranks(curves, methods, full)
    at = report.checkpoints(AT, trials)
    tasks = sorted({t for t, _ in cells})
    best = {m: {t: float(np.mean([report.value_at(curves[(m, t, s)], trials) for (tt, s) in full if tt == t]))
                for t in tasks if any(tt == t for tt, _ in full)} for m in methods}
    peers = [m for m in methods if not is_calibo(m)]
    # each calibo variant against every peer; the present default also against the other variants
    rivals = {a: peers + ([m for m in methods if is_calibo(m) and m != a] if a == "calibo" else [])
              for a in methods if is_calibo(a)}
    signs = {str(t): {f"{a} vs {b}": report.sign_test(curves, a, b, full, t) for a in rivals for b in rivals[a]}
             for t in at}
    # a mean of the same quantized scores summed in another order may differ in the last bits: not worse
    worse_than_random = {a: [t for t in best[a] if "random" in best
                             and best[a][t] > best["random"][t] + 1e-12 * abs(best["random"][t])]
                         for a in methods if is_calibo(a)}
    def tie_stats(r: dict) -> dict | None:
        if "values" in r:
            return report.ties(r["values"], 1.0 if TASKS[r["task"]].direction == "minimize" else -1.0)
        return r if "ties" in r else None

    plateau = {m: {t: {"tie_share": float(sum(s["ties"] for s in st) / max(1, sum(s["after"] for s in st))),
                       "distinct": float(np.mean([s["distinct"] for s in st]))}
                   for t in PLATEAU_TASKS
                   if (st := [s for r in runs if r["method"] == m and r["task"] == t
                              and (s := tie_stats(r)) is not None])}
               for m in methods}
    calibration = {m: pooled_calibration([r for r in runs if r["method"] == m]) for m in methods if is_calibo(m)}
    return {"methods": methods, "cells": len(full), "tasks": tasks, "rank_curve": ranks, "plateau": plateau,
            "calibration": calibration,
            "rank_at": {m: {str(t): report.value_at(r, t) for t in at} for m, r in ranks.items()},
            "mean_best": best, "sign_tests": signs, "worse_than_random": worse_than_random,
            "overhead_ms_per_trial": {m: 1000 * float(np.mean([r["overhead_s"] / report.n_values(r) for r in runs
                                                                if r["method"] == m])) for m in methods}}


def pooled_calibration(runs: list[dict]) -> dict[str, Any]:
    """Coverage of calibo's shown intervals, the records of every seed pooled per task: per task the
    coverage of each pair (90/70/50/30/10%), its gap (mean |coverage - nominal| over the pairs) and
    whether every pair under-covers; the mean gap over the tasks."""
    per: dict[str, Any] = {}
    for t in sorted({r["task"] for r in runs}):
        rs = [r for r in runs if r["task"] == t and r.get("coverage") and r.get("n_predicted")]
        if not rs:
            continue
        n = np.array([r["n_predicted"] for r in rs], dtype=float)
        cov = (np.array([r["coverage"] for r in rs]) * n[:, None]).sum(0) / n.sum()
        nominal = np.array(rs[0]["nominal"])
        per[t] = {"coverage": cov.round(4).tolist(), "gap": float(np.mean(np.abs(cov - nominal))),
                  "under_everywhere": bool(np.all(cov < nominal)), "records": int(n.sum())}
    gaps = [c["gap"] for c in per.values()]
    return {"tasks": per, "mean_gap": float(np.mean(gaps)) if gaps else None,
            "max_gap": float(np.max(gaps)) if gaps else None,
            "under_everywhere": [t for t, c in per.items() if c["under_everywhere"]],
            "nominal": rs[0]["nominal"] if per else None}


def summarize(runs: list[dict], trials: int) -> dict[str, Any]:
    ks = sorted({r["k"] for r in runs})
    return {"ks": ks, "trials": trials, "plateau_tasks": list(PLATEAU_TASKS),
            "by_k": {str(k): summarize_k([r for r in runs if r["k"] == k], trials) for k in ks}}


def print_tables(summary: dict) -> None:
    for k, blk in summary["by_k"].items():
        at = list(next(iter(blk["rank_at"].values())).keys()) if blk["rank_at"] else []
        print(f"\nK={k} in flight: mean rank of best-so-far over {blk['cells']} task x seed cells (1 = best)")
        print(f"{'method':<34}" + "".join(f"{'@' + t:>8}" for t in at) + f"{'ms/trial':>10}")
        for m in sorted(blk["rank_at"], key=lambda m: blk["rank_at"][m][at[-1]]):
            print(f"{m:<34}" + "".join(f"{blk['rank_at'][m][t]:>8.2f}" for t in at)
                  + f"{blk['overhead_ms_per_trial'][m]:>10.1f}")
        print(f"\nK={k}: mean best at {summary['trials']} trials per task (* plateau task)")
        methods = blk["methods"]
        print(f"{'task':<22}" + "".join(f"{m[:14]:>15}" for m in methods))
        for t in blk["tasks"]:
            mark = "*" if t in summary["plateau_tasks"] else " "
            print(f"{t[:20]:<21}{mark}" + "".join(f"{blk['mean_best'][m].get(t, float('nan')):>15.5g}"
                                                   for m in methods))
        print(f"\nK={k}: sign tests (wins/losses/ties over task x seed, two-sided binomial p)")
        for t, tests in blk["sign_tests"].items():
            for pair, r in tests.items():
                print(f"  @{t:<4} {pair:<40} {r['wins']:>3}/{r['losses']:<3}/{r['ties']:<3} p={r['p']:.3g}")
        if any(blk.get("plateau", {}).values()):
            print(f"\nK={k}: plateau tasks, share of trials {report.TIES_FROM + 1}-{summary['trials']} tying the best "
                  "so far / distinct values (runs that recorded them)")
            print(f"{'task':<22}" + "".join(f"{m[:14]:>15}" for m in methods))
            for t in PLATEAU_TASKS:
                cells = [blk["plateau"].get(m, {}).get(t) for m in methods]
                print(f"{t[:20]:<22}" + "".join(f"{c['tie_share']:>9.0%} / {c['distinct']:<3.0f}" if c else f"{'':>15}"
                                               for c in cells))
        for m, cal in blk.get("calibration", {}).items():
            if cal["mean_gap"] is not None:
                print(f"K={k}: {m}'s calibration, records pooled over seeds per task: mean gap {cal['mean_gap']:.3f}, "
                      f"largest {cal['max_gap']:.3f}; every interval under-covers on "
                      f"{', '.join(cal['under_everywhere']) or 'no task'}")
        for m, tasks in blk["worse_than_random"].items():
            print(f"K={k}: tasks where {m}'s mean best at {summary['trials']} is worse than random's: "
                  f"{', '.join(tasks) if tasks else 'none'}")


def plot(summary: dict, path: Path) -> None:
    ks = list(summary["by_k"])
    fig, axes = report.figure(1, 2 * len(ks), (6.0, 4.6))
    methods = sorted({m for b in summary["by_k"].values() for m in b["methods"]}, key=lambda m: (not is_calibo(m), m))
    col = report.colors(methods)
    for j, k in enumerate(ks):
        blk = summary["by_k"][k]
        ax = axes[0][2 * j]
        for m, r in blk["rank_curve"].items():
            ax.plot(np.arange(1, len(r) + 1), r, label=m, color=col[m], lw=2.4 if is_calibo(m) else 1.2)
        ax.set_title(f"real tuning, {k} in flight: mean rank ({blk['cells']} cells)", fontsize=9)
        ax.set_xlabel("completed trials")
        ax.set_ylabel("mean rank of best-so-far (lower is better)")
        ax.legend(fontsize=7)
        ax = axes[0][2 * j + 1]
        tasks = [t for t in blk["tasks"] if all(t in blk["mean_best"][m] for m in blk["methods"])]
        width = 0.8 / len(blk["methods"])
        for i, m in enumerate(blk["methods"]):  # per task: 0 = the best method's mean best, 1 = the worst's
            rel = []
            for t in tasks:
                vals = [blk["mean_best"][mm][t] for mm in blk["methods"]]
                span = max(vals) - min(vals)
                rel.append((blk["mean_best"][m][t] - min(vals)) / span if span > 0 else 0.0)
            ax.bar(np.arange(len(tasks)) + i * width, rel, width, color=col[m], label=m)
        ax.set_xticks(np.arange(len(tasks)) + 0.4, [t + ("*" if t in summary["plateau_tasks"] else "")
                                                    for t in tasks], rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{k} in flight: mean best at {summary['trials']}, 0 = best method, 1 = worst "
                     "(* plateau task)", fontsize=9)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--only", help="with --merge: summarise these methods only (comma list)")
    ap.add_argument("--rename-first", metavar="OLD=NEW",
                    help="with --merge: the first file's method OLD is NEW (a stored default beside a new one)")
    ap.add_argument("--in-flight", default="1,8", help="comma list of K (trials in flight)")
    runner.add_run_arguments(ap, report.RESULTS / "real_tuning.json", "real", seeds=5)
    args = ap.parse_args(argv)
    t0 = time.time()
    methods = parse_methods(args.methods)
    if not args.merge:
        check_methods(methods)
    tasks, ks = select(args.tasks), [int(k) for k in args.in_flight.split(",")]
    jobs = [(m, t, args.trials, k, s) for s in runner.seeds_of(args) for t in tasks for k in ks for m in methods
            if not (m in LOOP_ONLY and k != 1)]
    slow = ("confopt", "smac", "optuna_gp", "mlp_iris", "rf_wine")
    # seed by seed and task by task (a run cut off leaves whole task x seed cells), the slowest
    # methods first within a cell
    jobs.sort(key=lambda j: (j[4], j[1] not in slow, j[1], j[0] not in slow, j))
    if args.merge and args.rename_first:
        old, _, new = args.rename_first.partition("=")
        first = report.read_json(args.merge[0])
        first["runs"] = [dict(r, method=new) if r["method"] == old else r for r in first["runs"]]
        renamed = Path(tempfile.mkdtemp()) / Path(args.merge[0]).name
        renamed.write_text(report.dumps(first))
        args.merge = [str(renamed), *args.merge[1:]]
    runs, meta = runner.collect(args, jobs, runner.run_crowd, runner.crowd_key, runner.crowd_job_key,
                                "real tuning runs", {"methods": methods, "tasks": tasks, "in_flight": ks,
                                                     "seeds": args.seeds, "seed_offset": args.seed_offset,
                                                     "trials": args.trials, "durations": "lognormal(0, 1)"})
    if args.merge and args.only:
        keep = set(parse_methods(args.only))
        runs = [r for r in runs if r["method"] in keep]
    summary = summarize(runs, meta["trials"])
    print_tables(summary)
    meta["wall_seconds"] = time.time() - t0
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs}, runner.task_direction)
    plot(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
