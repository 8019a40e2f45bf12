"""Benchmark tasks: the papers' synthetic functions and real tuning on scikit-learn datasets.

Every task is deterministic given its parameters and is minimised (losses and
1 - accuracy). Spaces are in calibo's format.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Task:
    name: str
    space: dict[str, dict[str, Any]]
    objective: Callable[[dict[str, Any]], float]
    optimum: float | None = None
    direction: str = "minimize"


# ------------------------------------------------------------------ synthetic
def branin(p: dict[str, Any]) -> float:
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_H6_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                  [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_H6_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                         [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(p: dict[str, Any]) -> float:
    x = np.array([p[f"x{i}"] for i in range(6)])
    return float(-np.sum(_H6_ALPHA * np.exp(-np.sum(_H6_A * (x - _H6_P) ** 2, axis=1))))


def ackley5(p: dict[str, Any]) -> float:
    x = np.array([p[f"x{i}"] for i in range(5)])
    d = x.size
    return float(-20 * np.exp(-0.2 * np.sqrt(np.sum(x**2) / d)) - np.exp(np.sum(np.cos(2 * np.pi * x)) / d)
                 + 20 + math.e)


def mixed(p: dict[str, Any]) -> float:
    """A mixed categorical + numeric surface.

    ``optimizer`` (3 choices) shifts and rescales a Branin-like valley in
    (log10 lr, width); ``activation`` (4 choices) adds an offset that interacts
    with ``depth`` (an int) - the best depth differs per activation; ``dropout``
    (a float) adds a quadratic whose centre depends on the optimizer. The
    minimum is 0 at optimizer=adam, activation=gelu, depth=6, dropout=0.2,
    lr=1e-3 and width=0.5.
    """
    opt_shift = {"sgd": (0.8, 1.6, 0.35), "adam": (0.0, 1.0, 0.2), "rmsprop": (0.4, 1.3, 0.1)}
    act = {"relu": (0.3, 4), "gelu": (0.0, 6), "tanh": (0.6, 3), "sigmoid": (1.2, 2)}
    s, scale, drop_c = opt_shift[p["optimizer"]]
    off, best_depth = act[p["activation"]]
    u = math.log10(p["lr"]) + 3.0  # 0 at lr = 1e-3
    v = p["width"] - 0.5
    valley = scale * ((u - 0.8 * v) ** 2 + 2.0 * v**2 + 0.3 * (1 - math.cos(3 * u)))
    return valley + s + off + 0.08 * (p["depth"] - best_depth) ** 2 + 4.0 * (p["dropout"] - drop_c) ** 2


# Calibrated BO (paper 004), Table 1: Forrester 1-D, Ackley 2-D, Alpine-1 10-D (Surjanovic & Bingham).
def forrester(p: dict[str, Any]) -> float:
    """(6x - 2)^2 sin(12x - 4) on [0, 1]; global minimum -6.02074 at x = 0.75725."""
    x = p["x"]
    return (6 * x - 2) ** 2 * math.sin(12 * x - 4)


def ackley2(p: dict[str, Any]) -> float:
    """Ackley (a=20, b=0.2, c=2 pi) in 2-D on [-32.768, 32.768]^2; minimum 0 at the origin."""
    x = np.array([p["x0"], p["x1"]])
    return float(-20 * np.exp(-0.2 * np.sqrt(np.mean(x**2))) - np.exp(np.mean(np.cos(2 * np.pi * x)))
                 + 20 + math.e)


def alpine10(p: dict[str, Any]) -> float:
    """Alpine-1, sum_i |x_i sin(x_i) + 0.1 x_i|, in 10-D on [-10, 10]^10; minimum 0 at the origin."""
    x = np.array([p[f"x{i}"] for i in range(10)])
    return float(np.sum(np.abs(x * np.sin(x) + 0.1 * x)))


def camel6(p: dict[str, Any]) -> float:
    """Six-hump camel on [-3, 3] x [-2, 2]: six local minima, two global ones of -1.031628 at +-(0.0898, -0.7126)."""
    x1, x2 = p["x1"], p["x2"]
    return (4 - 2.1 * x1**2 + x1**4 / 3) * x1**2 + x1 * x2 + (-4 + 4 * x2**2) * x2**2


def levy4(p: dict[str, Any]) -> float:
    """Levy in 4-D on [-10, 10]^4 (Surjanovic & Bingham): many local minima; minimum 0 at (1, 1, 1, 1)."""
    w = 1 + (np.array([p[f"x{i}"] for i in range(4)]) - 1) / 4
    inner = np.sum((w[:-1] - 1) ** 2 * (1 + 10 * np.sin(np.pi * w[:-1] + 1) ** 2))
    return float(np.sin(np.pi * w[0]) ** 2 + inner + (w[-1] - 1) ** 2 * (1 + np.sin(2 * np.pi * w[-1]) ** 2))


# ----------------------------------------------------------------- real tuning
@cache
def _dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_wine

    if name == "digits":
        X, y = load_digits(return_X_y=True)
        # a fixed, stratified 600-sample subset keeps one evaluation well under a second
        rng = np.random.default_rng(0)
        idx = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:60] for c in range(10)])
        return X[idx], y[idx]
    loaders = {"breast_cancer": load_breast_cancer, "diabetes": load_diabetes, "wine": load_wine}
    return loaders[name](return_X_y=True)


def _cv_error(model, data: str) -> float:
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    X, y = _dataset(data)
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    return float(1.0 - cross_val_score(model, X, y, cv=cv, n_jobs=1).mean())


def _cv_nmse(model, data: str) -> float:
    """3-fold CV mean squared error over the target's variance (1 - R^2 out of fold; 1 = predicting the mean)."""
    from sklearn.model_selection import KFold, cross_val_score

    X, y = _dataset(data)
    cv = KFold(3, shuffle=True, random_state=0)
    mse = -cross_val_score(model, X, y, cv=cv, scoring="neg_mean_squared_error", n_jobs=1).mean()
    return float(mse / np.var(y))


