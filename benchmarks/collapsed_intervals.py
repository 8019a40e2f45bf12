"""Collapsed intervals: how often a shown interval has zero width, and whether it covers.

A pair's conformal set is empty when the correction is negative and larger than half the raw
interval's width at the candidate; a prediction then shows the zero-width interval at the
midpoint of its ends (``engine.conformal``). With ``split_scores="held-out"`` the correction is
one additive amount per pair, the same for every candidate: where the search converges, the raw
intervals at the asked points are the narrowest of all, and that happens most. The default,
``transported``, scales it at each candidate by the refit's spread over the split model's.

Every (task, seed, setting) is one sequential in-process study (``Optimizer``) of ``--trials``
trials. For each conformalized prediction (method not ``raw``) the told value is checked against
each shown interval; reported per task and setting, pooled over seeds: coverage of each interval
pair, the calibration gap (mean over pairs of |coverage - nominal|), how many of the widest
(90%) intervals had zero width, how many of those missed, how many the raw outer quantiles
(the 5% and 95% levels) would have covered, and the asked point's distance to the nearest earlier
observation (unit cube).

    python benchmarks/collapsed_intervals.py --tasks forrester,branin,hartmann6,mixed --seeds 3 \\
        --settings '{"default": {}, "declustered": {"warp_reference": "declustered"}}'

Writes benchmarks/results/collapsed_intervals.json and .png.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tasks import TASKS  # noqa: E402
from calibo.engine import Optimizer, SearchSpace  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_SETTINGS = {"default": {}, "declustered": {"warp_reference": "declustered"}}


def run(task: str, seed: int, name: str, settings: dict[str, Any], trials: int) -> dict[str, Any]:
    t = TASKS[task]
    space = SearchSpace.from_dict(t.space)
    opt = Optimizer(space, direction=t.direction, seed=seed, **settings)
    seen: list[np.ndarray] = []
    rows = []
    for _ in range(trials):
        s = opt.ask()[0]
        y = float(t.objective(s.params))
        u = space.to_unit([s.params])[0]
        p = s.prediction
        if p and p.get("method", "raw") != "raw":
            iv = p["intervals"]
            nearest = float(np.min(np.linalg.norm(np.asarray(seen) - u, axis=1)))
            rows.append({
                "covered": [bool(i["lower"] <= y <= i["upper"]) for i in iv],
                "zero": [bool(i["upper"] - i["lower"] <= 0.0) for i in iv],
                "raw_covers": bool(min(p["quantiles"]) <= y <= max(p["quantiles"])),
                "nearest": nearest,
                "nominal": [i["coverage"] for i in iv],
            })
        seen.append(u)
        opt.tell(s.params, y, s.prediction)
    return {"task": task, "seed": seed, "setting": name, "rows": rows}


def summarise(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (task, name) in sorted({(r["task"], r["setting"]) for r in runs}):
        rows = [x for r in runs if r["task"] == task and r["setting"] == name for x in r["rows"]]
        if not rows:
            continue
        cov = np.mean([x["covered"] for x in rows], axis=0)
        nominal = np.asarray(rows[0]["nominal"])
        zero = [x for x in rows if x["zero"][0]]
        out.setdefault(task, {})[name] = {
            "n": len(rows),
            "coverage": cov.round(4).tolist(),
            "gap": float(np.abs(cov - nominal).mean()),
            "zero_width_90": len(zero),
            "zero_width_90_missed": sum(not x["covered"][0] for x in zero),
            "zero_width_90_raw_covers": sum(x["raw_covers"] for x in zero),
            "nearest": float(np.mean([x["nearest"] for x in rows])),
        }
    return out


def plot(summary: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(summary)
    names = sorted({n for t in tasks for n in summary[t]})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        xs = np.arange(len(tasks)) + k * width
        axes[0].bar(xs, [summary[t].get(name, {}).get("gap", np.nan) for t in tasks], width, label=name)
        frac = [summary[t][name]["zero_width_90"] / summary[t][name]["n"] if name in summary[t] else np.nan
                for t in tasks]
        axes[1].bar(xs, frac, width, label=name)
    for ax, title in zip(axes, ("calibration gap", "share of 90% intervals with zero width"), strict=True):
        ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks)
        ax.set_title(title)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="branin,forrester")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--settings", default=json.dumps(DEFAULT_SETTINGS),
                    help="JSON object: a name for each study-settings object to compare")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "collapsed_intervals.json"))
    args = ap.parse_args()
    settings = json.loads(args.settings)
    if not isinstance(settings, dict) or not all(isinstance(v, dict) for v in settings.values()):
        ap.error("--settings must be a JSON object of name -> settings object")
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        ap.error(f"unknown task(s) {unknown}; known: {sorted(TASKS)}")
    jobs = [(t, s, n, cfg, args.trials) for t in tasks for s in range(args.seeds) for n, cfg in settings.items()]
    from tqdm import tqdm

    runs = []
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(run, *j) for j in jobs]
        for f in tqdm(as_completed(futures), total=len(futures), desc="runs"):
            runs.append(f.result())
    summary = summarise(runs)
    print(f"sequential, {args.trials} trials, {args.seeds} seeds per task; conformalized predictions only")
    print(f"{'task':12s} {'setting':14s} {'n':>4s} {'gap':>6s} {'coverage 90/70/50/30/10':>27s} "
          f"{'zero 90%':>8s} {'missed':>6s} {'raw covers':>10s} {'nearest':>8s}")
    for task, by in summary.items():
        for name, s in by.items():
            cov = "/".join(f"{c:.2f}" for c in s["coverage"])
            print(f"{task:12s} {name:14s} {s['n']:4d} {s['gap']:6.3f} {cov:>27s} {s['zero_width_90']:8d} "
                  f"{s['zero_width_90_missed']:6d} {s['zero_width_90_raw_covers']:10d} {s['nearest']:8.4f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"tasks": tasks, "seeds": args.seeds, "trials": args.trials, "settings": settings, "in_flight": 1}
    out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1))
    plot(summary, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
