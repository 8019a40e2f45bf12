"""Early coverage: how well each conformal method below the split covers the next trial, before ACI.

The conformal methods of the adaptive schedule's early phase, compared on the same histories at
their nominal levels, with no adaptive alpha: what each contributes by itself, apart from what ACI
later corrects and from the staleness of a fit with trials in flight. Each (task, seed) runs one
sequential in-process study (``Optimizer``, the settings of ``--settings``: the default's
schedule unless told otherwise) for ``--trials`` trials. Then, for every prefix of ``n``
observations from ``--from`` on, each method is fitted on the first ``n`` (the study's own warp,
surrogate and levels) and its intervals at the ``n+1``-th configuration are checked against that
trial's value:

* ``raw``: the surrogate's own quantiles (the default below ``conformalize_from``);
* ``cv+``: CV+ with ``cv_folds`` fold models (the default from ``conformalize_from`` to ``split_from``);
* ``jackknife``: every observation scored by the shown model's exact leave-one-out prediction
  (``early_scores="loo"``);
* ``jackknife+``: CV+ with one fold per observation (Barber et al. 2021): each candidate's interval
  from the leave-one-out models' own predictions there, not the shown model's.

Reported per method and per range of ``n`` (the next trial quasi-random, ``n < n_warmup``;
chosen by the model, below 32; from 32), pooled over tasks and seeds, separately for the
synthetic and the model-tuning tasks: coverage of each interval pair, the calibration gap (mean
over pairs of |coverage - nominal|) and the median width of each pair (in warped units).

    python benchmarks/early_coverage.py --workers 2
    python benchmarks/early_coverage.py --tasks branin,hgb_wine --seeds 1 --trials 30

Writes benchmarks/results/early_coverage.json and .png.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.real_tasks as real_tasks  # noqa: E402  (registers the model-tuning tasks)
from benchmarks.runner import run_pool  # noqa: E402
from benchmarks.search import sequential_study  # noqa: E402
from benchmarks.tasks import TASKS  # noqa: E402
from calibo.engine import metrics  # noqa: E402
from calibo.engine.conformal import Bounds, conformalize, pair_alphas  # noqa: E402
from calibo.engine.surrogates import make_surrogate  # noqa: E402
from calibo.engine.warp import fit_warp  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("raw", "cv+", "jackknife", "jackknife+")
DEFAULT_TASKS = "forrester,branin,hartmann6,mixed,hgb_wine,dt_diabetes,lgbm_diabetes,sgd_wine"


def _interval_ends(Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper end of each pair (widest first) of one row of quantiles (1, L)."""
    L = Q.shape[1]
    return Q[0, : L // 2], Q[0, L - 1 : L // 2 - 1 : -1]


def _fold_quantiles(cf, x: np.ndarray) -> np.ndarray:
    return np.stack([m.predict_quantiles(x) for m in cf.fold_models])


def prefix_intervals(cfg, levels: np.ndarray, X: np.ndarray, y: np.ndarray, x: np.ndarray,
                     seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each method's intervals at ``x`` (1, F), fitted on ``(X, y)`` at the nominal alphas."""
    alphas = pair_alphas(levels)

    def make():
        return make_surrogate(cfg.surrogate, levels, seed, **cfg.surrogate_options)

    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    jk = conformalize(make, X, y, "jackknife", seed)  # the one fit that tunes the hyperparameters
    raw = jk.model.predict_quantiles(x)
    out["raw"] = _interval_ends(raw)
    if jk.method == "jackknife":  # a surrogate without the closed form falls back to CV+: not reported
        out["jackknife"] = _interval_ends(Bounds("jackknife", raw, jk.scores).at(alphas))
    for name, folds in (("cv+", cfg.cv_folds), ("jackknife+", X.shape[0])):
        # the same full model (same data, seed and tuned kernel) conditioned again, not tuned again
        cf = conformalize(jk.model.fold_clone, X, y, "cv+", seed, k_folds=folds)
        b = Bounds("cv+", cf.model.predict_quantiles(x), cf.scores, _fold_quantiles(cf, x), cf.fold_of)
        out[name] = _interval_ends(b.at(alphas))
    return out


def run(task: str, seed: int, settings: dict[str, Any], trials: int, start: int) -> dict[str, Any]:
    t = TASKS[task]
    opt = sequential_study(task, trials, seed, settings)[0]
    cfg, space, obs = opt.config, opt.space, opt.observations
    if cfg.warp_reference != "observed" or opt.multi:
        raise ValueError("early_coverage measures one objective with the observed warp reference")
    sign = 1.0 if t.direction == "minimize" else -1.0
    X_all = space.features(space.to_unit([p for p, _ in obs]))
    V = sign * np.array([v for _, v in obs], dtype=float)
    levels = cfg.level_grid
    rows = []
    for n in range(start, len(obs)):
        warp = fit_warp(cfg.warp, V[:n], None)
        y, y_next = warp.forward(V[:n]), float(warp.forward(V[n : n + 1])[0])
        ends = prefix_intervals(cfg, levels, X_all[:n], y, X_all[n : n + 1], 1000 * seed + n)
        rows.append({"n": n, **{m: {"covered": [bool(lo <= y_next <= hi) for lo, hi in zip(*e, strict=True)],
                                    "width": [float(hi - lo) for lo, hi in zip(*e, strict=True)]}
                                for m, e in ends.items()}})
    return {"task": task, "seed": seed, "n_warmup": cfg.n_warmup,
            "nominal": (1.0 - pair_alphas(levels)).tolist(), "rows": rows}


def phase(n: int, n_warmup: int) -> str:
    if n < n_warmup:
        return "quasi-random next"
    return "model's next, n < 32" if n < 32 else "model's next, n >= 32"


PHASES = ("quasi-random next", "model's next, n < 32", "model's next, n >= 32")


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per suite (synthetic, model tuning) and phase: coverage, gap and median width per method."""
    out: dict[str, Any] = {}
    for suite in ("synthetic", "model tuning"):
        sel = [r for r in runs if (r["task"] in real_tasks.REAL_TASKS) == (suite == "model tuning")]
        if not sel:
            continue
        nominal = np.asarray(sel[0]["nominal"])
        out[suite] = {}
        for ph in PHASES:
            rows = [row for r in sel for row in r["rows"] if phase(row["n"], r["n_warmup"]) == ph]
            if not rows:
                continue
            out[suite][ph] = {"predictions": len(rows)}
            for m in METHODS:
                have = [row[m] for row in rows if m in row]
                if not have:
                    continue
                cov = metrics.coverage([h["covered"] for h in have])
                out[suite][ph][m] = {"coverage": cov.round(4).tolist(),
                                     "gap": metrics.coverage_gap(cov, nominal),
                                     "median_width": np.median([h["width"] for h in have], axis=0).round(4).tolist()}
    return out


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(5.2 * len(summary), 3.6), squeeze=False)
    width = 0.8 / len(METHODS)
    for ax, (suite, by) in zip(axes[0], summary.items(), strict=True):
        phases = [p for p in PHASES if p in by]
        for k, m in enumerate(METHODS):
            ax.bar(np.arange(len(phases)) + k * width, [by[p].get(m, {}).get("gap", np.nan) for p in phases],
                   width, label=m)
        ax.set_xticks(np.arange(len(phases)) + 0.4 - width / 2, phases, fontsize=7)
        ax.set_title(f"{suite}: calibration gap at nominal alpha")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--from", dest="start", type=int, default=10, help="the smallest prefix fitted")
    ap.add_argument("--settings", default="{}", help="JSON study settings of the studies whose histories are used")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "early_coverage.json"))
    args = ap.parse_args()
    settings = json.loads(args.settings)
    if not isinstance(settings, dict):
        ap.error("--settings must be a JSON object")
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        ap.error(f"unknown task(s) {unknown}; known: {sorted(TASKS)}")
    if args.start < 4 or args.start >= args.trials:
        ap.error("--from must be at least 4 (the fewest a fit takes) and below --trials")
    jobs = [(t, s, settings, args.trials, args.start) for t in tasks for s in range(args.seeds)]
    runs = sorted(run_pool(run, jobs, args.workers, "studies"), key=lambda r: (r["task"], r["seed"]))
    summary = summarise(runs)
    print(f"sequential (1 in flight), {args.trials} trials, {args.seeds} seeds per task, prefixes from "
          f"{args.start}; nominal alphas, no ACI")
    print(f"{'suite':13s} {'next trial':22s} {'method':11s} {'n':>4s} {'gap':>6s} "
          f"{'coverage 90/70/50/30/10':>27s} {'median width 90/50/10':>24s}")
    for suite, by in summary.items():
        for ph, s in by.items():
            for m in METHODS:
                if m not in s:
                    continue
                cov = "/".join(f"{c:.2f}" for c in s[m]["coverage"])
                w = s[m]["median_width"]
                print(f"{suite:13s} {ph:22s} {m:11s} {s['predictions']:4d} {s[m]['gap']:6.3f} {cov:>27s} "
                      f"{f'{w[0]:.3f}/{w[len(w) // 2]:.3f}/{w[-1]:.3f}':>24s}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"tasks": tasks, "seeds": args.seeds, "trials": args.trials, "from": args.start,
            "settings": settings, "in_flight": 1}
    out.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1))
    plot(summary, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