def lgbm_digits(p: dict[str, Any]) -> float:
    import lightgbm as lgb

    model = lgb.LGBMClassifier(
        learning_rate=p["learning_rate"], num_leaves=p["num_leaves"], min_child_samples=p["min_child_samples"],
        subsample=p["subsample"], subsample_freq=1, colsample_bytree=p["colsample_bytree"],
        reg_lambda=p["reg_lambda"], n_estimators=p["n_estimators"], n_jobs=1, verbose=-1, random_state=0,
    )
    return _cv_error(model, "digits")


def rf_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.ensemble import RandomForestClassifier

    mf = None if p["max_features"] == "all" else p["max_features"]
    model = RandomForestClassifier(
        n_estimators=p["n_estimators"], max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"],
        max_features=mf, criterion=p["criterion"], bootstrap=p["bootstrap"], n_jobs=1, random_state=0,
    )
    return _cv_error(model, "breast_cancer")


# Cheap real tuning for the crowd benchmark (benchmarks/crowd_search.py): each evaluation
# well under 0.3 s on one core (mean over uniform draws: SVC 0.07 s, GBR 0.14 s, kNN 0.03 s, ElasticNet 0.04 s).
def svc_digits(p: dict[str, Any]) -> float:
    from sklearn.svm import SVC

    return _cv_error(SVC(C=p["C"], gamma=p["gamma"]), "digits")


def gbr_diabetes(p: dict[str, Any]) -> float:
    from sklearn.ensemble import GradientBoostingRegressor

    model = GradientBoostingRegressor(
        learning_rate=p["learning_rate"], n_estimators=p["n_estimators"], max_depth=p["max_depth"],
        subsample=p["subsample"], min_samples_leaf=p["min_samples_leaf"], random_state=0,
    )
    return _cv_nmse(model, "diabetes")


def knn_wine(p: dict[str, Any]) -> float:
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    knn = KNeighborsClassifier(n_neighbors=p["n_neighbors"], weights=p["weights"], p=p["p"])
    return _cv_error(make_pipeline(StandardScaler(), knn), "wine")


