"""Search quality with a crowd: K trials in flight, results arriving out of order.

Every (method, task, seed, K) run is one study of ``--trials`` trials driven by the harness's
event simulation on a virtual clock (``runner.run_crowd``: lognormal(0, 1) durations seeded by
(task, seed, K), so every method sees the same duration for its i-th trial). Best-so-far "at trial
t" is over the first t completed trials.

Methods: ``calibo`` (the in-process engine with its defaults; the Optimizer tracks its pending
trials and conditions select on them), ``calibo:key=value,...`` (EngineConfig overrides),
``optuna_gp`` (GPSampler, which conditions on running trials), ``optuna_tpe`` (TPESampler with
constant_liar=True) and ``random``; also ``smac`` (SMAC3's HPO facade by ask/tell) and ``confopt``
(ConfOpt's own loop, K = 1 only: it has no ask/tell). Every method asked runs at every K, K = 1
included (plain sequential search there).

Reported per K:

* mean rank of best-so-far (1 = best; ties share) over tasks x seeds at trials 25, 50 and 100:
  among the main methods (calibo, optuna_gp, optuna_tpe, random) over every (task, seed), and
  among all methods incl. variants over the cells where all of them ran;
* sign tests of calibo and each variant against each peer (and each variant against calibo) on
  the best-so-far at 50 and 100 trials, per (task, seed): wins / losses / ties, two-sided binomial
  p on wins vs losses;
* calibration of calibo and each variant: per run, over every trial told with a prediction (raw
  ones before the conformal threshold included), the empirical coverage per interval pair and the
  gap = mean over pairs of |coverage - nominal|; per task the mean over seeds, the mean over
  tasks, and the ratio gap(K) / gap(1).

    python -m benchmarks.crowd_search --workers 2                  # everything (long)
    python -m benchmarks.crowd_search --tasks branin,svc_digits --seeds 2 --in-flight 8 --trials 40
    python -m benchmarks.crowd_search --variants calibo:acquisition=ts,calibo:n_warmup=10
    python -m benchmarks.crowd_search --merge a.json b.json         # combine partial runs, re-summarise

Writes benchmarks/results/crowd.json (keeping its top-level "live" key, which
``benchmarks.crowd_live`` writes) and crowd.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy / torch: one core per run

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report, runner  # noqa: E402
from benchmarks.harness.peers import check_methods, is_calibo, parse_methods  # noqa: E402
from benchmarks.harness.tasks import TASKS, select  # noqa: E402
from benchmarks.search import DEFAULT_TASKS  # noqa: E402

MAIN = ("calibo", "optuna_gp", "optuna_tpe", "random")
PEERS = MAIN[1:]
OTHER_PEERS = ("smac", "confopt")
NEW_TASKS = "forrester,camel6,levy4,svc_digits,gbr_diabetes,knn_wine,enet_diabetes"
RANK_AT = (25, 50, 100)
SIGN_AT = (50, 100)
SLOW = ("calibo", "optuna_gp")  # started first so the pool drains evenly


# ------------------------------------------------------------------ analysis
def _rank_block(curves: dict, methods: list[str], cells: list[tuple[str, int]], trials: int) -> dict:
    ranks = report.mean_ranks(curves, methods, cells)
    return {"methods": methods, "cells": len(cells), "curve": ranks,
            "at": {m: {str(t): report.value_at(r, t) for t in report.checkpoints(RANK_AT, trials)}
                   for m, r in ranks.items()}}


def _sign_tests(curves: dict, methods: list[str], cells: list[tuple[str, int]], trials: int) -> dict:
    out: dict[str, dict] = {}
    for t in report.checkpoints(SIGN_AT, trials):
        for a in filter(is_calibo, methods):
            for b in [p for p in (*PEERS, "calibo") if p in methods and p != a]:
                out.setdefault(str(t), {})[f"{a} vs {b}"] = report.sign_test(curves, a, b, cells, t)
    return out


def _summarize_k(runs: list[dict], trials: int) -> dict:
    """Ranks and sign tests among the runs of one K."""
    curves = {(r["method"], r["task"], r["seed"]): report.best_so_far(r, TASKS[r["task"]].direction, trials)
              for r in runs}
    methods = sorted({m for m, _, _ in curves}, key=lambda m: (m not in MAIN, m))
    cells = sorted({(t, s) for _, t, s in curves})
    main = [m for m in MAIN if all((m, *c) in curves for c in cells)]
    full = [c for c in cells if all((m, *c) in curves for m in methods)]
    return {"main": _rank_block(curves, main, cells, trials), "all": _rank_block(curves, methods, full, trials),
            "sign_tests": _sign_tests(curves, methods, cells, trials)}


def _task_means(runs: list[dict], m: str, k: int, field: str) -> dict[str, float]:
    """``field`` of method ``m``'s runs at ``k``, mean over seeds per task (runs without it left out)."""
    by_task: dict[str, list[float]] = {}
    for r in runs:
        if r["method"] == m and r["k"] == k and r.get(field) is not None:
            by_task.setdefault(r["task"], []).append(r[field])
    return {t: float(np.mean(g)) for t, g in sorted(by_task.items())}


def _gaps(runs: list[dict], ks: list[int]) -> dict:
    """Calibration gap per calibo method: per K per task (mean over seeds), mean over tasks, ratio to K = 1;
    ``mean_conformal``, the mean over tasks of the gap over conformalized predictions alone."""
    out: dict[str, dict] = {}
    for m in sorted({r["method"] for r in runs if is_calibo(r["method"])}):
        per = {k: _task_means(runs, m, k, "gap") for k in ks}
        conf = {k: _task_means(runs, m, k, "gap_conformal") for k in ks}
        mean = {k: float(np.mean(list(v.values()))) if v else None for k, v in per.items()}
        base = per.get(1, {})
        out[m] = {str(k): {"per_task": per[k], "mean": mean[k],
                           "mean_conformal": float(np.mean(list(conf[k].values()))) if conf[k] else None,
                           "ratio_to_k1": mean[k] / mean[1] if mean.get(1) and mean[k] is not None else None,
                           "ratio_to_k1_per_task": {t: g / base[t] for t, g in per[k].items() if base.get(t)}}
                  for k in ks}
    return out


