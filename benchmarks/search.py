"""Search quality and overhead: calibo against Optuna, ConfOpt, SMAC and random search.

Every (method, task, seed) run is one sequential optimisation of ``--trials``
trials; all methods run side by side in one invocation, each run in its own
process (one core each). Reported:

* mean rank of best-so-far per iteration (1 = best; ties share the mean rank),
  over tasks x seeds, and at the final iteration;
* best-so-far curves per task;
* Wilcoxon signed-rank test (paired by task and seed, one-sided) of the
  default's final best against each peer;
* optimizer overhead per trial (wall seconds inside the optimizer, objective
  time excluded), as a user feels it;
* engine timings: fit at 500 observations and select over 2000 candidates.

    python benchmarks/search.py                       # everything (long: use --workers)
    python benchmarks/search.py --methods calibo,optuna_tpe,random --tasks branin --seeds 3
    python benchmarks/search.py --merge a.json b.json # combine partial runs, re-summarise
    # calibo's Optuna sampler against Optuna's own, all through study.optimize:
    python benchmarks/search.py --methods optuna.calibo,optuna.gp,optuna.tpe --default optuna.calibo \
        --seeds 5 --no-timings --out benchmarks/results/optuna_sampler.json

Writes benchmarks/results/search.json and search.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tasks import TASKS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PEERS = ("optuna_tpe", "optuna_gp", "confopt", "smac", "random")
SURROGATE_VARIANTS = [f"calibo-{s}-obs" for s in ("qgbm", "qrf", "ql", "qgp", "qe")]
ACQ_VARIANTS = [f"calibo-qgp-{a}" for a in ("ts", "ucb", "ei", "pi")]
DEFAULT_TASKS = "branin,hartmann6,ackley5,mixed,lgbm_digits,rf_breast_cancer"


def default_method() -> str:
    """The engine's default configuration, as a variant name."""
    from calibo.engine import EngineConfig

    cfg = EngineConfig()
    return f"calibo-{cfg.surrogate}-{cfg.acquisition}"


def calibo_overrides(method: str) -> dict[str, Any]:
    """``calibo`` -> {}; ``calibo:crowd=radius,n_warmup=10`` -> {"crowd": "radius", "n_warmup": 10}."""
    _, _, spec = method.partition(":")
    out = {}
    for item in filter(None, spec.split(",")):
        key, _, raw = item.partition("=")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def calibo_config(method: str) -> dict:
    """``calibo`` = the engine's defaults; ``calibo-<surrogate>-<acquisition>`` a variant, as is
    ``calibo:key=value[,key=value]`` (engine settings, ``calibo_overrides``)."""
    if method == "calibo" or method.startswith("calibo:"):
        return calibo_overrides(method)
    _, sur, acq = method.split("-")
    return {"surrogate": sur, "acquisition": acq}


def sequential_study(task_name: str, trials: int, seed: int, config: dict):
    """One in-process study, one trial in flight: ``(optimizer, values, wall_s, objective_s)``."""
    from calibo.engine import Optimizer

    task = TASKS[task_name]
    opt = Optimizer(task.space, direction=task.direction, seed=seed, config=config)
    values, obj_s = [], 0.0
    t0 = time.perf_counter()
    for _ in range(trials):
        s = opt.ask()[0]
        t = time.perf_counter()
        v = float(task.objective(s.params))
        obj_s += time.perf_counter() - t
        opt.tell(s.params, v)
        values.append(v)
    return opt, values, time.perf_counter() - t0, obj_s


def run_calibo(method: str, task_name: str, trials: int, seed: int) -> dict:
    opt, values, wall, obj_s = sequential_study(task_name, trials, seed, calibo_config(method))
    return {"values": values, "wall_s": wall, "overhead_s": wall - obj_s,
            "timings": opt.timings, "surrogate": opt.config.surrogate, "acquisition": opt.config.acquisition}


def run_one(method: str, task_name: str, trials: int, seed: int) -> dict:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if method.startswith("calibo"):
        res = run_calibo(method, task_name, trials, seed)
    else:
        from benchmarks.peers import run_peer

        r = run_peer(method, TASKS[task_name], trials, seed)
        res = {"values": list(map(float, r.values)), "wall_s": r.wall_s, "overhead_s": r.overhead_s}
    return {"method": method, "task": task_name, "seed": seed, **res}


