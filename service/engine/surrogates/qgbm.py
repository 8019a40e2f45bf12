"""QGBM: one LightGBM booster per quantile level on the pinball (quantile) objective."""

from __future__ import annotations

from typing import Any

import lightgbm as lgb
import numpy as np

from .base import BaseSurrogate


def lightgbm_params(objective: str, n: int, seed: int, options: dict[str, Any]) -> dict[str, Any]:
    """LightGBM settings for ``n`` observations: small, deterministic, one thread (QGBM, LW-GBM)."""
    return {
        "objective": objective,
        "learning_rate": options.get("learning_rate", 0.1),
        "num_leaves": options.get("num_leaves", 8),
        "min_data_in_leaf": max(2, min(20, n // 10)),
        "min_data_in_bin": 1,
        "max_bin": 63,
        "feature_fraction": 0.9,
        "bagging_fraction": 0.9 if n >= 20 else 1.0,
        "bagging_freq": 1 if n >= 20 else 0,
        "lambda_l2": 1e-3,
        "num_threads": 1,
        "force_col_wise": True,
        "deterministic": True,
        "seed": seed,
        "verbose": -1,
    }


class QGBM(BaseSurrogate):
    name = "qgbm"

    def _params(self, n: int) -> dict[str, Any]:
        return lightgbm_params("quantile", n, self.seed, self.options)

    def _fit(self, X: np.ndarray, z: np.ndarray) -> None:
        params = self._params(X.shape[0])
        # bin the data once and reuse it for every level
        ds = lgb.Dataset(
            X,
            z,
            params={k: params[k] for k in ("min_data_in_bin", "max_bin", "verbose", "min_data_in_leaf")}
            | {"feature_pre_filter": False},
            free_raw_data=False,
        ).construct()
        rounds = int(self.options.get("n_estimators", 50))
        self._boosters = [
            lgb.train(params | {"alpha": float(a)}, ds, num_boost_round=rounds) for a in self.levels
        ]

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return np.column_stack([b.predict(X, num_threads=1) for b in self._boosters])
