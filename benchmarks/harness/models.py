"""Real model tuning objectives: scikit-learn and LightGBM on the datasets scikit-learn ships.

Each objective is a model, a dataset and a score, by cross-validation on a fixed split
(deterministic: the same configuration always scores the same), minimised.

* the search and crowd suites' models (``lgbm_digits`` ... ``enet_diabetes``): 3-fold error or
  MSE over the target's variance (``_cv_error``, ``_cv_nmse``);
* the real-tuning suite's models (``dt_breast_cancer`` ... ``dt_wine``): 1 - accuracy, balanced
  error, log loss, MSE (over the target's variance) or MAE (over its mean absolute deviation), by
  :func:`cv_loss`. Several have large plateaus, as real tuning does: tree depth and min-samples
  fractions that stop a tree from splitting, regularisation strong enough to zero a model (it then
  predicts the prior), and accuracy on a small dataset, which moves in steps of one sample.

Evaluations cost 0.01-0.3 s on one core. Spaces and names: :mod:`benchmarks.harness.tasks`.
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import Any

import numpy as np


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


# Cheap real tuning for the crowd suite (benchmarks.crowd_search): each evaluation
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


# ------------------------------------------------- the real-tuning suite
FOLDS = 3


@cache
def data(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of a dataset: iris, two generated ones (friedman1, synthetic), or :func:`_dataset`'s."""
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


def cv_loss(model, data_name: str, score: str) -> float:
    """Cross-validated loss of ``model`` on the dataset ``data_name`` (3 folds, fixed split)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import KFold, StratifiedKFold, cross_validate

    X, y = data(data_name)
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


def scaled(model):
    """``model`` behind a standard scaler."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), model)


# ---------------------------------------------------------------- objectives
def dt_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.tree import DecisionTreeClassifier

    return cv_loss(DecisionTreeClassifier(
        max_depth=p["max_depth"], min_samples_split=p["min_samples_split"], min_samples_leaf=p["min_samples_leaf"],
        max_features=p["max_features"], criterion=p["criterion"], random_state=0), "breast_cancer", "error")


def _forest(model, p: dict[str, Any]):
    """A random forest (``model``: the classifier or the regressor) of the forest tasks' parameters."""
    return model(n_estimators=p["n_estimators"], max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"],
                 max_features=p["max_features"], bootstrap=p["bootstrap"], n_jobs=1, random_state=0)


def rf_wine(p: dict[str, Any]) -> float:
    from sklearn.ensemble import RandomForestClassifier

    return cv_loss(_forest(RandomForestClassifier, p), "wine", "error")


def svc_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.svm import SVC

    return cv_loss(scaled(SVC(C=p["C"], gamma=p["gamma"], kernel=p["kernel"], coef0=p["coef0"])),
               "breast_cancer", "error")


def knn_iris(p: dict[str, Any]) -> float:
    from sklearn.neighbors import KNeighborsClassifier

    return cv_loss(scaled(KNeighborsClassifier(n_neighbors=p["n_neighbors"], weights=p["weights"], p=p["p"])),
               "iris", "balanced_error")


def logreg_digits(p: dict[str, Any]) -> float:
    from sklearn.linear_model import LogisticRegression

    return cv_loss(scaled(LogisticRegression(C=p["C"], fit_intercept=p["fit_intercept"],
                                          class_weight=p["class_weight"], max_iter=p["max_iter"])),
               "digits", "log_loss")


def lgbm_breast_cancer(p: dict[str, Any]) -> float:
    import lightgbm as lgb

    return cv_loss(lgb.LGBMClassifier(
        learning_rate=p["learning_rate"], num_leaves=p["num_leaves"], min_child_samples=p["min_child_samples"],
        reg_lambda=p["reg_lambda"], n_estimators=p["n_estimators"], colsample_bytree=p["colsample_bytree"],
        boosting_type=p["boosting_type"], subsample=0.8 if p["boosting_type"] == "gbdt" else 1.0,
        subsample_freq=1 if p["boosting_type"] == "gbdt" else 0,
        n_jobs=1, verbose=-1, random_state=0), "breast_cancer", "log_loss")


def lgbm_diabetes(p: dict[str, Any]) -> float:
    import lightgbm as lgb

    return cv_loss(lgb.LGBMRegressor(
        learning_rate=p["learning_rate"], num_leaves=p["num_leaves"], min_child_samples=p["min_child_samples"],
        reg_alpha=p["reg_alpha"], n_estimators=p["n_estimators"], max_depth=p["max_depth"],
        n_jobs=1, verbose=-1, random_state=0), "diabetes", "mse")


def enet_poly_diabetes(p: dict[str, Any]) -> float:
    from sklearn.linear_model import ElasticNet
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    return cv_loss(make_pipeline(PolynomialFeatures(p["degree"], include_bias=False), StandardScaler(),
                             ElasticNet(alpha=p["alpha"], l1_ratio=p["l1_ratio"], max_iter=2000)),
               "diabetes", "mae")


