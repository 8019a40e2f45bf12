"""gp-recal: a Gaussian process recalibrated by Calibrated Bayesian Optimization.

Deshpande & Kuleshov, "Calibrated Uncertainty Estimation Improves Bayesian Optimization"
(arXiv:2112.04620):

* Algorithm 2 (calibrated BO): the acquisition sees ``R o M``, the base model
  ``M`` composed with a recalibrator ``R`` refitted after every update. Here
  ``M`` is ``QGP`` (ARD Matern-5/2 + white noise, maximum marginal likelihood;
  ``max_opt_points`` passes through) and ``R o M`` is handed to the engine as
  quantiles: at level ``a`` the surrogate returns
  ``mean(x) + sd(x) * Phi^{-1}(R^{-1}(a))``, the quantile of the recalibrated
  CDF ``R(Phi((y - mean) / sd))``; UCB / EI / PI / TS then act on it as on any
  quantile array. (The paper's own implementation rescales sigma; composing the
  CDF is the general form of the same recalibration.)
* Algorithm 3 (CALIBRATE): held-out Gaussian forecasts from CREATESPLITS, their
  PITs ``Phi((y_t - mean_t) / sd_t)`` form the recalibration set, and ``R`` is
  fitted on it by Algorithm 4 (``engine.recalibration``, Kuleshov et al.).
  ``splits`` picks CREATESPLITS:

  - ``"loo"`` (default, as in the paper's experiments): every point held out
    once. The split models keep the full model's tuned kernel (the BO loop's
    ``M'`` is ``M`` conditioned on fewer points), and for an exact GP with a
    fixed kernel the leave-one-out predictive has a closed form (Rasmussen &
    Williams eq. 5.12): with ``K`` the Gram matrix including the noise,
    ``mean_i = y_i - [K^-1 y]_i / [K^-1]_ii`` and ``var_i = 1 / [K^-1]_ii``.
    That is exactly what ``N`` refits would give, for one extra triangular
    inverse on the full model's Cholesky factor, so all ``N`` points are used.
  - ``"timeseries"``: observations arrive in trial order; split ``t`` trains on
    the first ``t`` points (``t >= 2``) and forecasts point ``t + 1``. Its
    closed form with a fixed kernel: whitening ``w = L^-1 y`` by the Cholesky
    factor ``K = L L^T`` gives the one-step-ahead forecasts, ``y_t`` is
    predicted from ``y_<t`` with ``sd_t = L_tt`` and standardised residual
    ``w_t`` (the prequential decomposition of the GP likelihood).

  When the base GP is not scikit-learn's exact GP (another QGP backend, or an
  inducing-point fit), the splits are real refits: ``base.fold_clone()``
  reuses the tuned kernel and only solves, for at most ``max_splits`` splits
  (default 100; a seeded subset beyond that).
* Too few points for a recalibration set (fewer than ``MIN_PITS`` held-out
  forecasts: ``n < 4`` for ``loo``, ``n < 6`` for ``timeseries``): ``R`` is the
  identity and gp-recal is QGP.

``fold_clone`` passes the tuned kernel on, so a conformal fold refits the GP
without re-tuning and recalibrates on its own training points.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import solve_triangular
from sklearn.gaussian_process import GaussianProcessRegressor

from ..recalibration import Recalibrator, gaussian_levels, gaussian_pit
from .base import BaseSurrogate
from .qgp import QGP

MIN_PITS = 4  # fewest held-out forecasts a recalibrator is fitted on
TS_MIN_TRAIN = 2  # time-series splits train on at least this many points


def _exact_sklearn_gp(base: QGP) -> GaussianProcessRegressor | None:
    gp = getattr(base, "_gp", None)
    if isinstance(gp, GaussianProcessRegressor) and hasattr(gp, "L_") and not gp.normalize_y:
        return gp
    return None


def closed_form_forecasts(gp: GaussianProcessRegressor,
                          splits: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Held-out (mean, sd, y) of a fitted exact GP with its kernel fixed, in its own units."""
    L = gp.L_  # K + jitter = L L^T, in the order the points were given
    y = np.asarray(gp.y_train_, float).ravel()
    if splits == "loo":
        Linv = solve_triangular(L, np.eye(L.shape[0]), lower=True, check_finite=False)
        kinv_diag = np.einsum("ij,ij->j", Linv, Linv)  # diag(K^-1) = column sums of (L^-1)^2
        alpha = np.asarray(gp.alpha_, float).ravel()  # K^-1 y
        return y - alpha / kinv_diag, 1.0 / np.sqrt(kinv_diag), y
    w = solve_triangular(L, y, lower=True, check_finite=False)  # whitened one-step-ahead residuals
    sd = np.diag(L).copy()
    mean = y - sd * w
    t = np.arange(TS_MIN_TRAIN, y.size)
    return mean[t], sd[t], y[t]


