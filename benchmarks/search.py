"""Search quality and overhead: calibo against Optuna, ConfOpt, SMAC and random search.

Every (method, task, seed) run is one sequential optimisation of ``--trials`` trials
(``runner.run_sequential``); all methods run side by side in one invocation, each run in its own
process (one core each). Reported:

* mean rank of best-so-far per iteration (1 = best; ties share the mean rank), over tasks x
  seeds, and at the final iteration;
* best-so-far curves per task;
* Wilcoxon signed-rank test (paired by task and seed, one-sided) of the default's final best
  against each peer;
* optimizer overhead per trial (wall seconds inside the optimizer, objective time excluded), as a
  user feels it;
* engine timings: fit at 500 observations and select over 2000 candidates.

    python -m benchmarks.search                       # everything (long: use --workers)
    python -m benchmarks.search --methods calibo,optuna_tpe,random --tasks branin --seeds 3
    python -m benchmarks.search --merge a.json b.json # combine partial runs, re-summarise
    # calibo's Optuna sampler against Optuna's own, all through study.optimize:
    python -m benchmarks.search --methods optuna.calibo,optuna.gp,optuna.tpe --default optuna.calibo \\
        --seeds 5 --no-timings --out benchmarks/results/optuna_sampler.json

Writes benchmarks/results/search.json and search.png.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import report, runner
from benchmarks.harness.peers import check_methods, parse_methods
from benchmarks.harness.tasks import TASKS, select

PEERS = ("optuna_tpe", "optuna_gp", "confopt", "smac", "random")
SURROGATE_VARIANTS = [f"calibo-{s}-obs" for s in ("qgbm", "qrf", "ql", "qgp", "qe")]
ACQ_VARIANTS = [f"calibo-qgp-{a}" for a in ("ts", "ucb", "ei", "pi")]
DEFAULT_TASKS = "branin,hartmann6,ackley5,mixed,lgbm_digits,rf_breast_cancer"


def default_method() -> str:
    """The engine's default configuration, as a variant name."""
    from calibo.engine import EngineConfig

    cfg = EngineConfig()
    return f"calibo-{cfg.surrogate}-{cfg.acquisition}"


def key(r: dict) -> tuple:
    return (r["method"], r["task"], r["seed"])


# ----------------------------------------------------------------- analysis
def summarize(runs: list[dict], trials: int, default: str | None = None) -> dict:
    from scipy.stats import wilcoxon

    default = default or default_method()
    methods = sorted({r["method"] for r in runs})
    tasks = sorted({r["task"] for r in runs})
    by = {key(r): r for r in runs}
    curves = {(m, t, s): report.best_so_far(r, TASKS[t].direction, trials) for (m, t, s), r in by.items()}
    cells = sorted({(t, s) for (_, t, s) in by})
    # Main ranking: the methods that ran on every task, over every (task, seed).
    common = [m for m in methods if all((m, t, s) in curves for t, s in cells)]
    mean_rank = report.mean_ranks(curves, common, cells)
    # Variant ranking: every method, over the cells where all of them ran.
    full = [c for c in cells if all((m, *c) in curves for m in methods)]
    variant_rank = report.mean_ranks(curves, methods, full)
    final = {}
    for m in methods:
        ov = [by[k]["overhead_s"] / trials for k in by if k[0] == m]
        final[m] = {
            "final_rank": mean_rank[m][-1] if m in mean_rank else None,
            "rank_at_50": mean_rank[m][min(49, trials - 1)] if m in mean_rank else None,
            "variant_final_rank": variant_rank[m][-1] if m in variant_rank else None,
            "overhead_ms_per_trial": 1000 * float(np.mean(ov)),
            "runs": len(ov),
            "final_best": {t: float(np.mean([curves[(m, t, s)][-1] for (mm, tt, s) in curves
                                             if mm == m and tt == t]))
                           for t in tasks if any(k[0] == m and k[1] == t for k in curves)},
        }
    tests = {}
    for m in methods:
        if m == default:
            continue
        pairs = [(curves[(default, t, s)][-1], curves[(m, t, s)][-1]) for t, s in cells
                 if (default, t, s) in curves and (m, t, s) in curves]
        if len(pairs) < 5:
            continue
        a, b = np.array(pairs).T
        diff = a - b
        p = float(wilcoxon(a, b, alternative="less").pvalue) if np.any(diff != 0) else 1.0
        tests[m] = {"n": len(pairs), "wins": int(np.sum(diff < 0)), "losses": int(np.sum(diff > 0)), "p_less": p}
    return {"methods": methods, "tasks": tasks, "common_methods": common, "mean_rank": mean_rank,
            "variant_tasks": sorted({t for t, _ in full}), "variant_rank": variant_rank,
            "final": final, "wilcoxon_vs_default": tests, "default": default}


