"""Surrogate x acquisition: search quality, calibration and fit cost of every engine combination.

Every (surrogate, acquisition, task, seed) run is one *sequential* calibo
study (one trial in flight: ask, evaluate, tell) of ``--trials`` trials with
the engine's defaults otherwise (EngineConfig: 15 warm starts, adaptive
conformal, DtACI, 2000 candidates), on the tasks and seeds of
``benchmarks.search`` (DEFAULT_TASKS there; seeds 0..S-1). Each run is a
process of its own (one core). Reported per (surrogate, acquisition):

* mean rank of the best-so-far value (1 = best, ties share) over tasks x
  seeds, among all the combinations run, over the (task, seed) cells where all
  of them ran, at trials 25, 50, 100 (the last is "final");
* rolling coverage error (metrics.rolling_coverage_error: mean over
  non-overlapping windows of 20 told trials of |window coverage - nominal|,
  paper 002 Table 1), averaged over the interval pairs (90/70/50/30/10% with
  the default 10 levels); "all" over every prediction shown after the warm
  start (raw below 32 observations), "conf" over the conformalized ones only;
* RMSCE (thesis eq. 3.8 as metrics.rmsce: sqrt of the mean over levels of
  (p_j - fraction of outcomes at or below their predicted p_j quantile)^2) of
  the predictive quantiles at ask against the observed values, all predictions;
* mean wall seconds per refit (``fit``: surrogate + conformal + candidate
  scoring), on a shared 2-core machine.

Grids: ``--grid diagonal`` (default, the affordable one): every surrogate
with the default acquisition plus every acquisition with the default
surrogate (EngineConfig().surrogate / .acquisition, marked "(default)").
``--grid full``: every surrogate x every acquisition. ``--surrogates`` /
``--acquisitions`` default to everything registered in the engine.

Durations on 2 cores (``--workers 2``, 6 tasks x 10 seeds x 100 trials =
60 runs per combination). Measured per run on branin at 100 trials, one core
each while other jobs loaded the machine (load ~4.8 on 2 cores, so about 2x
the CPU time): ql 5.5 s, qgp 10-12, lw-knn 10, gp-recal 14, lw-gbm 23, qrf 36,
qgbm 37, qe 92, lw-rf 95; mlp-quantile / mlp-ensemble were not registered yet
(guessed 60 / 200). The acquisition does not change the cost. Higher-dimensional
tasks fit ~1.5x slower; the objectives add ~50 s (lgbm_digits) and ~70 s
(rf_breast_cancer) per run, ~0 for the synthetic ones. Hence:

    diagonal grid (11 surrogates + 6 more acquisitions = 17 combinations,
                   1020 runs): ~71,000 core-s -> ~10 h on 2 loaded cores
                   (~5-6 h with the machine to itself)
    full grid (11 x 7 = 77 combinations, 4620 runs): ~400,000 core-s ->
                   ~2.3 days loaded (~1.2 days alone); split it with
                   --surrogates / --seed-offset and --merge the parts.

    python -m benchmarks.surrogates                                  # diagonal grid
    python -m benchmarks.surrogates --grid full --surrogates qgp,qgbm --tasks branin --seeds 3
    python -m benchmarks.surrogates --merge part1.json part2.json    # combine partial runs

Writes benchmarks/results/surrogates.json and surrogates.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy / torch: one core per run

import argparse  # noqa: E402
import itertools  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report, runner  # noqa: E402
from benchmarks.harness.tasks import TASKS, select  # noqa: E402
from benchmarks.search import DEFAULT_TASKS  # noqa: E402

RANK_AT = (25, 50, 100)
# Rough relative cost, so the slowest runs start first and the pool drains evenly.
COST = {"mlp-ensemble": 0, "qe": 1, "gp-recal": 2, "mlp-quantile": 3, "lw-gbm": 4, "qgbm": 5}
SLOW_TASKS = ("lgbm_digits", "rf_breast_cancer")


def name(surrogate: str, acquisition: str) -> str:
    return f"{surrogate}/{acquisition}"


def defaults() -> tuple[str, str]:
    from calibo.engine import EngineConfig

    cfg = EngineConfig()
    return cfg.surrogate, cfg.acquisition


def registered() -> tuple[list[str], list[str]]:
    from calibo.engine.acquisition import ACQUISITIONS
    from calibo.engine.surrogates import SURROGATES

    return list(SURROGATES), list(ACQUISITIONS)


def grid(kind: str, surrogates: list[str], acquisitions: list[str]) -> list[tuple[str, str]]:
    if kind == "full":
        return list(itertools.product(surrogates, acquisitions))
    d_sur, d_acq = defaults()
    combos = [(s, d_acq) for s in surrogates] + [(d_sur, a) for a in acquisitions]
    return list(dict.fromkeys(combos))  # the default once, order kept


def run_one(surrogate: str, acquisition: str, task_name: str, trials: int, seed: int) -> dict:
    from calibo.engine import metrics as M

    opt, values, wall, obj_s = runner.sequential_study(
        task_name, trials, seed, {"surrogate": surrogate, "acquisition": acquisition})
    n_fits = max(0, trials - opt.config.n_warmup)  # sequential: one refit per ask after the warm start
    cal_all = M.summarize(opt.records)
    cal_conf = M.summarize(opt.records, conformal_only=True)

    def avg(d: dict, key: str) -> float | None:
        v = d.get(key)
        if v is None:
            return None
        v = np.asarray(v, dtype=float)
        return None if np.all(np.isnan(v)) else float(np.nanmean(v))

    return {
        "surrogate": surrogate, "acquisition": acquisition, "task": task_name, "seed": seed,
        "values": values, "wall_s": wall, "objective_s": obj_s, "overhead_s": wall - obj_s,
        "fit_s": opt.timings["fit"], "n_fits": n_fits,
        "fit_s_per_refit": opt.timings["fit"] / n_fits if n_fits else None,
        "n_predictions": cal_all["n"], "n_conformal": cal_conf["n"],
        "rce": avg(cal_all, "rolling_coverage_error"), "rce_conformal": avg(cal_conf, "rolling_coverage_error"),
        "rce_per_pair": cal_all.get("rolling_coverage_error"), "nominal": cal_all.get("nominal"),
        "coverage": cal_all.get("coverage"), "coverage_conformal": cal_conf.get("coverage"),
        "rmsce": cal_all.get("rmsce"), "rmsce_conformal": cal_conf.get("rmsce"),
    }


def _key(r: dict) -> tuple:
    return (r["surrogate"], r["acquisition"], r["task"], r["seed"])


# ----------------------------------------------------------------- analysis
def summarize(runs: list[dict], trials: int) -> dict:
    d_sur, d_acq = defaults()
    default = name(d_sur, d_acq)
    by = {(name(r["surrogate"], r["acquisition"]), r["task"], r["seed"]): r for r in runs}
    methods = sorted({m for m, _, _ in by})
    tasks = sorted({t for _, t, _ in by})
    curves = {(m, t, s): report.best_so_far(r, TASKS[t].direction, trials) for (m, t, s), r in by.items()}
    cells = sorted({(t, s) for _, t, s in by})
    full = [c for c in cells if all((m, *c) in curves for m in methods)]  # where every combination ran
    mean_rank = report.mean_ranks(curves, methods, full)
    out = {}
    for m in methods:
        rs = [r for (mm, _, _), r in by.items() if mm == m]

        def mean(key: str, rs=rs) -> float | None:
            v = [r[key] for r in rs if r.get(key) is not None and np.isfinite(r[key])]
            return float(np.mean(v)) if v else None

        ranks = mean_rank.get(m)
        out[m] = {
            "surrogate": rs[0]["surrogate"], "acquisition": rs[0]["acquisition"], "runs": len(rs),
            "rank_at": {str(k): (ranks[min(k, trials) - 1] if ranks else None) for k in RANK_AT},
            "final_rank": ranks[-1] if ranks else None,
            "rce": mean("rce"), "rce_conformal": mean("rce_conformal"),
            "rmsce": mean("rmsce"), "rmsce_conformal": mean("rmsce_conformal"),
            "fit_s_per_refit": mean("fit_s_per_refit"), "overhead_ms_per_trial": 1000 * mean("overhead_s") / trials,
            "wall_s_per_run": mean("wall_s"),
            "final_best": {t: float(np.mean([curves[(m, t, s)][-1] for (mm, t2, s) in curves if mm == m and t2 == t]))
                           for t in tasks if any(k[0] == m and k[1] == t for k in curves)},
        }
    return {"methods": methods, "tasks": tasks, "default": default, "rank_cells": len(full),
            "rank_tasks": sorted({t for t, _ in full}), "mean_rank": mean_rank, "combos": out}


def print_table(summary: dict, meta: dict) -> None:
    c = summary["combos"]

    def f(v: float | None, w: int = 8, p: int = 2) -> str:
        return f"{v:>{w}.{p}f}" if v is not None else f"{'-':>{w}}"

    order = sorted(c, key=lambda m: (c[m]["final_rank"] is None, c[m]["final_rank"] or 0.0, m))
    print(f"\nsurrogate x acquisition, sequential (1 trial in flight), {meta['trials']} trials; mean rank of "
          f"best-so-far over {summary['rank_cells']} task x seed cells ({','.join(summary['rank_tasks'])}) where "
          f"all {len(c)} combinations ran; RCE = rolling coverage error (windows of 20, mean over pairs)")
    ks = [k for k in RANK_AT if k < meta["trials"]]
    head = "".join(f"{'rank@' + str(k):>9}" for k in ks) + f"{'final':>9}"
    print(f"{'surrogate/acquisition':<26}{head}{'RCE all':>9}{'RCE conf':>9}{'RMSCE':>8}{'fit s':>8}{'runs':>6}")
    for m in order:
        r = c[m]
        ranks = "".join(f(r["rank_at"][str(k)], 9) for k in ks) + f(r["final_rank"], 9)
        label = m + (" (default)" if m == summary["default"] else "")
        print(f"{label:<26}{ranks}{f(r['rce'], 9, 3)}{f(r['rce_conformal'], 9, 3)}{f(r['rmsce'], 8, 3)}"
              f"{f(r['fit_s_per_refit'], 8, 3)}{r['runs']:>6}")
    report.print_table("mean final best per task", ["surrogate/acquisition", *(t[:12] for t in summary["tasks"])],
                       [[m, *(c[m]["final_best"].get(t) for t in summary["tasks"])] for m in order], 26, 13, 4)


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    from matplotlib.patches import Rectangle

    c = summary["combos"]
    surs = sorted({r["surrogate"] for r in c.values()})
    acqs = sorted({r["acquisition"] for r in c.values()})
    d_sur, d_acq = summary["default"].split("/")
    fig, grid_axes = report.figure(1, 3, figsize=(4 + 1.8 * len(acqs), max(4.0, 1.5 + 0.45 * len(surs))),
                                   gridspec_kw={"width_ratios": [len(acqs), len(acqs), 4]})
    axes = grid_axes[0]
    for ax, key, title, cmap in ((axes[0], "final_rank", "final mean rank (lower is better)", "viridis_r"),
                                 (axes[1], "rce", "rolling coverage error (all predictions)", "magma_r")):
        mat = np.full((len(surs), len(acqs)), np.nan)
        for r in c.values():
            v = r[key]
            mat[surs.index(r["surrogate"]), acqs.index(r["acquisition"])] = np.nan if v is None else v
        im = ax.imshow(mat, cmap=cmap, aspect="auto")
        for i, j in zip(*np.where(np.isfinite(mat)), strict=True):
            ax.text(j, i, f"{mat[i, j]:.2f}" if key == "final_rank" else f"{mat[i, j]:.3f}",
                    ha="center", va="center", fontsize=7, color="w" if im.norm(mat[i, j]) > 0.6 else "k")
        if d_sur in surs and d_acq in acqs:
            ax.add_patch(Rectangle((acqs.index(d_acq) - 0.5, surs.index(d_sur) - 0.5), 1, 1, fill=False,
                                   ec="red", lw=2))
        ax.set_xticks(range(len(acqs)), acqs)
        ax.set_yticks(range(len(surs)), surs)
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.05)
    fit = {s: np.nanmean([r["fit_s_per_refit"] for r in c.values() if r["surrogate"] == s
                          and r["fit_s_per_refit"] is not None] or [np.nan]) for s in surs}
    axes[2].barh(range(len(surs)), [fit[s] for s in surs], color="tab:gray")
    axes[2].set_yticks(range(len(surs)), surs)
    axes[2].set_xscale("log")
    axes[2].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # decades only: minor labels overlap
    axes[2].invert_yaxis()
    axes[2].set_title("mean seconds per refit (log)", fontsize=9)
    fig.suptitle(f"surrogate x acquisition, red box = default ({summary['default']}); "
                 f"ranks over {summary['rank_cells']} task x seed cells", fontsize=10)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=("diagonal", "full"), default="diagonal")
    ap.add_argument("--surrogates", default=None, help="comma list (default: every registered surrogate)")
    ap.add_argument("--acquisitions", default=None, help="comma list (default: every registered acquisition)")
    runner.add_run_arguments(ap, report.RESULTS / "surrogates.json", DEFAULT_TASKS)
    args = ap.parse_args(argv)
    t0 = time.time()
    all_s, all_a = registered()
    surs = args.surrogates.split(",") if args.surrogates else all_s
    acqs = args.acquisitions.split(",") if args.acquisitions else all_a
    bad = [s for s in surs if s not in all_s] + [a for a in acqs if a not in all_a]
    if bad and not args.merge:
        raise SystemExit(f"not registered: {bad}; surrogates {all_s}, acquisitions {all_a}")
    tasks, combos = select(args.tasks), grid(args.grid, surs, acqs)
    jobs = [(s, a, t, args.trials, seed) for seed in runner.seeds_of(args) for t in tasks for s, a in combos]
    jobs.sort(key=lambda j: (COST.get(j[0], 9), j[2] not in SLOW_TASKS, j))  # slowest first
    runs, meta = runner.collect(args, jobs, run_one, _key, lambda j: (j[0], j[1], j[2], j[4]), "surrogate runs",
                                {"grid": args.grid, "combos": [name(s, a) for s, a in combos], "tasks": tasks,
                                 "seeds": args.seeds, "seed_offset": args.seed_offset, "trials": args.trials,
                                 "default": name(*defaults())})
    meta["in_flight"] = 1
    summary = summarize(runs, meta["trials"])
    print_table(summary, meta)
    meta["wall_seconds"] = time.time() - t0
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs}, runner.task_direction)
    plot(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
