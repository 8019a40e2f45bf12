"""QGP: a Gaussian process whose Gaussian posterior predictive gives the quantiles.

ARD Matern-5/2 kernel plus a white-noise term, hyperparameters by maximum
marginal likelihood (scikit-learn). Beyond ``max_opt_points`` observations the
hyperparameters are tuned on a seeded subsample and the posterior is then
conditioned on all points with that kernel: the likelihood search is the
O(n^3)-per-step part, the final solve is one Cholesky. ``fold_clone`` reuses the
tuned kernel so CV+ folds and stacking folds only solve, not re-optimise.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Kernel, Matern, WhiteKernel

from .base import BaseSurrogate


class QGP(BaseSurrogate):
    name = "qgp"

    def __init__(self, levels, seed: int = 0, kernel: Kernel | None = None, device: str = "cpu",
                 **options) -> None:
        super().__init__(levels, seed, device=device, **options)
        self._fixed_kernel = kernel

    def fold_clone(self) -> QGP:
        kernel = self._gp.kernel_ if self.fitted else self._fixed_kernel
        return QGP(self.levels, self.seed, kernel=kernel, device=self.device, **self.options)

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        d = X.shape[1]
        if self._fixed_kernel is not None:
            kernel, optimizer = self._fixed_kernel, None
        else:
            kernel = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(
                length_scale=np.full(d, 0.5), length_scale_bounds=(1e-2, 1e2), nu=2.5
            ) + WhiteKernel(1e-2, (1e-6, 1.0))
            optimizer = "fmin_l_bfgs_b"
        self._gp = GaussianProcessRegressor(
            kernel, optimizer=optimizer, n_restarts_optimizer=0, normalize_y=False,
            random_state=self.seed,
        )
        cap = int(self.options.get("max_opt_points", 150))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            if optimizer is not None and X.shape[0] > cap:
                sub = np.random.default_rng(self.seed).choice(X.shape[0], cap, replace=False)
                tuned = self._gp.fit(X[sub], z[sub]).kernel_
                self._gp = GaussianProcessRegressor(tuned, optimizer=None, normalize_y=False)
            self._gp.fit(X, z)
        self._z = norm.ppf(self.levels)

    def predict_moments(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, sd = self._gp.predict(np.asarray(X, float), return_std=True)
        return mean * self._sd + self._mu, np.maximum(sd, 1e-9) * self._sd

    def _predict(self, X: np.ndarray) -> np.ndarray:
        mean, sd = self._gp.predict(X, return_std=True)
        return mean[:, None] + np.maximum(sd, 1e-9)[:, None] * self._z[None, :]