# ----------------------------------------------------------------- analysis
def best_so_far(values: list[float], direction: str, trials: int) -> np.ndarray:
    v = np.asarray(values[:trials], dtype=float)
    if direction == "maximize":
        v = -v
    if v.size < trials:  # a peer that stopped early keeps its last best
        v = np.concatenate([v, np.full(trials - v.size, np.nan)])
    return np.fmin.accumulate(np.where(np.isnan(v), np.inf, v))


def summarize(runs: list[dict], trials: int, default: str | None = None) -> dict:
    from scipy.stats import wilcoxon

    default = default or default_method()
    methods = sorted({r["method"] for r in runs})
    tasks = sorted({r["task"] for r in runs})
    by = {(r["method"], r["task"], r["seed"]): r for r in runs}
    curves = {(m, t, s): best_so_far(r["values"], TASKS[t].direction, trials)
              for (m, t, s), r in by.items()}
    cells = sorted({(t, s) for (_, t, s) in by})
    # Main ranking: the methods that ran on every task, over every (task, seed).
    common = [m for m in methods if all((m, t, s) in curves for t, s in cells)]
    mean_rank = _mean_ranks(curves, common, cells)
    # Variant ranking: every method, over the cells where all of them ran.
    full = [c for c in cells if all((m, *c) in curves for m in methods)]
    variant_rank = _mean_ranks(curves, methods, full)
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
        wins = int(np.sum(diff < 0))
        losses = int(np.sum(diff > 0))
        p = float(wilcoxon(a, b, alternative="less").pvalue) if np.any(diff != 0) else 1.0
        tests[m] = {"n": len(pairs), "wins": wins, "losses": losses, "p_less": p}
    return {"methods": methods, "tasks": tasks, "common_methods": common, "mean_rank": mean_rank,
            "variant_tasks": sorted({t for t, _ in full}), "variant_rank": variant_rank,
            "final": final, "wilcoxon_vs_default": tests, "default": default}


def _mean_ranks(curves: dict, methods: list[str], cells: list[tuple[str, int]]) -> dict[str, list[float]]:
    """Mean rank of best-so-far per iteration (1 = best, ties share) over ``cells``."""
    from scipy.stats import rankdata

    if len(methods) < 2 or not cells:
        return {}
    total = 0.0
    for t, s in cells:
        mat = np.stack([curves[(m, t, s)] for m in methods])  # (M, T)
        total = total + np.apply_along_axis(rankdata, 0, mat)
    return {m: (total[i] / len(cells)).tolist() for i, m in enumerate(methods)}


def engine_timings(surrogate: str | None = None, repeats: int = 5) -> dict:
    """Fit at 500 observations and select over 2000 candidates, as the engine does them."""
    from calibo.engine import EngineConfig, SearchSpace, fit, initial_states, select

    task = TASKS["hartmann6"]
    space = SearchSpace.from_dict(task.space)
    cfg = EngineConfig(**({"surrogate": surrogate} if surrogate else {}))
    rng = np.random.default_rng(0)
    configs = space.from_unit(space.sample_uniform(500, rng))
    obs = [(p, float(task.objective(p))) for p in configs]
    fit_s = []
    for i in range(repeats):
        t = time.perf_counter()
        snap = fit(obs, space, cfg, seed=i)
        fit_s.append(time.perf_counter() - t)
    states = initial_states(cfg)
    select(snap, states, space, cfg, asked=0)  # the first select sorts/caches bounds
    sel_s = []
    for i in range(50):
        t = time.perf_counter()
        select(snap, states, space, cfg, asked=i + 1)
        sel_s.append(time.perf_counter() - t)
    small = [(p, v) for p, v in obs[:40]]
    t = time.perf_counter()
    snap40 = fit(small, space, cfg, seed=0)
    fit40 = time.perf_counter() - t
    return {"surrogate": cfg.surrogate, "fit_500_s_median": float(np.median(fit_s)),
            "select_2000_ms_median": 1000 * float(np.median(sel_s)),
            "select_2000_ms_p99": 1000 * float(np.quantile(sel_s, 0.99)),
            "fit_40_cvplus_s": fit40, "method_at_40": snap40.method, "method_at_500": snap.method,
            "n_candidates": int(snap.candidates.shape[0])}


