"""Real model tuning as people do it: scikit-learn and LightGBM on the datasets scikit-learn ships.

Each task is a model, a dataset and a score: 1 - accuracy, balanced error, log loss, MSE
(normalised by the target's variance) or MAE (normalised by the target's mean absolute
deviation), by cross-validation on a fixed split (deterministic: the same configuration always
scores the same). Spaces mix int, log-scale and categorical parameters. Several have large
plateaus, as real tuning does: tree depth and min-samples fractions that stop a tree from
splitting, regularisation strong enough to zero a model (it then predicts the prior), and
accuracy on a small dataset, which moves in steps of one sample.

    PLATEAU_TASKS   the tasks with large plateaus: of 30 uniform draws (seed 0), more than a sixth
                    tie at one value, and at most 20 values are distinct
    HELDOUT_TASKS   eight further tasks (other models, two generated datasets), written after
                    calibo's default was chosen and never used to choose a setting: the check of
                    that default on tasks it was not fitted to (``--tasks heldout``)

Every objective is minimised. Evaluations cost 0.01-0.3 s on one core.
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import Any

import numpy as np

from benchmarks.tasks import TASKS, Task, _dataset

FOLDS = 3


@cache
def _data(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_iris

    if name == "iris":
        return load_iris(return_X_y=True)
    if name == "friedman1":  # generated: 5 informative inputs of 10, Gaussian noise
        from sklearn.datasets import make_friedman1

        return make_friedman1(n_samples=400, n_features=10, noise=1.0, random_state=0)
    if name == "synthetic":  # generated: 20 features, 5 informative and 5 redundant, 5% flipped labels
        from sklearn.datasets import make_classification

        return make_classification(n_samples=600, n_features=20, n_informative=5, n_redundant=5,
                                   flip_y=0.05, random_state=0)
    return _dataset(name)


def _cv(model, data: str, score: str) -> float:
    """Cross-validated loss of ``model`` on ``data`` (3 folds, fixed split)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import KFold, StratifiedKFold, cross_validate

    X, y = _data(data)
    classify = score in ("error", "balanced_error", "log_loss")
    cv = (StratifiedKFold if classify else KFold)(FOLDS, shuffle=True, random_state=0)
    scoring = {"error": "accuracy", "balanced_error": "balanced_accuracy", "log_loss": "neg_log_loss",
               "mse": "neg_mean_squared_error", "mae": "neg_mean_absolute_error"}[score]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        s = float(np.mean(cross_validate(model, X, y, cv=cv, scoring=scoring, n_jobs=1,
                                         error_score=np.nan)["test_score"]))
    if not np.isfinite(s):
        return {"error": 1.0, "balanced_error": 1.0, "log_loss": 10.0, "mse": 10.0, "mae": 10.0}[score]
    if score in ("error", "balanced_error"):
        return 1.0 - s
    if score == "log_loss":
        return -s
    if score == "mse":
        return -s / float(np.var(y))
    return -s / float(np.mean(np.abs(y - np.median(y))))


def _scaled(model):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), model)


# ---------------------------------------------------------------- objectives
def dt_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.tree import DecisionTreeClassifier

    return _cv(DecisionTreeClassifier(
        max_depth=p["max_depth"], min_samples_split=p["min_samples_split"], min_samples_leaf=p["min_samples_leaf"],
        max_features=p["max_features"], criterion=p["criterion"], random_state=0), "breast_cancer", "error")


def _forest(model, p: dict[str, Any]):
    """A random forest (``model``: the classifier or the regressor) of the forest tasks' parameters."""
    return model(n_estimators=p["n_estimators"], max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"],
                 max_features=p["max_features"], bootstrap=p["bootstrap"], n_jobs=1, random_state=0)


def rf_wine(p: dict[str, Any]) -> float:
    from sklearn.ensemble import RandomForestClassifier

    return _cv(_forest(RandomForestClassifier, p), "wine", "error")


def svc_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.svm import SVC

    return _cv(_scaled(SVC(C=p["C"], gamma=p["gamma"], kernel=p["kernel"], coef0=p["coef0"])),
               "breast_cancer", "error")


def knn_iris(p: dict[str, Any]) -> float:
    from sklearn.neighbors import KNeighborsClassifier

    return _cv(_scaled(KNeighborsClassifier(n_neighbors=p["n_neighbors"], weights=p["weights"], p=p["p"])),
               "iris", "balanced_error")


