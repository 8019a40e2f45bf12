"""Every surrogate family: shapes, crossing repair, determinism, rough calibration."""

from __future__ import annotations

import numpy as np
import pytest

from calibo.engine.surrogates import SURROGATES, make_surrogate

LEVELS = (np.arange(10) + 0.5) / 10


def data(n: int, seed: int, linear: bool = False):
    """Heteroskedastic: the noise sd grows from 0.1 to 0.6 with the third feature."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    y = signal(X, linear) + (0.1 + 0.5 * X[:, 2]) * rng.standard_normal(n)
    return X, y


def signal(X: np.ndarray, linear: bool = False) -> np.ndarray:
    return 2 * X[:, 0] + (X[:, 1] if linear else np.sin(4 * X[:, 1]))


# raw (unconformalized) floors of the central 70% band (levels 0.15 to 0.85): QRF's in-sample
# leaves of two points make it the most overconfident family (0.52 on this data); the quantile
# MLP, with the light weight prior that searches best (benchmarks/surrogates.py), reaches 0.53.
# Both are conformalized to nominal by the engine (tests/test_surrogates_engine.py); the other
# families reach 0.58 to 0.80 raw.
BAND_FLOOR = {"qrf": 0.45, "mlp-quantile": 0.50}


@pytest.mark.parametrize("name", sorted(SURROGATES))
def test_quantiles_sorted_calibrated_and_deterministic(name: str) -> None:
    X, y = data(150, 0)
    Xt, yt = data(2000, 1)
    m = make_surrogate(name, LEVELS, seed=3).fit(X, y)
    q = m.predict_quantiles(Xt)
    assert q.shape == (2000, 10)
    assert np.all(np.diff(q, axis=1) >= 0)
    band = np.mean((q[:, 1] <= yt) & (yt <= q[:, 8]))  # nominal 70%, raw (unconformalized)
    assert BAND_FLOOR.get(name, 0.55) <= band <= 0.98, band
    pit = (yt[:, None] <= q).mean(axis=0)  # fraction below each quantile rises with the level
    assert np.all(np.diff(pit) > 0) and pit[0] < 0.2 and pit[-1] > 0.8, pit
    median_err = np.mean(np.abs(np.median(q, axis=1) - (2 * Xt[:, 0] + np.sin(4 * Xt[:, 1]))))
    assert median_err < 0.6, median_err  # learns the signal, not just the marginal
    again = make_surrogate(name, LEVELS, seed=3).fit(X, y).predict_quantiles(Xt)
    np.testing.assert_array_equal(q, again)
    with pytest.raises(ValueError):
        m.predict_quantiles(Xt, levels=[0.1, 0.9])
    with pytest.raises(ValueError):
        m.predict_quantiles(Xt, levels=LEVELS + 0.01)
    np.testing.assert_array_equal(m.predict_quantiles(Xt, levels=LEVELS[::-1]), q)  # same grid, any order
    clone = m.fold_clone()
    assert type(clone) is type(m) and not clone.fitted and np.array_equal(clone.levels, m.levels)
    assert m.fitted  # cloning leaves the original alone
    np.testing.assert_array_equal(m.predict_quantiles(Xt), q)


@pytest.mark.parametrize("name", ["qgbm", "qrf", "ql"])
def test_bands_widen_with_the_noise(name: str) -> None:
    # noise sd is 0.1 at x2 = 0 and 0.6 at x2 = 1; GP (homoskedastic) and QE are exempt
    X, y = data(150, 0)
    Xt, _ = data(2000, 1)
    q = make_surrogate(name, LEVELS, seed=3).fit(X, y).predict_quantiles(Xt)
    width = q[:, 8] - q[:, 1]
    ratio = width[Xt[:, 2] > 0.8].mean() / width[Xt[:, 2] < 0.2].mean()
    assert ratio > 1.2, ratio


def test_ql_on_a_linear_target() -> None:
    X, y = data(150, 0, linear=True)
    Xt, yt = data(2000, 1, linear=True)
    q = make_surrogate("ql", LEVELS, seed=0).fit(X, y).predict_quantiles(Xt)
    assert np.mean(np.abs(np.median(q, axis=1) - signal(Xt, linear=True))) < 0.1
    band = np.mean((q[:, 1] <= yt) & (yt <= q[:, 8]))
    assert 0.6 <= band <= 0.95, band


@pytest.mark.parametrize("name", ["qgp", "ql"])
def test_affine_change_of_units_moves_the_quantiles_with_it(name: str) -> None:
    # y is standardised before the family sees it, so y -> 3y + 2 maps quantiles the same way
    X, y = data(100, 5)
    Xt, _ = data(300, 6)
    q = make_surrogate(name, LEVELS, seed=1).fit(X, y).predict_quantiles(Xt)
    q2 = make_surrogate(name, LEVELS, seed=1).fit(X, 3 * y + 2).predict_quantiles(Xt)
    np.testing.assert_allclose(q2, 3 * q + 2, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(SURROGATES))
def test_constant_target_and_tiny_data(name: str) -> None:
    rng = np.random.default_rng(7)
    X = rng.random((30, 2))
    q = make_surrogate(name, LEVELS).fit(X, np.full(30, 3.0)).predict_quantiles(rng.random((5, 2)))
    np.testing.assert_allclose(q, 3.0, atol=0.01)
    q = make_surrogate(name, LEVELS).fit(X[:3], rng.random(3)).predict_quantiles(X)
    assert q.shape == (30, 10) and np.all(np.isfinite(q)) and np.all(np.diff(q, axis=1) >= 0)
    with pytest.raises(ValueError):
        make_surrogate(name, LEVELS).fit(X[:1], np.zeros(1))
    with pytest.raises(ValueError):
        make_surrogate(name, LEVELS).fit(X, np.zeros(29))


def test_unfitted_and_unknown() -> None:
    with pytest.raises(RuntimeError):
        make_surrogate("qgp", LEVELS).predict_quantiles(np.zeros((1, 3)))
    with pytest.raises(ValueError):
        make_surrogate("nope", LEVELS)
    with pytest.raises(ValueError):
        make_surrogate("qgp", [0.0, 0.5])


def test_qgp_fold_clone_reuses_the_tuned_kernel() -> None:
    X, y = data(60, 2)
    m = make_surrogate("qgp", LEVELS).fit(X, y)
    clone = m.fold_clone().fit(X[:40], y[:40])
    np.testing.assert_array_equal(clone._gp.kernel_.theta, m._gp.kernel_.theta)
    # an unfitted prototype's clone tunes its own kernel on its own data
    own = make_surrogate("qgp", LEVELS).fold_clone().fit(X[:40], y[:40])
    assert not np.array_equal(own._gp.kernel_.theta, m._gp.kernel_.theta)


def test_qe_weights_are_non_negative_per_level() -> None:
    X, y = data(80, 4)
    m = make_surrogate("qe", LEVELS, seed=0).fit(X, y)
    assert m.weights_.shape == (3, 10)
    assert np.all(m.weights_ >= 0) and np.all(m.weights_.sum(axis=0) > 0)
    # folds reuse the fitted weights rather than re-stacking
    clone = m.fold_clone().fit(X[:50], y[:50])
    np.testing.assert_array_equal(clone.weights_, m.weights_)
    # too few points for K folds: equal weights
    small = make_surrogate("qe", LEVELS, seed=0).fit(X[:8], y[:8])
    np.testing.assert_allclose(small.weights_, 1 / 3)
