"""A remote worker whose trials report every epoch and stop when the server prunes them.

Each trial trains scikit-learn's ``SGDClassifier`` (logistic loss) on the digits
data set one epoch at a time (``partial_fit``) and reports the validation log
loss after each epoch. The study is created with the successive-halving pruner
``sh+`` (``min_resource`` 1, ``max_resource`` the epoch budget, reduction
factor 3): after each report the server answers whether the trial is among the
worse ones seen at that epoch, and the objective then raises ``TrialPruned``.
The trial is told ``state="pruned"`` with its last loss, which the server can
still learn from, and the worker goes on with the next trial, having spent
fewer epochs on configurations that are plainly worse.

Run it against a server with pruning support::

    make run                                  # serves on http://127.0.0.1:8000
    .venv/bin/python examples/pruning_worker.py --trials 40 --workers 2

or on other machines at the same time (``pip install calibo scikit-learn``)::

    CALIBO_URL=http://server:8000 python examples/pruning_worker.py --trials 40 --workers 4

Give every machine the same ``--study``, ``--seed`` and ``--epochs``: a
different definition under the same name is refused with 409.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from calibo import CaliboError, Client, Conflict, Reporter, TrialPruned, TrialRecord

SPACE: dict[str, Any] = {
    "alpha": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
    "eta0": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "learning_rate": {"type": "categorical", "choices": ["constant", "invscaling"]},
}


def pruner(epochs: int) -> dict[str, Any]:
    """Successive halving with the epoch as resource: rungs at 1, 3, 9, 27 for 27 epochs."""
    return {"name": "sh+", "min_resource": 1, "max_resource": epochs, "reduction_factor": 3}


Objective = Callable[[dict[str, Any], Reporter], float]


def make_objective(epochs: int, seed: int) -> Objective:
    """Validation log loss of SGD logistic regression on digits, reported every epoch.

    scikit-learn is imported only here, so ``--help`` works without it.
    """
    try:
        import numpy as np
        from sklearn.datasets import load_digits
        from sklearn.linear_model import SGDClassifier
        from sklearn.metrics import log_loss
        from sklearn.model_selection import train_test_split
        from sklearn.preprocessing import StandardScaler
    except ImportError as exc:
        raise SystemExit("this example needs scikit-learn: pip install scikit-learn") from exc

    features, labels = load_digits(return_X_y=True)
    x_train, x_valid, y_train, y_valid = train_test_split(
        features, labels, test_size=0.3, stratify=labels, random_state=seed
    )
    scaler = StandardScaler().fit(x_train)
    x_train, x_valid = scaler.transform(x_train), scaler.transform(x_valid)
    classes = np.unique(labels)

    def objective(params: dict[str, Any], reporter: Reporter) -> float:
        model = SGDClassifier(
            loss="log_loss",
            alpha=params["alpha"],
            eta0=params["eta0"],
            learning_rate=params["learning_rate"],
            random_state=seed,
        )
        order = np.random.default_rng([seed, reporter.trial.number])
        loss = float("nan")
        for epoch in range(1, epochs + 1):  # the step is the number of epochs trained
            shuffled = order.permutation(len(y_train))
            model.partial_fit(x_train[shuffled], y_train[shuffled], classes=classes)
            loss = float(log_loss(y_valid, model.predict_proba(x_valid), labels=classes))
            if reporter.report(epoch, loss):
                raise TrialPruned(f"pruned after epoch {epoch}")
        return loss

    return objective


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Evaluate trials of a pruned calibo study on this machine.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("CALIBO_URL", "http://127.0.0.1:8000"),
        help="server URL (env CALIBO_URL)",
    )
    parser.add_argument("--token", default=None, help="API token (default: env CALIBO_TOKEN)")
    parser.add_argument("--study", default="pruning-sgd-digits", help="study name")
    parser.add_argument("--trials", type=int, default=40, help="trials this machine evaluates")
    parser.add_argument("--workers", type=int, default=1, help="trials evaluated at once here")
    parser.add_argument("--epochs", type=int, default=27, help="epochs of a trial not pruned")
    parser.add_argument("--seed", type=int, default=0, help="the study's seed (same everywhere)")
    args = parser.parse_args(argv)
    if args.trials < 0 or args.workers < 1 or args.epochs < 1:
        parser.error("--trials must be >= 0, --workers >= 1 and --epochs >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    objective = make_objective(args.epochs, args.seed)
    printing = threading.Lock()

    def show(trial: TrialRecord) -> None:
        value = trial.value
        shown = f"{value:.4f}" if isinstance(value, (int, float)) else "-"
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in trial.params.items())
        with printing:
            print(f"trial {trial.number:>4}  {trial.state:<8} {shown:>9}  {params}")

    with Client(args.url, token=args.token) as calibo:
        try:
            study = calibo.create_study(
                args.study, SPACE, "minimize", seed=args.seed, pruner=pruner(args.epochs)
            )
        except Conflict as exc:
            print(
                f"study {args.study!r} exists with another definition ({exc}); "
                "use the same options as the other machines, or another --study",
                file=sys.stderr,
            )
            return 2
        except CaliboError as exc:
            print(f"cannot create study {args.study!r} on {args.url}: {exc}", file=sys.stderr)
            return 1
        print(
            f"study {study.name!r} (id {study.id}) on {args.url}: {args.trials} trials "
            f"of up to {args.epochs} epochs, pruner sh+"
        )
        try:
            results = study.optimize(
                objective, n_trials=args.trials, n_workers=args.workers, callback=show
            )
        except CaliboError as exc:
            print(f"stopped: {exc}", file=sys.stderr)
            return 1
        states = Counter(r.state for r in results)
        print(
            f"this machine: {states['complete']} complete, {states['pruned']} pruned, "
            f"{states['failed']} failed"
        )
        best = study.best_trial
        if best is None:
            print("no complete trial yet")
        else:
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in best.params.items())
            print(
                f"best so far (all machines): trial {best.number} log loss {best.value:.4f}"
            )
            print(f"  {params}")
    return 0


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    sys.exit(main())