def et_diabetes(p: dict[str, Any]) -> float:
    from sklearn.ensemble import ExtraTreesRegressor

    return cv_loss(ExtraTreesRegressor(
        n_estimators=p["n_estimators"], max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"],
        max_features=p["max_features"], n_jobs=1, random_state=0), "diabetes", "mae")


def sgd_wine(p: dict[str, Any]) -> float:
    from sklearn.linear_model import SGDClassifier

    return cv_loss(scaled(SGDClassifier(
        loss=p["loss"], penalty=p["penalty"], alpha=p["alpha"], l1_ratio=p["l1_ratio"],
        learning_rate=p["learning_rate"], eta0=p["eta0"], max_iter=50, tol=None, random_state=0)),
        "wine", "balanced_error")


def dt_diabetes(p: dict[str, Any]) -> float:
    from sklearn.tree import DecisionTreeRegressor

    return cv_loss(DecisionTreeRegressor(
        max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"], ccp_alpha=p["ccp_alpha"],
        max_features=p["max_features"], criterion=p["criterion"], random_state=0), "diabetes", "mse")


def hgb_wine(p: dict[str, Any]) -> float:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return cv_loss(HistGradientBoostingClassifier(
        learning_rate=p["learning_rate"], max_iter=p["max_iter"], max_leaf_nodes=p["max_leaf_nodes"],
        min_samples_leaf=p["min_samples_leaf"], l2_regularization=p["l2_regularization"],
        early_stopping=False, random_state=0), "wine", "log_loss")


def mlp_iris(p: dict[str, Any]) -> float:
    from sklearn.neural_network import MLPClassifier

    return cv_loss(scaled(MLPClassifier(
        hidden_layer_sizes=(p["hidden"],) * p["layers"], alpha=p["alpha"], learning_rate_init=p["lr"],
        activation=p["activation"], batch_size=p["batch_size"], max_iter=60, random_state=0)),
        "iris", "log_loss")


# ------------------------------------------------ held-out objectives (HELDOUT_TASKS)
def ada_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.ensemble import AdaBoostClassifier
    from sklearn.tree import DecisionTreeClassifier

    return cv_loss(AdaBoostClassifier(DecisionTreeClassifier(max_depth=p["max_depth"], random_state=0),
                                  n_estimators=p["n_estimators"], learning_rate=p["learning_rate"], random_state=0),
               "breast_cancer", "error")


def svr_diabetes(p: dict[str, Any]) -> float:
    from sklearn.svm import SVR

    return cv_loss(scaled(SVR(C=p["C"], epsilon=p["epsilon"], gamma=p["gamma"], kernel=p["kernel"])),
               "diabetes", "mae")


def kridge_friedman(p: dict[str, Any]) -> float:
    from sklearn.kernel_ridge import KernelRidge

    return cv_loss(scaled(KernelRidge(alpha=p["alpha"], gamma=p["gamma"], kernel=p["kernel"])), "friedman1", "mse")


def rf_friedman(p: dict[str, Any]) -> float:
    from sklearn.ensemble import RandomForestRegressor

    return cv_loss(_forest(RandomForestRegressor, p), "friedman1", "mse")


def logreg_breast_cancer(p: dict[str, Any]) -> float:
    from sklearn.linear_model import LogisticRegression

    return cv_loss(scaled(LogisticRegression(C=p["C"], l1_ratio=1.0 if p["penalty"] == "l1" else 0.0,
                                          solver="liblinear", class_weight=p["class_weight"],
                                          intercept_scaling=p["intercept_scaling"])),
               "breast_cancer", "balanced_error")


def knn_digits(p: dict[str, Any]) -> float:
    from sklearn.neighbors import KNeighborsClassifier

    return cv_loss(KNeighborsClassifier(n_neighbors=p["n_neighbors"], weights=p["weights"], p=p["p"],
                                    algorithm="brute"), "digits", "balanced_error")


def lgbm_synthetic(p: dict[str, Any]) -> float:
    import lightgbm as lgb

    return cv_loss(lgb.LGBMClassifier(
        learning_rate=p["learning_rate"], num_leaves=p["num_leaves"], min_child_samples=p["min_child_samples"],
        subsample=p["subsample"], subsample_freq=1, colsample_bytree=p["colsample_bytree"],
        reg_lambda=p["reg_lambda"], n_estimators=p["n_estimators"], n_jobs=1, verbose=-1, random_state=0),
        "synthetic", "log_loss")


def dt_wine(p: dict[str, Any]) -> float:
    from sklearn.tree import DecisionTreeClassifier

    return cv_loss(DecisionTreeClassifier(
        max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"], ccp_alpha=p["ccp_alpha"],
        criterion=p["criterion"], splitter=p["splitter"], random_state=0), "wine", "balanced_error")
