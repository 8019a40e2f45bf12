"""Calibration study after paper 002, Table 1.

Each run samples 15 quasi-random configurations, then greedily by the expected
value of an unconformalized QGBM surrogate (acquisition ``mean``), so the
sampled sequence is the same for every variant and the feedback shift from
the random to the greedy phase is immediate. From the 32nd observation on,
before each new outcome is revealed, every variant predicts that
configuration's 25%, 50% and 75% intervals from the observations so far;
then the outcome is told to its adaptive state:

    unconformalized | split | split+ACI | split+DtACI | CV+ | CV+ +ACI | CV+ +DtACI

Metrics per interval level (paper 002, Table 1): rolling coverage error
(non-overlapping windows of 20), mean width, LLR of breaches vs the
configuration's features; ranks across variants within each task and level,
averaged. Everything goes through the engine's fit / select / adapt.

    python benchmarks/calibration.py [--tasks hartmann6,mixed,...] [--seeds 5] [--trials 100]

Writes benchmarks/results/calibration.json and calibration.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tasks import TASKS  # noqa: E402
from service.engine import EngineConfig, SearchSpace, adapt, fit, initial_states, select  # noqa: E402
from service.engine import metrics as M  # noqa: E402
from service.engine.optimizer import warmup_points  # noqa: E402

LEVELS = (0.125, 0.25, 0.375, 0.625, 0.75, 0.875)  # pairs: 75%, 50%, 25% intervals
NOMINAL = [0.75, 0.5, 0.25]
VARIANTS = [
    ("unconformalized", "raw", "none"),
    ("split", "split", "none"),
    ("split+ACI", "split", "aci"),
    ("split+DtACI", "split", "dtaci"),
    ("CV+", "cv+", "none"),
    ("CV+ +ACI", "cv+", "aci"),
    ("CV+ +DtACI", "cv+", "dtaci"),
]
RESULTS = Path(__file__).resolve().parent / "results"


def run_sequence(task_name: str, seed: int, trials: int, surrogate: str) -> dict:
    task = TASKS[task_name]
    space = SearchSpace.from_dict(task.space)
    base = {"surrogate": surrogate, "levels": LEVELS, "n_warmup": 15}
    driver = EngineConfig(**base, acquisition="mean", conformal="raw")
    method_cfg = {m: EngineConfig(**base, conformal=m) for m in ("raw", "split", "cv+")}
    states = {name: initial_states(EngineConfig(**base, adapter=ad, conformal=m), seed)
              for name, m, ad in VARIANTS}
    records: dict[str, list] = {name: [] for name, _, _ in VARIANTS}
    features: list[np.ndarray] = []
    obs: list[tuple[dict, float]] = []
    warm = space.from_unit(warmup_points(space, seed, 0, 15, set()))
    for t in range(trials):
        if t < 15:
            params = warm[t]
        else:
            snap = fit(obs, space, driver, task.direction, seed)
            params = select(snap, states["unconformalized"], space, driver, direction=task.direction,
                            seed=seed, asked=t, exclude=[p for p, _ in obs])[0].params
        value = float(task.objective(params))
        if t >= 32:
            unit = space.to_unit([params])
            preds = {}
            for m, cfg in method_cfg.items():
                snap_m = fit(obs, space, cfg, task.direction, seed, candidates=unit)
                preds[m] = snap_m
            for name, m, _ in VARIANTS:
                s = select(preds[m], states[name], space, method_cfg[m], direction=task.direction,
                           seed=seed, asked=t)[0]
                states[name], rec = adapt(states[name], s.prediction, value)
                records[name].append(rec)
            features.append(space.features(unit)[0])
        obs.append((params, value))
    X = np.array(features)
    out = {}
    for name, _, _ in VARIANTS:
        recs = records[name]
        covered = np.array([r["covered"] for r in recs], dtype=float)
        widths = np.array([r["width"] for r in recs], dtype=float)
        out[name] = {
            "rolling_coverage_error": M.rolling_coverage_error(covered, NOMINAL, 20).tolist(),
            "coverage": M.coverage(covered).tolist(),
            "width": M.mean_width(widths).tolist(),
            "llr": [M.llr_breaches(X, 1 - covered[:, j]) for j in range(len(NOMINAL))],
            "cumulative": M.cumulative_coverage(covered).tolist(),
            "alpha_final": [s.alpha for s in states[name]],
        }
    best = min(v for _, v in obs) if task.direction == "minimize" else max(v for _, v in obs)
    return {"task": task_name, "seed": seed, "variants": out, "best": best}


def summarize(runs: list[dict]) -> dict:
    tasks = sorted({r["task"] for r in runs})
    names = [n for n, _, _ in VARIANTS]
    metrics = ("rolling_coverage_error", "llr", "width")
    means = {m: {n: {} for n in names} for m in (*metrics, "coverage")}
    ranks = {m: {n: [] for n in names} for m in metrics}
    for t in tasks:
        rs = [r for r in runs if r["task"] == t]
        for m in (*metrics, "coverage"):
            for n in names:
                means[m][n][t] = np.mean([r["variants"][n][m] for r in rs], axis=0).tolist()
        for m in metrics:
            for j in range(len(NOMINAL)):
                vals = np.array([means[m][n][t][j] for n in names])
                order = vals.argsort().argsort() + 1.0  # 1 = best (lowest)
                for n, rk in zip(names, order, strict=True):
                    ranks[m][n].append(float(rk))
    table = {n: {m: float(np.mean(ranks[m][n])) for m in metrics} for n in names}
    for n in names:
        table[n]["rce_mean"] = float(np.mean([means["rolling_coverage_error"][n][t] for t in tasks]))
        table[n]["coverage_mean"] = np.mean([means["coverage"][n][t] for t in tasks], axis=0).tolist()
    return {"tasks": tasks, "rank_table": table, "per_task_means": means}


def plot(runs: list[dict], summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, _, _ in VARIANTS]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    for j, nom in enumerate(NOMINAL):
        ax = axes[j]
        for n in names:
            curves = [np.asarray(r["variants"][n]["cumulative"])[:, j] for r in runs]
            L = min(len(c) for c in curves)
            ax.plot(np.arange(32, 32 + L), np.mean([c[:L] for c in curves], axis=0), label=n)
        ax.axhline(nom, color="k", ls="--", lw=1)
        ax.set_title(f"cumulative coverage, {int(nom * 100)}% interval")
        ax.set_xlabel("iteration")
    axes[0].legend(fontsize=8)
    tab = summary["rank_table"]
    x = np.arange(len(names))
    for k, m in enumerate(("rolling_coverage_error", "llr", "width")):
        axes[3].bar(x + (k - 1) * 0.27, [tab[n][m] for n in names], 0.27, label=m)
    axes[3].set_xticks(x, names, rotation=45, ha="right", fontsize=8)
    axes[3].set_title("mean rank (lower is better)")
    axes[3].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="hartmann6,mixed,rf_breast_cancer,lgbm_digits")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--surrogate", default="qgbm")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(RESULTS / "calibration.json"))
    args = ap.parse_args()
    from tqdm import tqdm

    jobs = [(t, s) for t in args.tasks.split(",") for s in range(args.seeds)]
    t0 = time.time()
    runs = []
    with ProcessPoolExecutor(args.workers) as pool:
        futs = [pool.submit(run_sequence, t, s, args.trials, args.surrogate) for t, s in jobs]
        for f in tqdm(as_completed(futs), total=len(futs), desc="calibration runs"):
            runs.append(f.result())
    runs.sort(key=lambda r: (r["task"], r["seed"]))
    summary = summarize(runs)
    tab = summary["rank_table"]
    print(f"\nCalibration ranks over {len(summary['tasks'])} tasks x 3 levels, {args.seeds} seeds, "
          f"{args.trials} trials, surrogate {args.surrogate} (lower rank is better)")
    print(f"{'variant':<17}{'RCE rank':>9}{'LLR rank':>9}{'width rank':>11}{'mean RCE':>10}  coverage 75/50/25%")
    for n, _, _ in VARIANTS:
        r = tab[n]
        cov = "/".join(f"{c:.2f}" for c in r["coverage_mean"])
        print(f"{n:<17}{r['rolling_coverage_error']:>9.2f}{r['llr']:>9.2f}{r['width']:>11.2f}"
              f"{r['rce_mean']:>10.3f}  {cov}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"tasks": args.tasks.split(","), "seeds": args.seeds, "trials": args.trials,
            "surrogate": args.surrogate, "levels": LEVELS, "wall_seconds": time.time() - t0}
    out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1))
    plot(runs, summary, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