def plot(summary: dict, runs: list[dict], trials: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = summary["tasks"]
    ncols = (len(tasks) + 2) // 2
    fig, grid = plt.subplots(2, ncols, figsize=(5.0 * ncols, 8.4))
    axes = grid.ravel()
    x = np.arange(1, trials + 1)
    methods = summary["methods"]
    cmap = plt.get_cmap("tab20")
    colors = {m: cmap(i % 20) for i, m in enumerate(methods)}
    for m, ranks in summary["mean_rank"].items():
        lw = 2.5 if m == summary["default"] else 1.0
        axes[0].plot(x, ranks, label=m, color=colors[m], lw=lw)
    axes[0].set_title(f"mean rank over {len(tasks)} tasks (lower is better)")
    axes[0].set_xlabel("trial")
    for k, t in enumerate(tasks):
        ax = axes[k + 1]
        curves = []
        for m in methods:
            cs = [best_so_far(r["values"], TASKS[t].direction, trials) for r in runs
                  if r["method"] == m and r["task"] == t]
            if cs:
                curves.append(np.mean(cs, axis=0))
                ax.plot(x, curves[-1], color=colors[m], lw=2.5 if m == summary["default"] else 1.0)
        opt = TASKS[t].optimum
        if opt is not None:
            ax.axhline(opt, color="k", ls="--", lw=0.8)
        ax.set_title(f"{t}: mean best-so-far")
        ax.set_xlabel("trial")
        if curves:  # zoom past the first trials (a run of one method included)
            lo, hi = np.nanpercentile(np.concatenate(curves), [0, 60])
            if hi > lo:
                ax.set_ylim(lo - 0.05 * (hi - lo), hi)
    for ax in axes[len(tasks) + 1:]:
        ax.axis("off")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[m], lw=2.5 if m == summary["default"] else 1.2) for m in methods]
    labels = [m + (" (default)" if m == summary["default"] else "") for m in methods]
    if len(axes) > len(tasks) + 1:
        axes[-1].legend(handles, labels, loc="center", fontsize=9, frameon=False)
    else:
        axes[0].legend(handles, labels, fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def print_table(summary: dict, timings: dict | None) -> None:
    fin = summary["final"]
    tests = summary["wilcoxon_vs_default"]
    def key(m: str, k: str) -> tuple:
        return (fin[m][k] is None, fin[m][k] or 0.0)

    def fmt(v: float | None) -> str:
        return f"{v:>9.2f}" if v is not None else f"{'-':>9}"

    order = sorted(summary["methods"], key=lambda m: key(m, "final_rank") + key(m, "variant_final_rank"))
    print(f"\nmean rank of best-so-far: 'all' over every task ({len(summary['tasks'])}) among methods run on all;"
          f" 'variants' over {','.join(summary['variant_tasks'])} among all methods")
    print(f"{'method':<20}{'all@end':>9}{'all@50':>9}{'variants':>9}{'ms/trial':>10}  default vs it: W/L, p")
    for m in order:
        f = fin[m]
        t = tests.get(m)
        vs = f"{t['wins']}/{t['losses']}  p={t['p_less']:.3g}" if t else ""
        print(f"{m:<20}{fmt(f['final_rank'])}{fmt(f['rank_at_50'])}{fmt(f['variant_final_rank'])}"
              f"{f['overhead_ms_per_trial']:>10.1f}  {vs}")
    print_final_best({m: fin[m]["final_best"] for m in order}, summary["tasks"], "method", 20)
    if timings:
        print(f"\nengine ({timings['surrogate']}): fit at 500 obs {timings['fit_500_s_median']:.3f} s "
              f"({timings['method_at_500']}), fit at 40 obs {timings['fit_40_cvplus_s']:.3f} s "
              f"({timings['method_at_40']}), select over {timings['n_candidates']} candidates "
              f"{timings['select_2000_ms_median']:.2f} ms median / {timings['select_2000_ms_p99']:.2f} ms p99")


def parse_methods(text: str) -> list[str]:
    """Comma list of methods; a ``key=value`` item without a method name continues the variant before it
    (a value may hold a colon: ``calibo:adapter=aci,surrogate_options={"scores":"normalized"}``)."""
    out: list[str] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" in item and ":" not in item.partition("=")[0] and out:
            out[-1] += "," + item
        else:
            out.append(item)
    return out


def add_run_arguments(ap: argparse.ArgumentParser, out: Path) -> None:
    """Tasks, seeds, trials, workers and the output / merge / skip files of a search-style run."""
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(out))
    ap.add_argument("--merge", nargs="*", help="partial result files to combine instead of running")
    ap.add_argument("--skip", nargs="*", default=[], help="result files whose runs are not repeated")