def enet_diabetes(p: dict[str, Any]) -> float:
    """ElasticNet on polynomial features; the scaler changes what a given alpha penalises."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import ElasticNet
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, PolynomialFeatures, RobustScaler, StandardScaler

    scaler = {"standard": StandardScaler, "robust": RobustScaler, "minmax": MinMaxScaler}[p["scaler"]]()
    model = make_pipeline(PolynomialFeatures(p["degree"], include_bias=False), scaler,
                          ElasticNet(alpha=p["alpha"], l1_ratio=p["l1_ratio"], max_iter=1000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return _cv_nmse(model, "diabetes")


def _floats(names: list[str], low: float, high: float) -> dict[str, dict[str, Any]]:
    return {n: {"type": "float", "low": low, "high": high} for n in names}


TASKS: dict[str, Task] = {
    "branin": Task("branin", {"x1": {"type": "float", "low": -5.0, "high": 10.0},
                              "x2": {"type": "float", "low": 0.0, "high": 15.0}}, branin, 0.397887),
    "hartmann6": Task("hartmann6", _floats([f"x{i}" for i in range(6)], 0.0, 1.0), hartmann6, -3.32237),
    "ackley5": Task("ackley5", _floats([f"x{i}" for i in range(5)], -32.768, 32.768), ackley5, 0.0),
    "mixed": Task("mixed", {
        "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "rmsprop"]},
        "activation": {"type": "categorical", "choices": ["relu", "gelu", "tanh", "sigmoid"]},
        "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
        "depth": {"type": "int", "low": 1, "high": 12},
        "width": {"type": "float", "low": 0.0, "high": 1.0},
        "dropout": {"type": "float", "low": 0.0, "high": 0.6},
    }, mixed, 0.0),
    "lgbm_digits": Task("lgbm_digits", {
        "learning_rate": {"type": "float", "low": 1e-3, "high": 0.5, "log": True},
        "num_leaves": {"type": "int", "low": 4, "high": 128, "log": True},
        "min_child_samples": {"type": "int", "low": 2, "high": 50},
        "subsample": {"type": "float", "low": 0.5, "high": 1.0},
        "colsample_bytree": {"type": "float", "low": 0.3, "high": 1.0},
        "reg_lambda": {"type": "float", "low": 1e-4, "high": 10.0, "log": True},
        "n_estimators": {"type": "int", "low": 10, "high": 120},
    }, lgbm_digits, None),
    "rf_breast_cancer": Task("rf_breast_cancer", {
        "n_estimators": {"type": "int", "low": 10, "high": 100},
        "max_depth": {"type": "int", "low": 2, "high": 20},
        "min_samples_leaf": {"type": "int", "low": 1, "high": 20, "log": True},
        "max_features": {"type": "categorical", "choices": ["sqrt", "log2", "all"]},
        "criterion": {"type": "categorical", "choices": ["gini", "entropy", "log_loss"]},
        "bootstrap": {"type": "categorical", "choices": [True, False]},
    }, rf_breast_cancer, None),
    "forrester": Task("forrester", {"x": {"type": "float", "low": 0.0, "high": 1.0}}, forrester, -6.020740),
    "ackley2": Task("ackley2", _floats(["x0", "x1"], -32.768, 32.768), ackley2, 0.0),
    "alpine10": Task("alpine10", _floats([f"x{i}" for i in range(10)], -10.0, 10.0), alpine10, 0.0),
    "camel6": Task("camel6", {"x1": {"type": "float", "low": -3.0, "high": 3.0},
                              "x2": {"type": "float", "low": -2.0, "high": 2.0}}, camel6, -1.031628),
    "levy4": Task("levy4", _floats([f"x{i}" for i in range(4)], -10.0, 10.0), levy4, 0.0),
    "svc_digits": Task("svc_digits", {
        "C": {"type": "float", "low": 1e-2, "high": 1e3, "log": True},
        "gamma": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True},
    }, svc_digits, None),
    "gbr_diabetes": Task("gbr_diabetes", {  # at most 60 trees: one evaluation 0.02-0.27 s
        "learning_rate": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
        "n_estimators": {"type": "int", "low": 10, "high": 60},
        "max_depth": {"type": "int", "low": 1, "high": 4},
        "subsample": {"type": "float", "low": 0.5, "high": 1.0},
        "min_samples_leaf": {"type": "int", "low": 1, "high": 30},
    }, gbr_diabetes, None),
    "knn_wine": Task("knn_wine", {
        "n_neighbors": {"type": "int", "low": 1, "high": 50},
        "weights": {"type": "categorical", "choices": ["uniform", "distance"]},
        "p": {"type": "ordinal", "choices": [1, 2]},
    }, knn_wine, None),
    "enet_diabetes": Task("enet_diabetes", {
        "alpha": {"type": "float", "low": 1e-4, "high": 10.0, "log": True},
        "l1_ratio": {"type": "float", "low": 0.0, "high": 1.0},
        "degree": {"type": "ordinal", "choices": [1, 2]},
        "scaler": {"type": "categorical", "choices": ["standard", "robust", "minmax"]},
    }, enet_diabetes, None),
}

# The real-tuning suite (benchmarks/real_tuning.py): models scored as people score them; the module
# adds its tasks to TASKS (imported last: it builds on Task and _dataset above).
import benchmarks.real_tasks  # noqa: E402, F401