def logreg_digits(p: dict[str, Any]) -> float:
    from sklearn.linear_model import LogisticRegression

    return _cv(_scaled(LogisticRegression(C=p["C"], fit_intercept=p["fit_intercept"],
                                          class_weight=p["class_weight"], max_iter=p["max_iter"])),
               "digits", "log_loss")


def lgbm_breast_cancer(p: dict[str, Any]) -> float:
    import lightgbm as lgb

    return _cv(lgb.LGBMClassifier(
        learning_rate=p["learning_rate"], num_leaves=p["num_leaves"], min_child_samples=p["min_child_samples"],
        reg_lambda=p["reg_lambda"], n_estimators=p["n_estimators"], colsample_bytree=p["colsample_bytree"],
        boosting_type=p["boosting_type"], subsample=0.8 if p["boosting_type"] == "gbdt" else 1.0,
        subsample_freq=1 if p["boosting_type"] == "gbdt" else 0,
        n_jobs=1, verbose=-1, random_state=0), "breast_cancer", "log_loss")


def lgbm_diabetes(p: dict[str, Any]) -> float:
    import lightgbm as lgb

    return _cv(lgb.LGBMRegressor(
        learning_rate=p["learning_rate"], num_leaves=p["num_leaves"], min_child_samples=p["min_child_samples"],
        reg_alpha=p["reg_alpha"], n_estimators=p["n_estimators"], max_depth=p["max_depth"],
        n_jobs=1, verbose=-1, random_state=0), "diabetes", "mse")


def enet_poly_diabetes(p: dict[str, Any]) -> float:
    from sklearn.linear_model import ElasticNet
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    return _cv(make_pipeline(PolynomialFeatures(p["degree"], include_bias=False), StandardScaler(),
                             ElasticNet(alpha=p["alpha"], l1_ratio=p["l1_ratio"], max_iter=2000)),
               "diabetes", "mae")


def et_diabetes(p: dict[str, Any]) -> float:
    from sklearn.ensemble import ExtraTreesRegressor

    return _cv(ExtraTreesRegressor(
        n_estimators=p["n_estimators"], max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"],
        max_features=p["max_features"], n_jobs=1, random_state=0), "diabetes", "mae")


def sgd_wine(p: dict[str, Any]) -> float:
    from sklearn.linear_model import SGDClassifier

    return _cv(_scaled(SGDClassifier(
        loss=p["loss"], penalty=p["penalty"], alpha=p["alpha"], l1_ratio=p["l1_ratio"],
        learning_rate=p["learning_rate"], eta0=p["eta0"], max_iter=50, tol=None, random_state=0)),
        "wine", "balanced_error")


def dt_diabetes(p: dict[str, Any]) -> float:
    from sklearn.tree import DecisionTreeRegressor

    return _cv(DecisionTreeRegressor(
        max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"], ccp_alpha=p["ccp_alpha"],
        max_features=p["max_features"], criterion=p["criterion"], random_state=0), "diabetes", "mse")


def hgb_wine(p: dict[str, Any]) -> float:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return _cv(HistGradientBoostingClassifier(
        learning_rate=p["learning_rate"], max_iter=p["max_iter"], max_leaf_nodes=p["max_leaf_nodes"],
        min_samples_leaf=p["min_samples_leaf"], l2_regularization=p["l2_regularization"],
        early_stopping=False, random_state=0), "wine", "log_loss")


def mlp_iris(p: dict[str, Any]) -> float:
    from sklearn.neural_network import MLPClassifier

    return _cv(_scaled(MLPClassifier(
        hidden_layer_sizes=(p["hidden"],) * p["layers"], alpha=p["alpha"], learning_rate_init=p["lr"],
        activation=p["activation"], batch_size=p["batch_size"], max_iter=60, random_state=0)),
        "iris", "log_loss")


# ------------------------------------------------ held-out objectives (HELDOUT_TASKS)
def ada_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.ensemble import AdaBoostClassifier
    from sklearn.tree import DecisionTreeClassifier

    return _cv(AdaBoostClassifier(DecisionTreeClassifier(max_depth=p["max_depth"], random_state=0),
                                  n_estimators=p["n_estimators"], learning_rate=p["learning_rate"], random_state=0),
               "breast_cancer", "error")


def svr_diabetes(p: dict[str, Any]) -> float:
    from sklearn.svm import SVR

    return _cv(_scaled(SVR(C=p["C"], epsilon=p["epsilon"], gamma=p["gamma"], kernel=p["kernel"])),
               "diabetes", "mae")


