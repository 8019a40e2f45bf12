"""QL's majorise-minimise solver reaches the exact LP optimum of the pinball lasso."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.linear_model import QuantileRegressor

from calibo.engine.surrogates.ql import objective, pinball_lasso


@pytest.mark.parametrize(("n", "d", "lam"), [(25, 3, 0.01), (60, 6, 0.01), (200, 10, 0.05)])
def test_mm_objective_within_one_percent_of_highs(n: int, d: int, lam: float) -> None:
    rng = np.random.default_rng(n)
    X = rng.random((n, d))
    y = X @ rng.normal(size=d) + (0.2 + X[:, 0]) * rng.standard_normal(n)
    taus = (np.arange(10) + 0.5) / 10
    B = pinball_lasso(X, y, taus, lam)
    exact = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for tau in taus:
            m = QuantileRegressor(quantile=tau, alpha=lam, solver="highs").fit(X, y)
            exact.append(np.r_[m.intercept_, m.coef_])
    A = np.column_stack([np.ones(n), X])
    pen = np.r_[0.0, np.ones(d)]
    ours, best = objective(A, y, B, taus, lam, pen), objective(A, y, np.array(exact), taus, lam, pen)
    assert np.all(ours <= best * 1.01 + 1e-12), (ours, best)