def engine_timings(surrogate: str | None = None, repeats: int = 5) -> dict:
    """Fit at 500 observations and select over 2000 candidates, as the engine's fit and select do them
    (its adaptive states' constructor is read where the engine keeps it)."""
    from calibo.engine import EngineConfig, SearchSpace, StudyState, fit, select

    task = TASKS["hartmann6"]
    space = SearchSpace.from_dict(task.space)
    cfg = EngineConfig(**({"surrogate": surrogate} if surrogate else {}))
    rng = np.random.default_rng(0)
    obs = [(p, float(task.objective(p))) for p in space.from_unit(space.sample_uniform(500, rng))]
    fit_s = []
    for i in range(repeats):
        t = time.perf_counter()
        snap = fit(obs, space, cfg, seed=i)
        fit_s.append(time.perf_counter() - t)
    states = StudyState.initial(cfg, 0)
    select(snap, states, space, cfg, asked=0)  # the first select sorts/caches bounds
    sel_s = []
    for i in range(50):
        t = time.perf_counter()
        select(snap, states, space, cfg, asked=i + 1)
        sel_s.append(time.perf_counter() - t)
    t = time.perf_counter()
    snap40 = fit(obs[:40], space, cfg, seed=0)
    fit40 = time.perf_counter() - t
    return {"surrogate": cfg.surrogate, "fit_500_s_median": float(np.median(fit_s)),
            "select_2000_ms_median": 1000 * float(np.median(sel_s)),
            "select_2000_ms_p99": 1000 * float(np.quantile(sel_s, 0.99)),
            "fit_40_cvplus_s": fit40, "method_at_40": snap40.method, "method_at_500": snap.method,
            "n_candidates": int(snap.candidates.shape[0])}


# ----------------------------------------------------------------- output
def plot(summary: dict, runs: list[dict], trials: int, path: Path) -> None:
    from matplotlib.lines import Line2D

    tasks, methods, default = summary["tasks"], summary["methods"], summary["default"]
    ncols = (len(tasks) + 2) // 2
    fig, grid = report.figure(2, ncols, (5.0, 4.2))
    axes = grid.ravel()
    x = np.arange(1, trials + 1)
    col = report.colors(methods, "tab20")
    for m, ranks in summary["mean_rank"].items():
        axes[0].plot(x, ranks, label=m, color=col[m], lw=2.5 if m == default else 1.0)
    axes[0].set_title(f"mean rank over {len(tasks)} tasks (lower is better)")
    axes[0].set_xlabel("trial")
    for k, t in enumerate(tasks):
        ax = axes[k + 1]
        curves = []
        for m in methods:
            cs = [report.best_so_far(r, TASKS[t].direction, trials)
                  for r in runs if r["method"] == m and r["task"] == t]
            if cs:
                curves.append(np.mean(cs, axis=0))
                ax.plot(x, curves[-1], color=col[m], lw=2.5 if m == default else 1.0)
        if TASKS[t].optimum is not None:
            ax.axhline(TASKS[t].optimum, color="k", ls="--", lw=0.8)
        ax.set_title(f"{t}: mean best-so-far")
        ax.set_xlabel("trial")
        if curves:  # zoom past the first trials (a run of one method included)
            lo, hi = np.nanpercentile(np.concatenate(curves), [0, 60])
            if hi > lo:
                ax.set_ylim(lo - 0.05 * (hi - lo), hi)
    for ax in axes[len(tasks) + 1:]:
        ax.axis("off")
    handles = [Line2D([], [], color=col[m], lw=2.5 if m == default else 1.2) for m in methods]
    labels = [m + (" (default)" if m == default else "") for m in methods]
    if len(axes) > len(tasks) + 1:
        axes[-1].legend(handles, labels, loc="center", fontsize=9, frameon=False)
    else:
        axes[0].legend(handles, labels, fontsize=6)
    report.save_figure(fig, path)