def kridge_friedman(p: dict[str, Any]) -> float:
    from sklearn.kernel_ridge import KernelRidge

    return _cv(_scaled(KernelRidge(alpha=p["alpha"], gamma=p["gamma"], kernel=p["kernel"])), "friedman1", "mse")


def rf_friedman(p: dict[str, Any]) -> float:
    from sklearn.ensemble import RandomForestRegressor

    return _cv(_forest(RandomForestRegressor, p), "friedman1", "mse")


def logreg_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.linear_model import LogisticRegression

    return _cv(_scaled(LogisticRegression(C=p["C"], l1_ratio=1.0 if p["penalty"] == "l1" else 0.0, solver="liblinear",
                                          class_weight=p["class_weight"], intercept_scaling=p["intercept_scaling"])),
               "breast_cancer", "balanced_error")


def knn_digits(p: dict[str, Any]) -> float:
    from sklearn.neighbors import KNeighborsClassifier

    return _cv(KNeighborsClassifier(n_neighbors=p["n_neighbors"], weights=p["weights"], p=p["p"],
                                    algorithm="brute"), "digits", "balanced_error")


def lgbm_synthetic(p: dict[str, Any]) -> float:
    import lightgbm as lgb

    return _cv(lgb.LGBMClassifier(
        learning_rate=p["learning_rate"], num_leaves=p["num_leaves"], min_child_samples=p["min_child_samples"],
        subsample=p["subsample"], subsample_freq=1, colsample_bytree=p["colsample_bytree"],
        reg_lambda=p["reg_lambda"], n_estimators=p["n_estimators"], n_jobs=1, verbose=-1, random_state=0),
        "synthetic", "log_loss")


def dt_wine(p: dict[str, Any]) -> float:
    from sklearn.tree import DecisionTreeClassifier

    return _cv(DecisionTreeClassifier(
        max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"], ccp_alpha=p["ccp_alpha"],
        criterion=p["criterion"], splitter=p["splitter"], random_state=0), "wine", "balanced_error")


def _f(low: float, high: float, log: bool = False) -> dict[str, Any]:
    return {"type": "float", "low": low, "high": high, "log": log}


def _i(low: int, high: int, log: bool = False) -> dict[str, Any]:
    return {"type": "int", "low": low, "high": high, "log": log}


def _c(*choices: Any) -> dict[str, Any]:
    return {"type": "categorical", "choices": list(choices)}


REAL_TASKS: dict[str, Task] = {t.name: t for t in (
    Task("dt_breast_cancer", {"max_depth": _i(1, 20), "min_samples_split": _f(0.01, 0.6),
                              "min_samples_leaf": _f(0.005, 0.3), "max_features": _f(0.1, 1.0),
                              "criterion": _c("gini", "entropy", "log_loss")}, dt_breast_cancer),
    Task("rf_wine", {"n_estimators": _i(5, 60), "max_depth": _i(1, 12), "min_samples_leaf": _i(1, 40, True),
                     "max_features": _f(0.05, 1.0), "bootstrap": _c(True, False)}, rf_wine),
    Task("svc_breast_cancer", {"C": _f(1e-4, 1e3, True), "gamma": _f(1e-5, 10.0, True),
                               "kernel": _c("rbf", "sigmoid", "poly"), "coef0": _f(-1.0, 1.0)}, svc_breast_cancer),
    Task("knn_iris", {"n_neighbors": _i(1, 90, True), "weights": _c("uniform", "distance"),
                      "p": _f(1.0, 4.0)}, knn_iris),
    Task("logreg_digits", {"C": _f(1e-5, 1e3, True), "fit_intercept": _c(True, False),
                           "class_weight": _c(None, "balanced"), "max_iter": _i(5, 200, True)}, logreg_digits),
    Task("lgbm_breast_cancer", {"learning_rate": _f(1e-3, 0.5, True), "num_leaves": _i(2, 64, True),
                                "min_child_samples": _i(1, 200, True), "reg_lambda": _f(1e-3, 100.0, True),
                                "n_estimators": _i(5, 100, True), "colsample_bytree": _f(0.2, 1.0),
                                "boosting_type": _c("gbdt", "goss")}, lgbm_breast_cancer),
    Task("lgbm_diabetes", {"learning_rate": _f(1e-3, 0.5, True), "num_leaves": _i(2, 64, True),
                           "min_child_samples": _i(1, 300, True), "reg_alpha": _f(1e-3, 1e3, True),
                           "n_estimators": _i(5, 100, True), "max_depth": _i(1, 10)}, lgbm_diabetes),
    Task("enet_poly_diabetes", {"alpha": _f(1e-4, 100.0, True), "l1_ratio": _f(0.0, 1.0),
                                "degree": _i(1, 3)}, enet_poly_diabetes),
    Task("et_diabetes", {"n_estimators": _i(5, 60), "max_depth": _i(1, 20), "min_samples_leaf": _i(1, 100, True),
                         "max_features": _f(0.05, 1.0)}, et_diabetes),
    Task("sgd_wine", {"loss": _c("hinge", "log_loss", "modified_huber", "perceptron"),
                      "penalty": _c("l2", "l1", "elasticnet"), "alpha": _f(1e-6, 10.0, True),
                      "l1_ratio": _f(0.0, 1.0), "learning_rate": _c("optimal", "constant", "invscaling", "adaptive"),
                      "eta0": _f(1e-4, 1.0, True)}, sgd_wine),
    Task("dt_diabetes", {"max_depth": _i(1, 25), "min_samples_leaf": _i(1, 150, True),
                         "ccp_alpha": _f(1e-3, 1e4, True), "max_features": _f(0.1, 1.0),
                         "criterion": _c("squared_error", "absolute_error", "friedman_mse")}, dt_diabetes),
    Task("hgb_wine", {"learning_rate": _f(1e-3, 1.0, True), "max_iter": _i(5, 80, True),
                      "max_leaf_nodes": _i(2, 48, True), "min_samples_leaf": _i(1, 80, True),
                      "l2_regularization": _f(1e-4, 100.0, True)}, hgb_wine),
    Task("mlp_iris", {"hidden": _i(2, 64, True), "layers": _i(1, 3), "alpha": _f(1e-6, 10.0, True),
                      "lr": _f(1e-4, 0.3, True), "activation": _c("relu", "tanh", "logistic"),
                      "batch_size": _i(8, 128, True)}, mlp_iris),
)}

