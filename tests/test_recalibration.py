"""Kuleshov recalibration (engine.recalibration) and the recalibrated GP (gp-recal)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from calibo.engine.recalibration import Recalibrator, gaussian_levels, gaussian_pit
from calibo.engine.surrogates import gp_recal, make_surrogate
from calibo.engine.surrogates.gp_recal import GPRecal, closed_form_forecasts
from calibo.engine.surrogates.qgp import QGP

LEVELS = (np.arange(10) + 0.5) / 10
NOMINAL = 1 - 2 * LEVELS[:5]  # central coverage of the pairs (i, 9 - i)
GRID = np.linspace(0.0, 1.0, 1001)


# ------------------------------------------------------------ recalibration
def test_too_narrow_forecasts_are_widened_to_nominal() -> None:
    # forecasts N(0, 0.5^2) of outcomes N(0, 1): twice too narrow
    rng = np.random.default_rng(0)
    y = rng.standard_normal(2000)
    rec = Recalibrator.fit(*gaussian_pit(y, 0.0, 0.5))
    levels = np.linspace(0.02, 0.98, 49)
    q = 0.5 * gaussian_levels(rec, levels)  # F^-1(R^-1(level)) of the N(0, 0.25) forecast
    fresh = rng.standard_normal(20000)
    below = (fresh[:, None] <= q[None, :]).mean(axis=0)
    assert np.max(np.abs(below - levels)) < 0.03
    np.testing.assert_allclose(q, norm.ppf(levels), atol=0.15)  # the recalibrated CDF is N(0, 1)
    raw_below = (fresh[:, None] <= 0.5 * norm.ppf(levels)[None, :]).mean(axis=0)
    assert np.max(np.abs(raw_below - levels)) > 0.15  # the raw forecasts were far off


def test_calibrated_pits_give_nearly_the_identity() -> None:
    pit = np.random.default_rng(1).random(5000)
    rec = Recalibrator.fit(pit)
    assert np.max(np.abs(rec(GRID) - GRID)) < 0.03
    assert np.max(np.abs(rec.inverse(GRID) - GRID)) < 0.03
    np.testing.assert_allclose(gaussian_levels(Recalibrator.identity(), LEVELS), norm.ppf(LEVELS), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_monotone_anchored_and_mutually_inverse(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pit = rng.beta(0.4 + seed, 0.7, size=50)
    rec = Recalibrator.fit(pit)
    r, inv = rec(GRID), rec.inverse(GRID)
    assert np.all(np.diff(r) >= 0) and np.all(np.diff(inv) >= 0)
    assert r[0] == 0.0 and r[-1] == 1.0 and inv[0] == 0.0
    assert np.all((r >= 0) & (r <= 1) & (inv >= 0) & (inv <= 1))
    np.testing.assert_allclose(rec(rec.inverse(GRID)), GRID, atol=1e-9)
    # the fitted recalibrator is the empirical CDF of the PITs at the PITs (Alg. 4's targets)
    np.testing.assert_allclose(rec(np.sort(pit)), np.arange(1, 51) / 50, atol=1e-12)
    # the upper-tail complement agrees with 1 - R^-1 where both are representable
    np.testing.assert_allclose(rec.inverse_sf(GRID), 1 - inv, atol=1e-12)


def test_tied_pits_collapse_to_a_point_mass() -> None:
    rec = Recalibrator.fit(np.full(30, 0.5))
    inner = np.linspace(0.05, 0.95, 19)
    np.testing.assert_allclose(rec.inverse(inner), 0.5)
    np.testing.assert_allclose(gaussian_levels(rec, inner), 0.0, atol=1e-12)


def test_far_tail_residuals_widen_beyond_double_precision_of_the_pit() -> None:
    # residuals of +-20 sd: Phi(20) rounds to 1, but the survival keeps the upper tail
    r = np.concatenate([np.linspace(-20, -18, 10), np.linspace(18, 20, 10)])
    rec = Recalibrator.fit(*gaussian_pit(r, 0.0, 1.0))
    z = gaussian_levels(rec, LEVELS)
    assert z[0] < -17 and z[-1] > 17 and np.all(np.diff(z) > 0)


# ----------------------------------------------------------------- gp-recal
def forrester(x: np.ndarray) -> np.ndarray:
    return (6 * x - 2) ** 2 * np.sin(12 * x - 4)


def _coverage(m, X, y, Xt, yt) -> tuple[np.ndarray, float]:
    q = m.fit(X, y).predict_quantiles(Xt)
    return np.array([np.mean((q[:, j] <= yt) & (yt <= q[:, 9 - j])) for j in range(5)]), float(
        np.mean(q[:, 8] - q[:, 1]))


def _compare(make_plain, make_recal, n: int, seeds: range):
    cov = {"plain": [], "recal": []}
    width = {"plain": [], "recal": []}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        X, Xt = rng.random((n, 1)), rng.random((2000, 1))
        y, yt = forrester(X[:, 0]), forrester(Xt[:, 0])
        for key, make in (("plain", make_plain), ("recal", make_recal)):
            c, w = _coverage(make(seed), X, y, Xt, yt)
            cov[key].append(c)
            width[key].append(w)
    err = {k: float(np.mean(np.abs(np.mean(v, axis=0) - NOMINAL))) for k, v in cov.items()}
    return err, {k: float(np.mean(v)) for k, v in width.items()}


@pytest.mark.parametrize("splits", ["loo", "timeseries"])
def test_overconfident_gp_is_widened_towards_nominal(splits: str) -> None:
    # a kernel far too smooth for Forrester's dip (lengthscale 0.5 on [0, 1], no noise):
    # the plain GP covers ~20-50% where it claims 10-90%
    kernel = ConstantKernel(1.0, "fixed") * Matern(0.5, "fixed", nu=2.5) + WhiteKernel(1e-6, "fixed")
    err, width = _compare(
        lambda s: QGP(LEVELS, s, kernel=kernel),
        lambda s: GPRecal(LEVELS, s, proto=QGP(LEVELS, s, kernel=kernel), splits=splits),
        12, range(10),
    )
    assert err["plain"] > 0.15
    assert width["recal"] > 1.5 * width["plain"]
    assert err["recal"] < 0.5 * err["plain"] and err["recal"] < 0.1, err


def test_underconfident_gp_is_narrowed_towards_nominal() -> None:
    # with its kernel tuned by maximum likelihood on 20 noiseless Forrester points the GP
    # over-covers (its inner intervals hold 70-80% where 10-30% are claimed): recalibration narrows
    err, width = _compare(lambda s: make_surrogate("qgp", LEVELS, seed=s),
                          lambda s: make_surrogate("gp-recal", LEVELS, seed=s), 20, range(8))
    assert err["plain"] > 0.2
    assert width["recal"] < 0.6 * width["plain"]
    assert err["recal"] < 0.1, err


def test_nearly_identity_where_the_gp_is_right() -> None:
    # smooth signal plus Gaussian noise: the leave-one-out PITs are about uniform
    for seed in range(3):
        rng = np.random.default_rng(seed)
        X = rng.random((150, 2))
        y = np.sin(3 * X[:, 0]) + X[:, 1] + 0.2 * rng.standard_normal(150)
        m = make_surrogate("gp-recal", LEVELS, seed=seed).fit(X, y)
        assert np.max(np.abs(m.recalibrator.inverse(LEVELS) - LEVELS)) < 0.08
        mean, sd = m.predict_moments(X[:5])
        q = m.predict_quantiles(X[:5])
        np.testing.assert_allclose(q, mean[:, None] + sd[:, None] * norm.ppf(LEVELS), atol=0.35 * sd.max())


@pytest.mark.parametrize("splits", ["loo", "timeseries"])
def test_closed_form_forecasts_equal_explicit_refits(splits: str) -> None:
    rng = np.random.default_rng(4)
    X = rng.random((30, 2))
    y = np.sin(3 * X[:, 0]) + X[:, 1] + 0.1 * rng.standard_normal(30)
    gp = GPRecal(LEVELS, 0, splits=splits).fit(X, y)._base._gp
    mean, sd, target = closed_form_forecasts(gp, splits)
    held = range(30) if splits == "loo" else range(gp_recal.TS_MIN_TRAIN, 30)
    for k, i in enumerate(held):
        train = np.delete(np.arange(30), i) if splits == "loo" else np.arange(i)
        ref = GaussianProcessRegressor(gp.kernel_, optimizer=None).fit(gp.X_train_[train], gp.y_train_[train])
        m, s = ref.predict(gp.X_train_[i : i + 1], return_std=True)
        assert target[k] == gp.y_train_[i]
        np.testing.assert_allclose([mean[k], sd[k]], [m[0], s[0]], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("splits", ["loo", "timeseries"])
def test_refit_splits_when_no_closed_form(splits: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    X = rng.random((40, 2))
    y = np.sin(3 * X[:, 0]) + X[:, 1] + 0.1 * rng.standard_normal(40)
    closed = GPRecal(LEVELS, 0, splits=splits).fit(X, y)
    monkeypatch.setattr(gp_recal, "_exact_sklearn_gp", lambda base: None)
    refit = GPRecal(LEVELS, 0, splits=splits).fit(X, y)
    assert refit.pits[0].size == closed.pits[0].size
    # the same forecasts up to the folds' own target standardisation (which moves the
    # time-series forecasts from the shortest prefixes most)
    assert np.corrcoef(norm.ppf(refit.pits[0]), norm.ppf(closed.pits[0]))[0, 1] > 0.95
    capped = GPRecal(LEVELS, 0, splits=splits, max_splits=10).fit(X, y)
    assert capped.pits[0].size == 10
    np.testing.assert_array_equal(capped.predict_quantiles(X),
                                  GPRecal(LEVELS, 0, splits=splits, max_splits=10).fit(X, y).predict_quantiles(X))


@pytest.mark.parametrize("splits", ["loo", "timeseries"])
def test_reproducible_and_clones_reuse_the_kernel(splits: str) -> None:
    rng = np.random.default_rng(6)
    X = rng.random((50, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1] + 0.1 * rng.standard_normal(50)
    m = make_surrogate("gp-recal", LEVELS, seed=2, splits=splits).fit(X, y)
    again = make_surrogate("gp-recal", LEVELS, seed=2, splits=splits).fit(X, y)
    np.testing.assert_array_equal(m.predict_quantiles(X), again.predict_quantiles(X))
    clone = m.fold_clone()
    assert isinstance(clone, GPRecal) and not clone.fitted and clone.options == m.options
    clone.fit(X[:35], y[:35])
    np.testing.assert_array_equal(clone._base._gp.kernel_.theta, m._base._gp.kernel_.theta)
    assert clone.recalibrator is not m.recalibrator


@pytest.mark.parametrize("n", [2, 3])
def test_too_few_points_means_no_recalibration(n: int) -> None:
    rng = np.random.default_rng(7)
    X, y = rng.random((n, 2)), rng.random(n)
    m = make_surrogate("gp-recal", LEVELS, seed=0).fit(X, y)
    assert m.recalibrator.is_identity and m.pits is None
    Xt = rng.random((10, 2))
    np.testing.assert_allclose(m.predict_quantiles(Xt),
                               make_surrogate("qgp", LEVELS, seed=0).fit(X, y).predict_quantiles(Xt),
                               rtol=1e-5, atol=1e-5)
    ts = make_surrogate("gp-recal", LEVELS, seed=0, splits="timeseries").fit(rng.random((5, 2)), rng.random(5))
    assert ts.recalibrator.is_identity  # 5 points leave 3 one-step-ahead forecasts


def test_bad_splits_option() -> None:
    with pytest.raises(ValueError):
        make_surrogate("gp-recal", LEVELS, splits="kfold")
