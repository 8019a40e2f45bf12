"""QRF: quantile regression forest (Meinshausen 2006) on a scikit-learn forest.

Each tree's leaf gives every training point a weight ``1/|leaf|`` for a query
landing in it; the forest's weights are the mean over trees, and a quantile is
the weighted empirical quantile of the training targets.
"""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import RandomForestRegressor

from .base import BaseSurrogate


class QRF(BaseSurrogate):
    name = "qrf"

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        self._forest = RandomForestRegressor(
            n_estimators=int(self.options.get("n_estimators", 50)),
            min_samples_leaf=int(self.options.get("min_samples_leaf", 2)),
            max_features=self.options.get("max_features", 0.7),
            bootstrap=False,  # Meinshausen's QRF weights the full training set
            random_state=self.seed,
            n_jobs=1,
        ).fit(X, z)
        self._train_leaves = self._forest.apply(X)  # (n, T)
        self._z = z

    def _predict(self, X: np.ndarray) -> np.ndarray:
        leaves = self._forest.apply(X)  # (m, T)
        m, T = leaves.shape
        n = self._z.shape[0]
        w = np.zeros((m, n))
        for t in range(T):
            same = leaves[:, t][:, None] == self._train_leaves[:, t][None, :]
            w += same / same.sum(axis=1, keepdims=True)
        w /= T
        order = np.argsort(self._z)
        cdf = np.cumsum(w[:, order], axis=1)
        zs = self._z[order]
        out = np.empty((m, self.levels.size))
        for j, a in enumerate(self.levels):
            idx = (cdf < a - 1e-12).sum(axis=1)
            out[:, j] = zs[np.minimum(idx, n - 1)]
        return out
