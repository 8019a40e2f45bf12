"""Warm start: a study that starts from 50 imported trials of the same task, against a cold study.

For each (task, seed): an earlier study of the task (calibo, seed ``seed + 1000``) ran 50 trials;
those 50 are added to a new study (``Optimizer.add``, the engine's side of ``POST .../trials``: no
prediction, so they feed the fit and the best but not the calibration state), which then asks and
tells up to ``--trials`` trials of its own. A cold study (seed ``seed``) runs ``--trials`` trials from
nothing. Reported per task: how many of its own trials the warm study needed to reach the cold
study's best at ``--trials`` (0: an imported trial was already as good; never: not within
``--trials``), and both studies' best at 25 and 50 trials.

    python -m benchmarks.warm_start --workers 2
    python -m benchmarks.warm_start --tasks knn_iris --seeds 2

Writes benchmarks/results/warm_start.json and warm_start.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report, runner  # noqa: E402
from benchmarks.harness.tasks import TASKS, select  # noqa: E402

DEFAULT_TASKS = "dt_breast_cancer,svc_breast_cancer,lgbm_diabetes,logreg_digits,hgb_wine,et_diabetes,hartmann6,mixed"
IMPORTED = 50


def study(task_name: str, seed: int, trials: int, imported: list[tuple[dict, float]] = ()) -> list[float]:
    """The values a calibo study of ``trials`` trials is told, after ``imported`` ones were added."""
    from calibo.engine import Optimizer

    task = TASKS[task_name]
    opt = Optimizer(task.space, direction=task.direction, seed=seed)
    for p, v in imported:
        opt.add(p, v)
    values = []
    for _ in range(trials):
        s = opt.ask()[0]
        v = float(task.objective(s.params))
        opt.tell(s.params, v)
        values.append(v)
    return values, opt.observations


def run_one(task_name: str, seed: int, trials: int) -> dict[str, Any]:
    sign = 1.0 if TASKS[task_name].direction == "minimize" else -1.0
    t0 = time.perf_counter()
    earlier, observed = study(task_name, seed + 1000, IMPORTED)
    cold, _ = study(task_name, seed, trials)
    warm, _ = study(task_name, seed, trials, observed)
    target = min(sign * v for v in cold)
    imported_best = min(sign * v for v in earlier)
    best = np.minimum.accumulate(sign * np.array(warm))
    reached = [i + 1 for i, b in enumerate(best) if min(b, imported_best) <= target]
    needed = 0 if imported_best <= target else (reached[0] if reached else None)
    return {"task": task_name, "seed": seed, "cold": cold, "warm": warm, "imported": earlier,
            "target": sign * target, "needed": needed, "wall_s": time.perf_counter() - t0}


def summarize(runs: list[dict[str, Any]], trials: int) -> dict[str, Any]:
    tasks = sorted({r["task"] for r in runs})
    per = {}
    for t in tasks:
        rs = [r for r in runs if r["task"] == t]
        sign = 1.0 if TASKS[t].direction == "minimize" else -1.0
        needed = [r["needed"] for r in rs]

        def best_at(vals, n, extra=(), sign=sign):
            return sign * min(sign * v for v in list(vals[:n]) + list(extra))

        per[t] = {"needed": needed,
                  "reached": sum(n is not None for n in needed), "runs": len(rs),
                  "median_needed": float(np.median([n if n is not None else trials + 1 for n in needed])),
                  **{f"cold_best_{n}": float(np.mean([best_at(r["cold"], n) for r in rs])) for n in (25, 50, trials)},
                  **{f"warm_best_{n}": float(np.mean([best_at(r["warm"], n, r["imported"]) for r in rs]))
                     for n in (25, 50, trials)}}
    all_needed = [n for r in runs for n in [r["needed"]]]
    return {"tasks": tasks, "trials": trials, "imported": IMPORTED, "per_task": per,
            "reached": sum(n is not None for n in all_needed), "runs": len(all_needed),
            "median_needed": float(np.median([n if n is not None else trials + 1 for n in all_needed])),
            "mean_needed_when_reached": float(np.mean([n for n in all_needed if n is not None]))
            if any(n is not None for n in all_needed) else None}


def print_table(s: dict[str, Any]) -> None:
    print(f"\nwarm start from {s['imported']} imported trials: own trials to reach the cold study's best at "
          f"{s['trials']} (never: not within {s['trials']})")
    print(f"{'task':<20}{'needed per seed':>34}{'median':>8}{'cold@25':>11}{'warm@25':>11}"
          f"{'cold@' + str(s['trials']):>11}")
    last = f"cold_best_{s['trials']}"
    for t, r in s["per_task"].items():
        needed = ",".join("never" if n is None else str(n) for n in r["needed"])
        print(f"{t:<20}{needed:>34}{r['median_needed']:>8.0f}{r['cold_best_25']:>11.4g}{r['warm_best_25']:>11.4g}"
              f"{r[last]:>11.4g}")
    print(f"reached in {s['reached']} of {s['runs']} runs; median own trials needed {s['median_needed']:.0f} "
          f"(never counted as {s['trials'] + 1}); mean when reached {s['mean_needed_when_reached']}")


def plot(s: dict[str, Any], path: Path) -> None:
    fig, axes = report.figure(figsize=(8, 4.2))
    ax = axes[0][0]
    for i, r in enumerate(s["per_task"].values()):
        ys = [n if n is not None else s["trials"] + 5 for n in r["needed"]]
        ax.scatter([i] * len(ys), ys, s=30, alpha=0.7)
    ax.axhline(s["trials"], color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(s["tasks"])), s["tasks"], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"own trials to reach the cold {s['trials']}-trial best")
    ax.set_title(f"warm start from {s['imported']} imported trials (above the line: not reached)", fontsize=9)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.add_run_arguments(ap, report.RESULTS / "warm_start.json", DEFAULT_TASKS, seeds=5)
    args = ap.parse_args(argv)
    t0 = time.time()
    jobs = [(t, s, args.trials) for s in runner.seeds_of(args) for t in select(args.tasks)]
    runs, meta = runner.collect(args, jobs, run_one, lambda r: (r["task"], r["seed"]), lambda j: (j[0], j[1]),
                                "warm-start runs", {"tasks": select(args.tasks), "seeds": args.seeds,
                                                    "seed_offset": args.seed_offset, "trials": args.trials,
                                                    "imported": IMPORTED, "in_flight": 1})
    summary = summarize(runs, meta["trials"])
    print_table(summary)
    meta["wall_seconds"] = time.time() - t0
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs})
    plot(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
