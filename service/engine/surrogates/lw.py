"""Locally weighted conformal surrogates (ACHO section 3.2): ``lw-gbm``, ``lw-knn``, ``lw-rf``.

A point estimator ``phi(theta)`` and a spread estimator ``V(theta)`` (the
conditional mean absolute deviation of ``phi``'s residuals) from one model
family: LightGBM regression for ``lw-gbm``, scikit-learn k-nearest neighbours
for ``lw-knn`` and a scikit-learn random forest for ``lw-rf``.

Which data fits what (ACHO eq. 13-16). The conformal layer holds out the
validation part of eq. 14 itself and hands this surrogate the training part of
eq. 13. ``_fit`` splits what it receives, seeded, into a sub-training part
(eq. 15, a fraction ``1 - val_fraction``, default 0.7) and a sub-validation
part (eq. 16, ``val_fraction``, default 0.3; at least ``MIN_PART`` points on
each side):

1. ``phi`` is fitted on the sub-training part;
2. the absolute residuals ``|z - phi(theta)|`` on the sub-validation part are
   the targets of ``V``, fitted on the sub-validation configurations (residuals
   of points ``phi`` never saw, as the paper requires, so ``V`` is not biased
   low); ``V`` is floored at ``SCALE_FLOOR`` times the mean sub-validation
   residual (and at ``1e-6``) so a spread estimate near zero cannot blow up a
   normalised score;
3. the scaled residuals ``s = |z - phi| / V`` on the sub-validation part give
   the shape of the raw quantiles. ``V`` there is cross-fitted (``SCALE_FOLDS``
   folds of the sub-validation part; the forest's out-of-bag predictions for
   ``lw-rf``): a spread model scoring its own training residuals would track
   them and squeeze ``s`` towards 1 (measured: the raw 80% band of lw-gbm held
   62% with in-sample ``V``, 76% cross-fitted). Level ``l`` is ``phi + V t_l`` with
   ``t_l = +q_{2l-1}(|s|)`` above the median and ``t_l = -q_{1-2l}(|s|)``
   below it (empirical quantiles, linear interpolation). Each pair of levels
   ``(a, 1-a)`` is therefore ``phi +- V q_{1-2a}(|z - phi| / V)``: eq. 17-18
   with the sub-validation part as the calibration set. The conformal layer
   then normalises its own held-out scores by ``V`` (``scaled = True``) and
   recalibrates these raw intervals on the eq. 14 split.
4. ``phi`` is then refitted on everything received (sub-training and
   sub-validation): the point estimate the acquisition ranks by uses all the
   training data rather than 70% of it. ``V`` and ``t`` stay those of the
   sub-training ``phi``, whose residuals are if anything larger than the
   refitted model's, so the raw intervals err on the wide side; validity does
   not depend on it, since the conformal layer scores the refitted ``phi`` on
   points neither model saw. (Measured on tests/test_surrogates.py's
   heteroskedastic data, 150 points: the conformalized coverage is nominal
   either way; the median's mean absolute error falls from 0.19 / 0.24 / 0.21
   to 0.15 / 0.21 / 0.18 for gbm / knn / rf with the refit.)

Fewer than ``2 * MIN_PART`` points: no split; ``phi`` and ``V`` are both
fitted on all points (in-sample residuals, floored), which is all that tiny
data allows and only matters before the conformal schedule starts.
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from typing import Protocol, cast

import lightgbm as lgb
import numpy as np
from numpy.typing import NDArray
from sklearn.ensemble import RandomForestRegressor
from sklearn.model_selection import KFold
from sklearn.neighbors import KNeighborsRegressor

from .base import BaseSurrogate
from .qgbm import lightgbm_params

MIN_PART = 3  # fewest points in the sub-training and in the sub-validation part
SCALE_FLOOR = 0.1  # V >= this fraction of the mean sub-validation absolute residual
ABS_FLOOR = 1e-6  # and >= this, on the standardised scale
SCALE_FOLDS = 5  # cross-fitting folds for the scaled residuals that shape the raw quantiles


class _Predictor(Protocol):
    """A fitted regressor: ``predict(X)`` gives one value per row."""

    def predict(self, X: np.ndarray) -> np.ndarray: ...


class _LocallyWeighted(BaseSurrogate):
    """Split, residuals, spread and quantiles; a family gives ``_make_point`` (and ``_make_spread``)."""

    scaled = True

    @abstractmethod
    def _make_point(self, X: np.ndarray, z: np.ndarray) -> _Predictor:
        """The family's regressor, fitted on ``(X, z)``."""

    def _make_spread(self, X: np.ndarray, r: np.ndarray) -> _Predictor:
        return self._make_point(X, r)

    def _split(self, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        if n < 2 * MIN_PART:
            return None
        frac = float(self.options.get("val_fraction", 0.3))
        n_val = int(np.clip(round(frac * n), MIN_PART, n - MIN_PART))
        perm = np.random.default_rng(self.seed).permutation(n)
        return perm[n_val:], perm[:n_val]

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        parts = self._split(X.shape[0])
        tr, va = (np.arange(X.shape[0]),) * 2 if parts is None else parts
        point = self._make_point(X[tr], z[tr])
        resid = np.abs(z[va] - point.predict(X[va]))
        self._floor = max(ABS_FLOOR, SCALE_FLOOR * float(resid.mean()))
        self._spread = self._make_spread(X[va], resid)
        s = resid / self._cross_fitted_v(X[va], resid)
        self._point = point if parts is None else self._make_point(X, z)
        # t_l: + q_{2l-1}(|s|) above the median, - q_{1-2l}(|s|) below (eq. 18 per level pair)
        c = 2.0 * self.levels - 1.0
        self._t = np.sign(c) * np.quantile(s, np.abs(c))

    def _cross_fitted_v(self, X: np.ndarray, resid: np.ndarray) -> np.ndarray:
        """``V`` at each sub-validation point from a spread model that did not see it (K folds)."""
        m = X.shape[0]
        k = min(SCALE_FOLDS, m // 2)
        if k < 2:  # too few to hold any out: in-sample
            return self._v(X)
        v = np.empty(m)
        for tr, te in KFold(k, shuffle=True, random_state=self.seed).split(X):
            v[te] = self._make_spread(X[tr], resid[tr]).predict(X[te])
        return np.maximum(v, self._floor)

    def _v(self, X: np.ndarray) -> np.ndarray:
        v: NDArray[np.float64] = np.maximum(np.asarray(self._spread.predict(X), float), self._floor)
        return v

    def _scale(self, X: np.ndarray) -> np.ndarray:
        return self._v(X)

    def _predict(self, X: np.ndarray) -> np.ndarray:
        mu = np.asarray(self._point.predict(X), float)
        q: NDArray[np.float64] = mu[:, None] + self._v(X)[:, None] * self._t[None, :]
        return q


class _Booster:
    """A LightGBM booster behind ``.predict`` with one thread."""

    def __init__(self, booster: lgb.Booster) -> None:
        self.booster = booster

    def predict(self, X: np.ndarray) -> np.ndarray:
        # an array: the other members of predict's union are for pred_contrib on sparse input
        return cast("np.ndarray", self.booster.predict(X, num_threads=1))


class LWGBM(_LocallyWeighted):
    """``phi`` and ``V``: LightGBM L2 regressors (``n_estimators``, ``learning_rate``, ``num_leaves``)."""

    name = "lw-gbm"

    def _make_point(self, X: np.ndarray, z: np.ndarray) -> _Booster:
        params = lightgbm_params("regression", X.shape[0], self.seed, self.options) | {
            "feature_pre_filter": False}
        ds = lgb.Dataset(X, z, params=params)
        rounds = int(self.options.get("n_estimators", 50))
        return _Booster(lgb.train(params, ds, num_boost_round=rounds))


class LWKNN(_LocallyWeighted):
    """``phi`` and ``V``: k-nearest-neighbour means (``n_neighbors``, capped by the part's size)."""

    name = "lw-knn"

    def _make_point(self, X: np.ndarray, z: np.ndarray) -> KNeighborsRegressor:
        k = min(int(self.options.get("n_neighbors", 5)), X.shape[0])
        return KNeighborsRegressor(n_neighbors=k, n_jobs=1).fit(X, z)


class LWRF(_LocallyWeighted):
    """``phi`` and ``V``: random forests (``n_estimators``, ``min_samples_leaf``)."""

    name = "lw-rf"

    def _make_point(self, X: np.ndarray, z: np.ndarray, oob: bool = False) -> RandomForestRegressor:
        forest = RandomForestRegressor(
            n_estimators=int(self.options.get("n_estimators", 50)),
            min_samples_leaf=int(self.options.get("min_samples_leaf", 2)),
            max_features=0.7,
            oob_score=oob,
            random_state=self.seed,
            n_jobs=1,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny parts: "some inputs do not have OOB scores"
            return forest.fit(X, z)

    def _make_spread(self, X: np.ndarray, r: np.ndarray) -> RandomForestRegressor:
        return self._make_point(X, r, oob=X.shape[0] >= 2 * MIN_PART)

    def _cross_fitted_v(self, X: np.ndarray, resid: np.ndarray) -> np.ndarray:
        """The spread forest's out-of-bag predictions: held out per tree, no extra fits."""
        oob = getattr(self._spread, "oob_prediction_", None)
        if oob is None:
            return super()._cross_fitted_v(X, resid)
        oob = np.asarray(oob, float).ravel()
        return np.maximum(np.where(np.isfinite(oob), oob, self._v(X)), self._floor)
