"""A tuning worker you start on as many machines as you like, all against one server.

Each machine runs the same command. The first to arrive creates the study; the
others find the identical definition and join it (create is idempotent: 201 the
first time, 200 after). Every worker then asks the server for a configuration,
evaluates it locally, and tells the result, so the server's calibrated surrogate
learns from all machines at once.

Run it against a local server::

    make run                                  # serves on http://127.0.0.1:8000
    .venv/bin/python examples/remote_worker.py --study branin-demo --trials 30 --workers 2

and, at the same time, on another machine (only ``pip install calibo`` needed,
i.e. httpx; add scikit-learn for ``--objective digits``)::

    CALIBO_URL=http://server:8000 python examples/remote_worker.py \\
        --study branin-demo --trials 30 --workers 4

``--objective digits`` tunes an SVC or a histogram gradient-boosting classifier
on scikit-learn's digits by 3-fold cross-validated error, over a conditional
space: ``model`` picks the classifier, and each trial holds only that
classifier's parameters (``svc_C`` and ``svc_gamma``, or ``learning_rate``,
``max_leaf_nodes`` and ``max_iter``). When the server sets
``CALIBO_API_TOKENS``, pass ``--token`` (or set ``CALIBO_TOKEN``). Give every
machine the same ``--study``, ``--objective`` and ``--seed`` (and surrogate /
acquisition if any): a different definition under the same name is refused
with 409.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from calibo import CaliboError, Client, Conflict, TrialRecord

BRANIN_SPACE: dict[str, Any] = {
    "x1": {"type": "float", "low": -5.0, "high": 10.0},
    "x2": {"type": "float", "low": 0.0, "high": 15.0},
}

# Two models, each with its own parameters: a conditional space. A trial holds ``model`` and only the
# parameters of the model it names (the others are inactive: not asked, not told).
SVC_ONLY = {"parent": "model", "values": ["svc"]}
BOOSTING_ONLY = {"parent": "model", "values": ["boosting"]}
DIGITS_SPACE: dict[str, Any] = {
    "model": {"type": "categorical", "choices": ["svc", "boosting"]},
    "svc_C": {"type": "float", "low": 1e-2, "high": 1e3, "log": True, "condition": SVC_ONLY},
    "svc_gamma": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True, "condition": SVC_ONLY},
    "learning_rate": {"type": "float", "low": 1e-2, "high": 0.5, "log": True, "condition": BOOSTING_ONLY},
    "max_leaf_nodes": {"type": "int", "low": 8, "high": 64, "condition": BOOSTING_ONLY},
    "max_iter": {"type": "int", "low": 10, "high": 200, "condition": BOOSTING_ONLY},
}


def branin(params: dict[str, Any]) -> float:
    """Branin-Hoo; its minimum, 0.397887, is reached at three points."""
    x1, x2 = params["x1"], params["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def make_digits_objective() -> Callable[[dict[str, Any]], float]:
    """3-fold CV error on digits; scikit-learn is imported only when asked for."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.ensemble import HistGradientBoostingClassifier
        from sklearn.model_selection import cross_val_score
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVC
    except ImportError as exc:
        raise SystemExit("--objective digits needs scikit-learn: pip install scikit-learn") from exc

    features, labels = load_digits(return_X_y=True)

    def digits(params: dict[str, Any]) -> float:
        if params["model"] == "svc":
            model = make_pipeline(
                StandardScaler(), SVC(C=params["svc_C"], gamma=params["svc_gamma"])
            )
        else:
            model = HistGradientBoostingClassifier(
                learning_rate=params["learning_rate"],
                max_leaf_nodes=int(params["max_leaf_nodes"]),
                max_iter=int(params["max_iter"]),
                random_state=0,
            )
        return 1.0 - float(cross_val_score(model, features, labels, cv=3).mean())

    return digits


OBJECTIVES: dict[str, tuple[dict[str, Any], Callable[[], Callable[[dict[str, Any]], float]]]] = {
    "branin": (BRANIN_SPACE, lambda: branin),
    "digits": (DIGITS_SPACE, make_digits_objective),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Evaluate trials of a calibo study on this machine.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("CALIBO_URL", "http://127.0.0.1:8000"),
        help="server URL (env CALIBO_URL)",
    )
    parser.add_argument("--token", default=None, help="API token (default: env CALIBO_TOKEN)")
    parser.add_argument("--study", default=None, help="study name (default: remote-OBJECTIVE)")
    parser.add_argument("--objective", choices=sorted(OBJECTIVES), default="branin")
    parser.add_argument("--trials", type=int, default=30, help="trials this machine evaluates")
    parser.add_argument("--workers", type=int, default=1, help="trials evaluated at once here")
    parser.add_argument("--seed", type=int, default=0, help="the study's seed (same everywhere)")
    parser.add_argument("--surrogate", default=None, help="server default when not given")
    parser.add_argument("--acquisition", default=None, help="server default when not given")
    args = parser.parse_args(argv)
    if args.trials < 0 or args.workers < 1:
        parser.error("--trials must be >= 0 and --workers >= 1")
    args.study = args.study or f"remote-{args.objective}"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    space, build = OBJECTIVES[args.objective]
    objective = build()
    printing = threading.Lock()

    def show(trial: TrialRecord) -> None:
        value = trial.value
        shown = f"{value:.6g}" if isinstance(value, (int, float)) else "-"
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in trial.params.items())
        with printing:
            print(f"trial {trial.number:>4}  {trial.state:<8} {shown:>12}  {params}")

    with Client(args.url, token=args.token) as calibo:
        try:
            study = calibo.create_study(
                args.study,
                space,
                "minimize",
                surrogate=args.surrogate,
                acquisition=args.acquisition,
                seed=args.seed,
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
        print(f"study {study.name!r} (id {study.id}) on {args.url}: {args.trials} trials")
        try:
            results = study.optimize(
                objective, n_trials=args.trials, n_workers=args.workers, callback=show
            )
        except CaliboError as exc:
            print(f"stopped: {exc}", file=sys.stderr)
            return 1
        done = [r for r in results if r.state == "complete"]
        print(f"this machine: {len(done)} complete, {len(results) - len(done)} failed")
        best = study.best_trial
        if best is None:
            print("no complete trial yet")
        else:
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in best.params.items())
            print(f"best so far (all machines): trial {best.number} value {best.value:.6g}")
            print(f"  {params}")
    return 0


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    sys.exit(main())
