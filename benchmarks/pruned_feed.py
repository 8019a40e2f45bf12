"""Should a pruned trial's last value feed the surrogate? Measured through the service.

One ``calibo serve`` (SQLite, one fit process); per seed, two studies that differ
only in ``pruner.feed_pruned`` (false: the default; true: a pruned trial told
with its last value is an observation at that value). Each runs the client's
``optimize`` with one worker (``--trials``, 80) on a real learning curve: an ``SGDClassifier``
(log loss) on scikit-learn's digits, trained epoch by epoch with
``partial_fit`` for up to ``--epochs`` (27) epochs, reporting the validation
log loss after each epoch; the pruner is ``sh`` (rungs 1, 3, 9; eta 3). Space:
``alpha`` (log 1e-6..1e-1), ``eta0`` (log 1e-4..1), ``learning_rate``
(constant / invscaling / adaptive).

Reported per variant, over ``--seeds`` (10): the best validation loss of a
trial completed within ``--budget`` (250) epochs (lower is better; the same
epoch budget for both), the epochs spent by all the trials, the pruned count, and
the paired difference (feed minus no feed) with a sign test. Writes
``benchmarks/results/pruned_feed.json`` and ``.png``.

    python -m benchmarks.pruned_feed [--seeds 10 --trials 60]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import report
from benchmarks.harness.servers import calibo_server

SPACE = {"alpha": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
         "eta0": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
         "learning_rate": {"type": "categorical", "choices": ["constant", "invscaling", "adaptive"]}}


def data(seed: int = 0) -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    sc = StandardScaler().fit(Xtr)
    return sc.transform(Xtr), sc.transform(Xva), ytr, yva


def objective_for(epochs: int, split: tuple[np.ndarray, ...], log: list[dict[str, Any]]):
    from sklearn.linear_model import SGDClassifier
    from sklearn.metrics import log_loss

    Xtr, Xva, ytr, yva = split
    classes = np.unique(ytr)

    def objective(params: dict[str, Any], reporter) -> float:
        from calibo import TrialPruned

        model = SGDClassifier(loss="log_loss", alpha=params["alpha"], eta0=params["eta0"],
                              learning_rate=params["learning_rate"], random_state=0)
        value, done = float("nan"), 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for epoch in range(1, epochs + 1):
                model.partial_fit(Xtr, ytr, classes=classes)
                value = float(min(log_loss(yva, model.predict_proba(Xva), labels=classes), 10.0))
                done = epoch
                if reporter.report(epoch, value):
                    log.append({"epochs": done, "pruned": True, "value": value})
                    raise TrialPruned()
        log.append({"epochs": done, "pruned": False, "value": value})
        return value

    return objective


def run_study(base: str, name: str, feed: bool, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from calibo import Client

    log: list[dict[str, Any]] = []
    with Client(base, retry_deadline=120) as c:
        study = c.create_study(name, SPACE, seed=seed, pruner={
            "name": "sh", "min_resource": 1, "max_resource": args.epochs, "reduction_factor": 3,
            "feed_pruned": feed})
        c.optimize(study, objective_for(args.epochs, data(0), log), n_trials=args.trials, n_workers=1)
    used, complete = 0, []
    for r in log:  # one worker: the log is in time order; the best completed within the epoch budget
        used += r["epochs"]
        if used > args.budget:
            break
        if not r["pruned"]:
            complete.append(r["value"])
    return {"seed": seed, "feed_pruned": feed, "best": min(complete) if complete else None,
            "epochs": sum(r["epochs"] for r in log), "pruned": sum(r["pruned"] for r in log),
            "trials": len(log)}


def sign_test(d: list[float]) -> dict[str, Any]:
    from scipy.stats import binomtest

    wins, losses = sum(x < 0 for x in d), sum(x > 0 for x in d)
    p = binomtest(wins, wins + losses).pvalue if wins + losses else 1.0
    return {"feed_better": wins, "feed_worse": losses, "ties": len(d) - wins - losses, "p": float(p)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=80, help="trials per study (enough to spend the budget)")
    ap.add_argument("--budget", type=int, default=250, help="epochs: the best completed trial within them")
    ap.add_argument("--epochs", type=int, default=27)
    ap.add_argument("--out", default=str(report.RESULTS / "pruned_feed.json"))
    args = ap.parse_args(argv)
    from tqdm import tqdm

    rows: list[dict[str, Any]] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp, \
            calibo_server(f"sqlite:///{tmp}/feed.db", Path(tmp), "feed", workers=1) as (base, _, _):
        jobs = [(s, f) for s in range(args.seeds) for f in (False, True)]
        for seed, feed in tqdm(jobs, desc="studies"):
            rows.append(run_study(base, f"feed-{feed}-{seed}", feed, seed, args))
    by = {f: [r for r in rows if r["feed_pruned"] is f] for f in (False, True)}
    summary = {}
    for f, rs in by.items():
        best = [r["best"] for r in rs if r["best"] is not None]
        summary[str(f).lower()] = {"best_mean": float(np.mean(best)), "best_median": float(np.median(best)),
                                   "epochs_mean": float(np.mean([r["epochs"] for r in rs])),
                                   "pruned_mean": float(np.mean([r["pruned"] for r in rs]))}
    diff = [t["best"] - f["best"] for f, t in zip(by[False], by[True], strict=True)
            if t["best"] is not None and f["best"] is not None]
    test = sign_test(diff)
    print(f"\nSGD on digits, sh pruner, {args.trials} trials x {args.seeds} seeds, one worker (sequential); "
          f"best = best completed within {args.budget} epochs")
    print(f"{'feed_pruned':12s} {'best loss mean':>15s} {'median':>8s} {'epochs':>8s} {'pruned':>7s}")
    for k, s in summary.items():
        print(f"{k:12s} {s['best_mean']:15.4f} {s['best_median']:8.4f} {s['epochs_mean']:8.0f} {s['pruned_mean']:7.1f}")
    print(f"paired (feed - no feed): mean {np.mean(diff):+.4f}; feed better on {test['feed_better']}, "
          f"worse on {test['feed_worse']} seeds (sign test p={test['p']:.3f})")
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": vars(args), "seconds": time.time() - t0,
            "in_flight": 1}
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "sign_test": test,
                                       "paired_mean": float(np.mean(diff)), "rows": rows})
    fig, axes = report.figure(figsize=(5, 4))
    ax = axes[0][0]
    for i, f in enumerate((False, True)):
        best = [r["best"] for r in by[f] if r["best"] is not None]
        ax.scatter(np.full(len(best), i) + np.linspace(-0.1, 0.1, len(best)), best, s=14)
        ax.hlines(np.mean(best), i - 0.2, i + 0.2, color="k")
    ax.set_xticks([0, 1], ["no feed (default)", "feed_pruned"])
    ax.set_ylabel("best validation log loss (lower is better)")
    ax.set_title(f"pruned values as observations: {args.seeds} seeds")
    report.save_figure(fig, out.with_suffix(".png"), dpi=110)
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
