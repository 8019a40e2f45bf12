"""A worker for a study with two objectives: a classifier's error against its size.

Every machine runs the same command; the first creates the study, the others join it. Each trial
trains a small neural network on scikit-learn's digits and tells two values: the 3-fold
cross-validated error and the log10 of the network's parameter count. calibo fits one calibrated
surrogate per objective and asks where the expected hypervolume improvement is largest; at the end
the worker prints the Pareto front (every trial no other beats on both).

    make run                                   # serves on http://127.0.0.1:8000
    .venv/bin/python examples/trade_off_worker.py --study mlp-error-vs-size --trials 40 --workers 2

Needs scikit-learn on the worker (``pip install calibo scikit-learn``). The dashboard at
``/dashboard`` draws the front and the hypervolume as trials come in.
"""

from __future__ import annotations

import argparse
import math
import os
import warnings

from calibo import Client

SPACE = {
    "layers": {"type": "int", "low": 1, "high": 3},
    "units": {"type": "int", "low": 4, "high": 256, "log": True},
    "alpha": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
}


def error_and_size(p: dict) -> list[float]:
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import cross_val_score
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    layers = (int(p["units"]),) * int(p["layers"])
    model = make_pipeline(StandardScaler(), MLPClassifier(layers, alpha=p["alpha"], learning_rate_init=p["lr"],
                                                          max_iter=100, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        accuracy = cross_val_score(model, X, y, cv=3).mean()
    sizes = (X.shape[1], *layers, 10)
    n_params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    return [1.0 - float(accuracy), math.log10(n_params)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("CALIBO_URL", "http://127.0.0.1:8000"))
    ap.add_argument("--token", default=os.environ.get("CALIBO_TOKEN"))
    ap.add_argument("--study", default="mlp-error-vs-size")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--workers", type=int, default=1, help="trials evaluated at once by this process")
    args = ap.parse_args()
    with Client(args.url, token=args.token) as client:
        study = client.create_study(args.study, SPACE, directions=["minimize", "minimize"], seed=0)
        study.optimize(error_and_size, n_trials=args.trials, n_workers=args.workers)
        front = study.pareto()
        print(f"{len(front.trials)} trials on the front, hypervolume {front.hypervolume:.4g} "
              f"(reference {front.reference_point}):")
        for t in sorted(front.trials, key=lambda t: t.values[1]):
            print(f"  error {t.values[0]:.4f}  log10 params {t.values[1]:.2f}  {t.params}")


if __name__ == "__main__":
    main()