def print_tables(summary: dict, timings: dict | None) -> None:
    fin, tests = summary["final"], summary["wilcoxon_vs_default"]

    def order(m: str) -> tuple:
        return tuple(x for k in ("final_rank", "variant_final_rank") for x in (fin[m][k] is None, fin[m][k] or 0.0))

    rows = []
    for m in sorted(summary["methods"], key=order):
        f, t = fin[m], tests.get(m)
        rows.append([m, f["final_rank"], f["rank_at_50"], f["variant_final_rank"], f["overhead_ms_per_trial"],
                     f"{t['wins']}/{t['losses']} p={t['p_less']:.3g}" if t else ""])
    report.print_table(f"mean rank of best-so-far: 'all' over every task ({len(summary['tasks'])}) among methods "
                       f"run on all; 'variants' over {','.join(summary['variant_tasks'])} among all methods",
                       ["method", "all@end", "all@50", "variants", "ms/trial", "default vs it: W/L, p"], rows, 20)
    report.print_table("mean final best per task", ["method", *(t[:12] for t in summary["tasks"])],
                       [[m, *(fin[m]["final_best"].get(t) for t in summary["tasks"])]
                        for m in sorted(summary["methods"], key=order)], 20, 13, 4)
    if timings:
        print(f"\nengine ({timings['surrogate']}): fit at 500 obs {timings['fit_500_s_median']:.3f} s "
              f"({timings['method_at_500']}), fit at 40 obs {timings['fit_40_cvplus_s']:.3f} s "
              f"({timings['method_at_40']}), select over {timings['n_candidates']} candidates "
              f"{timings['select_2000_ms_median']:.2f} ms median / {timings['select_2000_ms_p99']:.2f} ms p99")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join([*SURROGATE_VARIANTS, *ACQ_VARIANTS, *PEERS]))
    runner.add_run_arguments(ap, report.RESULTS / "search.json", DEFAULT_TASKS)
    ap.add_argument("--no-timings", action="store_true")
    ap.add_argument("--default", help="the method the others are tested against (default: the engine's)")
    args = ap.parse_args(argv)
    t0 = time.time()
    methods = parse_methods(args.methods)  # calibo:a=1,b=2 is one variant
    if not args.merge:
        check_methods(methods)
    tasks = select(args.tasks)
    jobs = [(m, t, args.trials, s) for s in runner.seeds_of(args) for t in tasks for m in methods]
    jobs.sort(key=lambda j: (j[0] not in ("confopt", "calibo-qe-obs", "smac"), j))  # longest first
    runs, meta = runner.collect(args, jobs, runner.run_sequential, key, lambda j: (j[0], j[1], j[3]),
                                "search runs", {"methods": methods, "tasks": tasks, "seeds": args.seeds,
                                                "seed_offset": args.seed_offset, "trials": args.trials})
    if args.merge:
        timings = next((p.get("timings") for p in meta["parts"] if p.get("timings")), None)
    elif args.no_timings:
        timings = meta["timings"] = None
    else:
        timings = meta["timings"] = engine_timings()
    trials = meta.get("trials", args.trials)
    summary = summarize(runs, trials, args.default)
    print_tables(summary, timings)
    meta["wall_seconds"] = time.time() - t0
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs}, runner.task_direction)
    plot(summary, runs, trials, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