def summarize(runs: list[dict], trials: int) -> dict:
    ks = sorted({r["k"] for r in runs})
    return {"ks": ks, "methods": sorted({r["method"] for r in runs}, key=lambda m: (m not in MAIN, m)),
            "tasks": sorted({r["task"] for r in runs}), "trials": trials,
            "by_k": {str(k): _summarize_k([r for r in runs if r["k"] == k], trials) for k in ks},
            "calibration_gap": _gaps(runs, ks)}


# -------------------------------------------------------------------- output
def print_tables(summary: dict) -> None:
    cols = report.checkpoints(RANK_AT, summary["trials"])
    for k, blk in summary["by_k"].items():
        for name, rb in (("main methods", blk["main"]), ("all methods", blk["all"])):
            if not rb["curve"] or (name == "all methods" and rb["methods"] == blk["main"]["methods"]):
                continue
            rows = [[m, *(rb["at"][m][str(t)] for t in cols)]
                    for m in sorted(rb["at"], key=lambda m: rb["at"][m][str(cols[-1])])]
            report.print_table(f"K={k}: mean rank, {name} over {rb['cells']} task x seed cells (1 = best)",
                               ["method", *(f"@{t}" for t in cols)], rows, 34, 8)
    print("\nsign tests on best-so-far (W/L/T, two-sided binomial p on W vs L)")
    for k, blk in summary["by_k"].items():
        for t, tests in blk["sign_tests"].items():
            for pair, r in tests.items():
                print(f"K={k:<3} @{t:<4} {pair:<50} {r['wins']:>3}/{r['losses']:<3}/{r['ties']:<3} p={r['p']:.3g}")
    ks = [str(k) for k in summary["ks"]]
    for m, per_k in summary["calibration_gap"].items():
        rows = [[t, *(per_k[k]["per_task"].get(t) for k in ks)] for t in summary["tasks"]]
        rows += [[row, *(per_k[k].get(row) for k in ks)] for row in ("mean", "ratio_to_k1", "mean_conformal")]
        report.print_table(f"calibration gap of {m}: mean over pairs of |coverage - nominal|, mean over seeds",
                           ["task", *(f"K={k}" for k in ks)], rows, 18, 9, 3)


def plot(summary: dict, path: Path) -> None:
    ks = [str(k) for k in summary["ks"]]
    fig, axes = report.figure(1, len(ks) + 1, (4.8, 4.2))
    col = report.colors(summary["methods"])
    for ax, k in zip(axes[0], ks, strict=False):
        rb = summary["by_k"][k]["all"]
        for m, r in rb["curve"].items():
            ax.plot(np.arange(1, len(r) + 1), r, label=m, color=col[m], lw=2.2 if m == "calibo" else 1.1,
                    ls="-" if m in MAIN else "--")
        ax.set_title(f"K={k} in flight: mean rank ({rb['cells']} cells)", fontsize=9)
        ax.set_xlabel("completed trials")
    axes[0][0].set_ylabel("mean rank of best-so-far (lower is better)")
    axes[0][0].legend(fontsize=7)
    ax = axes[0][-1]
    for m, per_k in summary["calibration_gap"].items():
        ax.plot(range(len(ks)), [per_k[k]["mean"] if per_k[k]["mean"] is not None else np.nan for k in ks],
                "o-", label=m, color=col[m])
    ax.set_xticks(range(len(ks)), [f"K={k}" for k in ks])
    ax.set_title("calibration gap (mean over tasks)", fontsize=9)
    ax.set_ylabel("mean |coverage - nominal|")
    ax.legend(fontsize=7)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(MAIN))
    ap.add_argument("--variants", default="", help="comma list of calibo:key=value[,key=value] variants")
    ap.add_argument("--in-flight", default="1,8,32", help="comma list of K (trials in flight)")
    runner.add_run_arguments(ap, report.RESULTS / "crowd.json", f"{DEFAULT_TASKS},{NEW_TASKS}", seeds=5)
    args = ap.parse_args(argv)
    t0 = time.time()
    methods = list(dict.fromkeys(parse_methods(args.methods) + parse_methods(args.variants)))
    if not args.merge:
        check_methods(methods, MAIN[1:] + OTHER_PEERS)
    tasks, ks = select(args.tasks), [int(k) for k in args.in_flight.split(",")]
    jobs = [(m, t, args.trials, k, s) for s in runner.seeds_of(args) for t in tasks for k in ks for m in methods
            if not (m == "confopt" and k != 1)]
    jobs.sort(key=lambda j: (j[0].split(":")[0] not in SLOW, -j[3], j))  # slowest first
    runs, meta = runner.collect(args, jobs, runner.run_crowd, runner.crowd_key, runner.crowd_job_key, "crowd runs",
                                {"methods": methods, "tasks": tasks, "in_flight": ks, "seeds": args.seeds,
                                 "seed_offset": args.seed_offset, "trials": args.trials,
                                 "durations": "lognormal(0, 1)"})
    summary = summarize(runs, meta["trials"])
    print_tables(summary)
    meta["wall_seconds"] = time.time() - t0
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs}, runner.task_direction,
                            keep=("live",))
    plot(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