def refit_forecasts(base: QGP, X: np.ndarray, z: np.ndarray, splits: str, max_splits: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Held-out (mean, sd, y) by refitting ``base.fold_clone()`` on each split (kernel reused)."""
    n = X.shape[0]
    held = np.arange(n) if splits == "loo" else np.arange(TS_MIN_TRAIN, n)
    if held.size > max_splits:
        held = np.sort(np.random.default_rng(seed).choice(held, max_splits, replace=False))
    means, sds = np.empty(held.size), np.empty(held.size)
    for k, i in enumerate(held):
        train = np.delete(np.arange(n), i) if splits == "loo" else np.arange(i)
        m, s = base.fold_clone().fit(X[train], z[train]).predict_moments(X[i : i + 1])
        means[k], sds[k] = m[0], s[0]
    return means, sds, z[held]


class GPRecal(BaseSurrogate):
    name = "gp-recal"

    def __init__(self, levels: Iterable[float], seed: int = 0, device: str = "cpu", proto: QGP | None = None,
                 **options: Any) -> None:
        super().__init__(levels, seed, device=device, **options)
        self._proto = proto  # an unfitted QGP carrying a tuned kernel (fold clones)
        splits = self.options.get("splits", "loo")
        if splits not in ("loo", "timeseries"):
            raise ValueError(f"splits must be 'loo' or 'timeseries', not {splits!r}")

    def fold_clone(self) -> GPRecal:
        proto = self._base.fold_clone() if self.fitted else self._proto
        return GPRecal(self.levels, self.seed, device=self.device, proto=proto, **self.options)

    def _new_base(self) -> QGP:
        if self._proto is not None:
            return self._proto.fold_clone()
        opts = {k: self.options[k] for k in ("max_opt_points",) if k in self.options}
        return QGP(self.levels, self.seed, device=self.device, **opts)  # the paper's GP: maximum likelihood

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        base = self._new_base().fit(X, z)
        self._base = base
        self.ran_on = getattr(base, "ran_on", "cpu")
        splits = self.options.get("splits", "loo")
        n_held = X.shape[0] if splits == "loo" else X.shape[0] - TS_MIN_TRAIN
        self.recalibrator = Recalibrator.identity()
        self.pits: tuple[np.ndarray, np.ndarray] | None = None  # (PIT, 1 - PIT) of the held-out forecasts
        if n_held >= MIN_PITS:
            gp = _exact_sklearn_gp(base)
            if gp is not None:
                mean, sd, y = closed_form_forecasts(gp, splits)
            else:
                mean, sd, y = refit_forecasts(base, X, z, splits,
                                              int(self.options.get("max_splits", 100)), self.seed)
            self.pits = gaussian_pit(y, mean, sd)
            self.recalibrator = Recalibrator.fit(*self.pits)
        self._t = gaussian_levels(self.recalibrator, self.levels)

    def gp_kernel(self) -> dict[str, Any] | None:
        """The base GP's kernel in the target's units (``engine.crowd``)."""
        k = self._base.gp_kernel() if self.fitted else None
        if k is None:
            return None
        sd2 = self._sd**2
        return k | {"outputscale": k["outputscale"] * sd2, "noise": k["noise"] * sd2}

    def _signal_fraction(self, X: np.ndarray) -> np.ndarray:
        return self._base._signal_fraction(X)  # the recalibration rescales both shares alike

    def predict_moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The base GP's (uncalibrated) mean and sd in the target's units."""
        mean, sd = self._base.predict_moments(np.asarray(X, float))
        return mean * self._sd + self._mu, sd * self._sd

    def _predict(self, X: np.ndarray) -> np.ndarray:
        mean, sd = self._base.predict_moments(X)
        q: NDArray[np.float64] = mean[:, None] + sd[:, None] * self._t[None, :]
        return q