def skipped_runs(files: list[str]) -> list[dict]:
    """The runs of the result ``files`` given to ``--skip``: not repeated, written with the new ones."""
    return [r for f in files for r in json.loads(Path(f).read_text())["runs"]]


def merge_parts(files: list[str], key, trials: int) -> tuple[list[dict], dict]:
    """The runs of partial result ``files``, later ones winning per ``key(run)``, and the merged meta."""
    parts = [json.loads(Path(f).read_text()) for f in files]
    runs = list({key(r): r for p in parts for r in p["runs"]}.values())
    trials = min(p.get("meta", {}).get("trials", trials) for p in parts)
    # the parts' file names, not their paths: a result file names nothing outside the repository
    return runs, {"merged": [Path(f).name for f in files], "parts": [p.get("meta", {}) for p in parts],
                  "trials": trials}


def print_final_best(final_best: dict[str, dict[str, float]], tasks: list[str], head: str, width: int) -> None:
    """The mean final best of each row (in the given order) per task."""
    print("\nmean final best per task:")
    print(f"{head:<{width}}" + "".join(f"{t[:12]:>13}" for t in tasks))
    for m, fb in final_best.items():
        print(f"{m:<{width}}" + "".join(f"{fb.get(t, float('nan')):>13.4g}" for t in tasks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join([*SURROGATE_VARIANTS, *ACQ_VARIANTS, *PEERS]))
    add_run_arguments(ap, RESULTS / "search.json")
    ap.add_argument("--no-timings", action="store_true")
    ap.add_argument("--default", help="the method the others are tested against (default: the engine's)")
    args = ap.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if args.merge:
        runs, meta = [], {"merged": [Path(f).name for f in args.merge]}
        for f in args.merge:
            d = json.loads(Path(f).read_text())
            runs.extend(d["runs"])
            meta.setdefault("parts", []).append(d.get("meta", {}))
        seen = {}
        for r in runs:
            seen[(r["method"], r["task"], r["seed"])] = r
        runs = list(seen.values())
        timings = next((p.get("timings") for p in meta["parts"] if p.get("timings")), None)
    else:
        from tqdm import tqdm

        methods = parse_methods(args.methods)  # calibo:a=1,b=2 is one variant, as in the other scripts
        jobs = [(m, t, s) for s in range(args.seed_offset, args.seed_offset + args.seeds)
                for t in args.tasks.split(",") for m in methods]
        done = {(r["method"], r["task"], r["seed"]) for r in skipped_runs(args.skip)}
        jobs = [j for j in jobs if j not in done]
        # longest first keeps the pool busy at the end
        jobs.sort(key=lambda j: (j[0] not in ("confopt", "calibo-qe-obs", "smac"), j))
        runs = []
        with ProcessPoolExecutor(args.workers) as pool:
            futs = {pool.submit(run_one, m, t, args.trials, s): (m, t, s) for m, t, s in jobs}
            for f in tqdm(as_completed(futs), total=len(futs), desc="search runs"):
                try:
                    runs.append(f.result())
                except Exception as e:  # a peer crashing is reported, not fatal
                    print(f"run {futs[f]} failed: {e!r}", file=sys.stderr)
                if len(runs) % 10 == 0:  # a cut-off run still leaves what it finished
                    out.with_suffix(".partial.json").write_text(json.dumps({"runs": runs}))
        timings = None if args.no_timings else engine_timings()
        meta = {"methods": methods, "tasks": args.tasks.split(","), "seeds": args.seeds,
                "seed_offset": args.seed_offset, "trials": args.trials, "workers": args.workers,
                "cpu_count": os.cpu_count(), "timings": timings}
    summary = summarize(runs, args.trials, args.default)
    print_table(summary, timings)
    meta["wall_seconds"] = time.time() - t0
    out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}))
    plot(summary, runs, args.trials, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
