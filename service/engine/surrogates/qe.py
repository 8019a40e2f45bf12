"""QE: quantile linear stacking of QGBM, QL and QGP (paper 002, eq. 15-16).

For each level ``beta``, out-of-fold predictions ``z_{i,m}`` of every base
model (eq. 15) are the features of a non-negative pinball-loss lasso without
intercept (eq. 16), solved exactly as a linear programme (HiGHS):

    min_w  (1/n) sum_i L_beta(y_i - sum_m z_{i,m} w_m) + lambda sum_m w_m,  w >= 0.

The base models are then refitted on all the data, and a prediction is the
weighted sum of their quantiles at that level.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import sparse
from scipy.optimize import linprog
from sklearn.model_selection import KFold

from .base import BaseSurrogate, make_surrogate


def stacking_weights(Z: np.ndarray, y: np.ndarray, beta: float, lam: float) -> np.ndarray:
    """Solve eq. 16 for one level: ``Z`` is (n, M) out-of-fold predictions."""
    n, m = Z.shape
    c = np.concatenate([np.full(m, lam), np.full(n, beta / n), np.full(n, (1.0 - beta) / n)])
    eye = sparse.identity(n, format="csr")
    A = sparse.hstack([sparse.csr_matrix(Z), eye, -eye], format="csr")
    res = linprog(c, A_eq=A, b_eq=y, bounds=(0, None), method="highs")
    if res.status != 0:
        return np.full(m, 1.0 / m)
    w = np.maximum(res.x[:m], 0.0)
    return w if w.sum() > 1e-8 else np.full(m, 1.0 / m)


class QE(BaseSurrogate):
    name = "qe"

    def __init__(
        self,
        levels: Iterable[float],
        seed: int = 0,
        bases: Sequence[str] = ("qgbm", "ql", "qgp"),
        weights: np.ndarray | None = None,
        protos: list[BaseSurrogate] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(levels, seed, **options)
        self.bases = tuple(bases)
        self._fixed_weights = weights
        self._protos = protos

    def _make_bases(self) -> list[BaseSurrogate]:
        if self._protos is not None:
            return [p.fold_clone() for p in self._protos]
        return [make_surrogate(b, self.levels, self.seed, device=self.device) for b in self.bases]

    def fold_clone(self) -> QE:
        """Folds reuse the fitted stacking weights and the bases' tuned settings."""
        if not self.fitted:
            return QE(self.levels, self.seed, self.bases, device=self.device, **self.options)
        return QE(self.levels, self.seed, self.bases, weights=self.weights_,
                  protos=self._models, device=self.device, **self.options)

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        self._models = [b.fit(X, z) for b in self._make_bases()]
        n, M, L = X.shape[0], len(self._models), self.levels.size
        k = int(self.options.get("k_folds", 3))
        if self._fixed_weights is not None:
            self.weights_ = np.asarray(self._fixed_weights, float)
            return
        if n < 4 * k:
            self.weights_ = np.full((M, L), 1.0 / M)
            return
        oof = np.empty((n, M, L))
        for tr, te in KFold(k, shuffle=True, random_state=self.seed).split(X):
            for m, full in enumerate(self._models):
                oof[te, m, :] = full.fold_clone().fit(X[tr], z[tr]).predict_quantiles(X[te])
        lam = float(self.options.get("penalty", 1e-3))
        self.weights_ = np.column_stack(
            [stacking_weights(oof[:, :, j], z, float(b), lam) for j, b in enumerate(self.levels)]
        )  # (M, L)

    def _predict(self, X: np.ndarray) -> np.ndarray:
        preds = np.stack([m.predict_quantiles(X) for m in self._models], axis=1)  # (n, M, L)
        out: NDArray[np.float64] = np.einsum("nml,ml->nl", preds, self.weights_)
        return out
