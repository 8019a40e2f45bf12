"""ACHO's locally weighted conformal surrogates (lw-gbm, lw-knn, lw-rf)."""

from __future__ import annotations

import numpy as np
import pytest

from calibo.engine.conformal import Bounds, conformalize, pair_alphas
from calibo.engine.surrogates import make_surrogate

LEVELS = (np.arange(10) + 0.5) / 10
NAMES = ["lw-gbm", "lw-knn", "lw-rf"]


def data(n: int, seed: int):
    """Heteroskedastic (as tests/test_surrogates.py): noise sd grows from 0.1 to 0.6 with x2."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    y = 2 * X[:, 0] + np.sin(4 * X[:, 1]) + (0.1 + 0.5 * X[:, 2]) * rng.standard_normal(n)
    return X, y


@pytest.mark.parametrize("name", NAMES)
def test_spread_and_bands_grow_with_the_noise(name: str) -> None:
    X, y = data(300, 0)
    Xt, _ = data(2000, 1)
    m = make_surrogate(name, LEVELS, seed=3).fit(X, y)
    assert m.scaled
    v = m.predict_scale(Xt)
    assert v.shape == (2000,) and np.all(v > 0)
    noisy, quiet = Xt[:, 2] > 0.8, Xt[:, 2] < 0.2
    assert v[noisy].mean() / v[quiet].mean() > 1.5
    q = m.predict_quantiles(Xt)
    width = q[:, 8] - q[:, 1]
    assert width[noisy].mean() / width[quiet].mean() > 1.5


@pytest.mark.parametrize("name", NAMES)
def test_raw_pairs_are_mu_plus_minus_v_times_one_factor(name: str) -> None:
    # eq. 18 per pair: (q_lo + q_hi) / 2 is the point estimate, (q_hi - q_lo) / (2 V) one constant
    X, y = data(200, 2)
    Xt, _ = data(500, 3)
    m = make_surrogate(name, LEVELS, seed=0).fit(X, y)
    q, v = m.predict_quantiles(Xt), m.predict_scale(Xt)
    for j in range(5):
        half = (q[:, 9 - j] - q[:, j]) / (2 * v)
        np.testing.assert_allclose(half, half[0], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose((q[:, 9 - j] + q[:, j]) / 2, (q[:, 5] + q[:, 4]) / 2, atol=1e-9)
    halves = [(q[0, 9 - j] - q[0, j]) / (2 * v[0]) for j in range(5)]
    assert np.all(np.diff(halves) < 0)  # wider pairs for lower miscoverage


@pytest.mark.parametrize("name", NAMES)
def test_coverage_after_split_conformal_is_nominal(name: str) -> None:
    Xt, yt = data(3000, 99)
    alphas = pair_alphas(LEVELS)
    cover = []
    for seed in range(20):
        X, y = data(300, 100 + seed)
        cf = conformalize(lambda seed=seed: make_surrogate(name, LEVELS, seed=seed), X, y, "split", seed)
        assert cf.scaled
        b = Bounds("split", cf.model.predict_quantiles(Xt), cf.scores,
                   scale=cf.model.predict_scale(Xt)).at(alphas)
        cover.append([np.mean((b[:, j] <= yt) & (yt <= b[:, 9 - j])) for j in range(5)])
    mean = np.mean(cover, axis=0)
    assert np.all(np.abs(mean - (1 - alphas)) <= 0.05), mean


def test_point_estimate_is_refitted_on_all_received_points() -> None:
    # a 1-nearest-neighbour point estimate reproduces every training target only if refitted on all
    X, y = data(40, 4)
    m = make_surrogate("lw-knn", LEVELS, seed=0, n_neighbors=1).fit(X, y)
    q = m.predict_quantiles(X)
    np.testing.assert_allclose((q[:, 4] + q[:, 5]) / 2, y, atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_seeded_split_and_options(name: str) -> None:
    X, y = data(80, 5)
    Xt, _ = data(50, 6)
    a = make_surrogate(name, LEVELS, seed=1).fit(X, y).predict_quantiles(Xt)
    np.testing.assert_array_equal(a, make_surrogate(name, LEVELS, seed=1).fit(X, y).predict_quantiles(Xt))
    assert not np.array_equal(a, make_surrogate(name, LEVELS, seed=2).fit(X, y).predict_quantiles(Xt))
    b = make_surrogate(name, LEVELS, seed=1, val_fraction=0.5).fit(X, y).predict_quantiles(Xt)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [2, 3, 5, 6, 7])
def test_tiny_data_fits_without_a_split_or_with_minimal_parts(name: str, n: int) -> None:
    X, y = data(n, 7)
    Xt, _ = data(20, 8)
    m = make_surrogate(name, LEVELS, seed=0).fit(X, y)
    q, v = m.predict_quantiles(Xt), m.predict_scale(Xt)
    assert np.all(np.isfinite(q)) and np.all(np.diff(q, axis=1) >= 0)
    assert np.all(np.isfinite(v)) and np.all(v > 0)
