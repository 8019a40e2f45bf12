"""The task registry: every benchmark task by name, synthetic and real tuning, held-out ones marked.

A :class:`Task` is a space in calibo's format, a deterministic objective (minimised: losses and
1 - accuracy) and what is known of it. Kinds:

* ``synthetic``: the papers' test functions (:mod:`.functions`): Branin, Hartmann-6, Ackley,
  Forrester, Alpine-1, Six-hump camel, Levy, and ``mixed`` (categorical + numeric);
* ``model``: cheap model tuning used by the search and crowd suites (``lgbm_digits`` ...);
* ``real``: the real-tuning suite (:mod:`.models`), scored as people score models;
  ``PLATEAU_TASKS`` are those with large plateaus (of 30 uniform draws, seed 0, more than a sixth
  tie at one value, and at most 20 values are distinct);
* ``heldout=True``: eight further real tasks (other models, two generated datasets), written after
  calibo's default was chosen and never used to choose a setting: the check of that default on
  tasks it was not fitted to (``--tasks heldout``).

    TASKS           every task by name
    REAL_TASKS      the real-tuning suite's tasks the default was chosen on
    HELDOUT_TASKS   the held-out real tasks
    select(spec)    a comma list of names, or ``real`` / ``heldout``, as task names
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as _replace
from typing import Any

from benchmarks.harness import models as M
from benchmarks.harness.functions import (
    ackley2,
    ackley5,
    alpine10,
    branin,
    camel6,
    forrester,
    hartmann6,
    levy4,
    mixed,
)
from benchmarks.harness.models import (
    enet_diabetes,
    gbr_diabetes,
    knn_wine,
    lgbm_digits,
    rf_breast_cancer,
    svc_digits,
)


@dataclass(frozen=True)
class Task:
    name: str
    space: dict[str, dict[str, Any]]
    objective: Callable[[dict[str, Any]], float]
    optimum: float | None = None
    direction: str = "minimize"
    kind: str = "synthetic"  # synthetic | model | real
    heldout: bool = False


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


MODEL_TASKS = ("lgbm_digits", "rf_breast_cancer", "svc_digits", "gbr_diabetes", "knn_wine", "enet_diabetes")
for _name in MODEL_TASKS:
    TASKS[_name] = _replace(TASKS[_name], kind="model")



def _f(low: float, high: float, log: bool = False) -> dict[str, Any]:
    return {"type": "float", "low": low, "high": high, "log": log}


def _i(low: int, high: int, log: bool = False) -> dict[str, Any]:
    return {"type": "int", "low": low, "high": high, "log": log}


def _c(*choices: Any) -> dict[str, Any]:
    return {"type": "categorical", "choices": list(choices)}


_REAL = (
    Task("dt_breast_cancer", {"max_depth": _i(1, 20), "min_samples_split": _f(0.01, 0.6),
                              "min_samples_leaf": _f(0.005, 0.3), "max_features": _f(0.1, 1.0),
                              "criterion": _c("gini", "entropy", "log_loss")}, M.dt_breast_cancer),
    Task("rf_wine", {"n_estimators": _i(5, 60), "max_depth": _i(1, 12), "min_samples_leaf": _i(1, 40, True),
                     "max_features": _f(0.05, 1.0), "bootstrap": _c(True, False)}, M.rf_wine),
    Task("svc_breast_cancer", {"C": _f(1e-4, 1e3, True), "gamma": _f(1e-5, 10.0, True),
                               "kernel": _c("rbf", "sigmoid", "poly"), "coef0": _f(-1.0, 1.0)}, M.svc_breast_cancer),
    Task("knn_iris", {"n_neighbors": _i(1, 90, True), "weights": _c("uniform", "distance"),
                      "p": _f(1.0, 4.0)}, M.knn_iris),
    Task("logreg_digits", {"C": _f(1e-5, 1e3, True), "fit_intercept": _c(True, False),
                           "class_weight": _c(None, "balanced"), "max_iter": _i(5, 200, True)}, M.logreg_digits),
    Task("lgbm_breast_cancer", {"learning_rate": _f(1e-3, 0.5, True), "num_leaves": _i(2, 64, True),
                                "min_child_samples": _i(1, 200, True), "reg_lambda": _f(1e-3, 100.0, True),
                                "n_estimators": _i(5, 100, True), "colsample_bytree": _f(0.2, 1.0),
                                "boosting_type": _c("gbdt", "goss")}, M.lgbm_breast_cancer),
    Task("lgbm_diabetes", {"learning_rate": _f(1e-3, 0.5, True), "num_leaves": _i(2, 64, True),
                           "min_child_samples": _i(1, 300, True), "reg_alpha": _f(1e-3, 1e3, True),
                           "n_estimators": _i(5, 100, True), "max_depth": _i(1, 10)}, M.lgbm_diabetes),
    Task("enet_poly_diabetes", {"alpha": _f(1e-4, 100.0, True), "l1_ratio": _f(0.0, 1.0),
                                "degree": _i(1, 3)}, M.enet_poly_diabetes),
    Task("et_diabetes", {"n_estimators": _i(5, 60), "max_depth": _i(1, 20), "min_samples_leaf": _i(1, 100, True),
                         "max_features": _f(0.05, 1.0)}, M.et_diabetes),
    Task("sgd_wine", {"loss": _c("hinge", "log_loss", "modified_huber", "perceptron"),
                      "penalty": _c("l2", "l1", "elasticnet"), "alpha": _f(1e-6, 10.0, True),
                      "l1_ratio": _f(0.0, 1.0), "learning_rate": _c("optimal", "constant", "invscaling", "adaptive"),
                      "eta0": _f(1e-4, 1.0, True)}, M.sgd_wine),
    Task("dt_diabetes", {"max_depth": _i(1, 25), "min_samples_leaf": _i(1, 150, True),
                         "ccp_alpha": _f(1e-3, 1e4, True), "max_features": _f(0.1, 1.0),
                         "criterion": _c("squared_error", "absolute_error", "friedman_mse")}, M.dt_diabetes),
    Task("hgb_wine", {"learning_rate": _f(1e-3, 1.0, True), "max_iter": _i(5, 80, True),
                      "max_leaf_nodes": _i(2, 48, True), "min_samples_leaf": _i(1, 80, True),
                      "l2_regularization": _f(1e-4, 100.0, True)}, M.hgb_wine),
    Task("mlp_iris", {"hidden": _i(2, 64, True), "layers": _i(1, 3), "alpha": _f(1e-6, 10.0, True),
                      "lr": _f(1e-4, 0.3, True), "activation": _c("relu", "tanh", "logistic"),
                      "batch_size": _i(8, 128, True)}, M.mlp_iris),
)

_HELDOUT = (
    Task("ada_breast_cancer", {"n_estimators": _i(5, 100, True), "learning_rate": _f(1e-3, 2.0, True),
                               "max_depth": _i(1, 5)}, M.ada_breast_cancer),
    Task("svr_diabetes", {"C": _f(1e-2, 1e4, True), "epsilon": _f(1e-2, 100.0, True),
                          "gamma": _f(1e-4, 1.0, True), "kernel": _c("rbf", "sigmoid", "linear")}, M.svr_diabetes),
    Task("kridge_friedman", {"alpha": _f(1e-5, 10.0, True), "gamma": _f(1e-4, 1.0, True),
                             "kernel": _c("rbf", "laplacian")}, M.kridge_friedman),
    Task("rf_friedman", {"n_estimators": _i(5, 60), "max_depth": _i(1, 15), "min_samples_leaf": _i(1, 50, True),
                         "max_features": _f(0.05, 1.0), "bootstrap": _c(True, False)}, M.rf_friedman),
    Task("logreg_breast_cancer", {"C": _f(1e-4, 1e3, True), "penalty": _c("l1", "l2"),
                                  "class_weight": _c(None, "balanced"),
                                  "intercept_scaling": _f(0.1, 10.0, True)}, M.logreg_breast_cancer),
    Task("knn_digits", {"n_neighbors": _i(1, 100, True), "weights": _c("uniform", "distance"),
                        "p": _f(1.0, 3.0)}, M.knn_digits),
    Task("lgbm_synthetic", {"learning_rate": _f(1e-3, 0.5, True), "num_leaves": _i(2, 64, True),
                            "min_child_samples": _i(1, 100, True), "subsample": _f(0.3, 1.0),
                            "colsample_bytree": _f(0.2, 1.0), "reg_lambda": _f(1e-3, 100.0, True),
                            "n_estimators": _i(5, 150, True)}, M.lgbm_synthetic),
    Task("dt_wine", {"max_depth": _i(1, 15), "min_samples_leaf": _i(1, 40, True), "ccp_alpha": _f(1e-4, 0.5, True),
                     "criterion": _c("gini", "entropy"), "splitter": _c("best", "random")}, M.dt_wine),
)

REAL_TASKS: dict[str, Task] = {t.name: _replace(t, kind="real") for t in _REAL}
HELDOUT_TASKS: dict[str, Task] = {t.name: _replace(t, kind="real", heldout=True) for t in _HELDOUT}
PLATEAU_TASKS = ("dt_breast_cancer", "svc_breast_cancer", "knn_iris", "lgbm_diabetes", "sgd_wine", "dt_diabetes")
TASKS.update(REAL_TASKS)
TASKS.update(HELDOUT_TASKS)


def select(spec: str) -> list[str]:
    """Task names from a comma list; ``real`` and ``heldout`` stand for those suites. Unknown names
    raise ``SystemExit`` with the choices."""
    names: list[str] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        names += list(REAL_TASKS) if item == "real" else list(HELDOUT_TASKS) if item == "heldout" else [item]
    bad = [t for t in names if t not in TASKS]
    if bad:
        raise SystemExit(f"unknown tasks {bad}; choose from {sorted(TASKS)}, 'real' or 'heldout'")
    return list(dict.fromkeys(names))