HELDOUT_TASKS: dict[str, Task] = {t.name: t for t in (
    Task("ada_breast_cancer", {"n_estimators": _i(5, 100, True), "learning_rate": _f(1e-3, 2.0, True),
                               "max_depth": _i(1, 5)}, ada_breast_cancer),
    Task("svr_diabetes", {"C": _f(1e-2, 1e4, True), "epsilon": _f(1e-2, 100.0, True),
                          "gamma": _f(1e-4, 1.0, True), "kernel": _c("rbf", "sigmoid", "linear")}, svr_diabetes),
    Task("kridge_friedman", {"alpha": _f(1e-5, 10.0, True), "gamma": _f(1e-4, 1.0, True),
                             "kernel": _c("rbf", "laplacian")}, kridge_friedman),
    Task("rf_friedman", {"n_estimators": _i(5, 60), "max_depth": _i(1, 15), "min_samples_leaf": _i(1, 50, True),
                         "max_features": _f(0.05, 1.0), "bootstrap": _c(True, False)}, rf_friedman),
    Task("logreg_breast_cancer", {"C": _f(1e-4, 1e3, True), "penalty": _c("l1", "l2"),
                                  "class_weight": _c(None, "balanced"),
                                  "intercept_scaling": _f(0.1, 10.0, True)}, logreg_breast_cancer),
    Task("knn_digits", {"n_neighbors": _i(1, 100, True), "weights": _c("uniform", "distance"),
                        "p": _f(1.0, 3.0)}, knn_digits),
    Task("lgbm_synthetic", {"learning_rate": _f(1e-3, 0.5, True), "num_leaves": _i(2, 64, True),
                            "min_child_samples": _i(1, 100, True), "subsample": _f(0.3, 1.0),
                            "colsample_bytree": _f(0.2, 1.0), "reg_lambda": _f(1e-3, 100.0, True),
                            "n_estimators": _i(5, 150, True)}, lgbm_synthetic),
    Task("dt_wine", {"max_depth": _i(1, 15), "min_samples_leaf": _i(1, 40, True), "ccp_alpha": _f(1e-4, 0.5, True),
                     "criterion": _c("gini", "entropy"), "splitter": _c("best", "random")}, dt_wine),
)}

PLATEAU_TASKS = ("dt_breast_cancer", "svc_breast_cancer", "knn_iris", "lgbm_diabetes", "sgd_wine", "dt_diabetes")

TASKS.update(REAL_TASKS)
TASKS.update(HELDOUT_TASKS)
