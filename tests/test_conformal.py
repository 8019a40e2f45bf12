"""Conformal coverage on data with known, heteroskedastic, skewed noise.

Each check averages empirical coverage over many independent draws (fixed
seeds), so the tolerance is about the method, not about one lucky sample.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from calibo.engine.conformal import (
    Bounds,
    beta_of,
    check_levels,
    conformalize,
    interval_from_points,
    midpoint_levels,
    model_scores,
    pair_alphas,
    schedule,
)
from calibo.engine.surrogates import make_surrogate
from calibo.engine.surrogates.base import BaseSurrogate

LEVELS = np.array([0.1, 0.25, 0.75, 0.9])  # pairs: 80% and 50% intervals
NOMINAL = np.array([0.8, 0.5])
ALPHAS = 1 - NOMINAL


def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """y = sin(6 x1) + 2 x0 + (0.1 + 0.9 x0) * centred log-normal noise (right-skewed)."""
    X = rng.random((n, 2))
    noise = rng.lognormal(0.0, 0.6, n) - np.exp(0.18)
    return X, np.sin(6 * X[:, 1]) + 2 * X[:, 0] + (0.1 + 0.9 * X[:, 0]) * noise


def mean_coverage(surrogate: str, method: str, n: int, draws: int, **options) -> np.ndarray:
    """Mean coverage of the 80% and 50% intervals over ``draws`` fits (``options``: conformalize's)."""
    covs = []
    for r in range(draws):
        rng = np.random.default_rng(1000 + r)
        X, y = draw(rng, n)
        Xt, yt = draw(rng, 300)
        cf = conformalize(lambda r=r: make_surrogate(surrogate, LEVELS, r), X, y, method, r,
                          n_bootstraps=10, **options)
        raw = cf.model.predict_quantiles(Xt)
        folds = None if cf.fold_models is None else np.stack([m.predict_quantiles(Xt) for m in cf.fold_models])
        scale = cf.model.predict_scale(Xt) if cf.scaled else cf.transport(Xt)  # as fit stores it
        Q = Bounds(cf.method, raw, cf.scores, folds, cf.fold_of, scale).at(ALPHAS)
        covs.append([np.mean((Q[:, 0] <= yt) & (yt <= Q[:, 3])), np.mean((Q[:, 1] <= yt) & (yt <= Q[:, 2]))])
    return np.mean(covs, axis=0)


@pytest.mark.parametrize("surrogate", ["qgbm", "qgp"])
def test_split_conformal_covers_within_three_points(surrogate: str) -> None:
    # 160 observations -> 40 calibration scores: the split guarantee's slack is 1/41.
    cov = mean_coverage(surrogate, "split", 160, 60)
    assert np.all(np.abs(cov - NOMINAL) <= 0.03), cov


def test_cv_plus_covers_within_three_points() -> None:
    # CV+ is where the schedule uses it: below 50 observations.
    cov = mean_coverage("qgp", "cv+", 45, 80)
    assert np.all(np.abs(cov - NOMINAL) <= 0.03), cov


def test_cv_plus_is_valid_for_unstable_tree_models() -> None:
    # Fold-to-fold variation of boosted trees makes CV+ conservative (about +5
    # points measured), never under-covering beyond the tolerance.
    cov = mean_coverage("qgbm", "cv+", 45, 30)
    assert np.all(cov >= NOMINAL - 0.03), cov


@pytest.mark.parametrize("method", ["crossval", "jab+"])
def test_crossval_and_jackknife_after_bootstrap_cover_within_four_points(method: str) -> None:
    # Thesis Alg. 4 and 5: the shown model averages the fold / bootstrap models and the
    # split rule runs over out-of-fold (leave-out) scores. Neither has split's finite-sample
    # guarantee (the averaged model saw every point); measured within 2 points here.
    cov = mean_coverage("qgp", method, 60, 40)
    assert np.all(np.abs(cov - NOMINAL) <= 0.04), cov


class Oracle(BaseSurrogate):
    """Knows the mean of ``draw``; scaled, it also knows its noise scale (x0 sets it)."""

    name = "oracle"
    scaled = True

    def _fit(self, X, z):
        pass

    def _predict(self, X):
        mu = (np.sin(6 * X[:, 1]) + 2 * X[:, 0] - self._mu) / self._sd
        spread = self._scale(X) if self.scaled else np.full(X.shape[0], 0.55 / self._sd)
        return mu[:, None] + spread[:, None] * np.array([-1.0, -0.5, 0.5, 1.0])

    def _scale(self, X):
        return (0.1 + 0.9 * X[:, 0]) / self._sd


class ConstantOracle(Oracle):
    scaled = False  # the pure-residual score: one width everywhere (thesis, after eq. 3.4)


def test_scaled_scores_give_locally_weighted_intervals_that_cover_everywhere() -> None:
    # ACHO eq. 17-18: scores |y - mu| / V and intervals mu +- V q. With the true noise scale as V
    # the interval covers at nominal in the quiet half (x0 < 0.5) and the noisy half alike; a
    # constant-width band (unscaled scores) over-covers the quiet half and under-covers the other.
    by_half = {Oracle: [], ConstantOracle: []}
    for r in range(30):
        rng = np.random.default_rng(2000 + r)
        X, y = draw(rng, 200)
        Xt, yt = draw(rng, 400)
        for cls in by_half:
            cf = conformalize(lambda cls=cls, r=r: cls(LEVELS, r), X, y, "split", r)
            scale = cf.model.predict_scale(Xt) if cf.scaled else None
            Q = Bounds("split", cf.model.predict_quantiles(Xt), cf.scores, scale=scale).at(ALPHAS)
            inside = (Q[:, 0] <= yt) & (yt <= Q[:, 3])
            by_half[cls].append([inside[Xt[:, 0] < 0.5].mean(), inside[Xt[:, 0] >= 0.5].mean()])
    quiet, noisy = np.mean(by_half[Oracle], axis=0)
    assert abs(quiet - 0.8) <= 0.03 and abs(noisy - 0.8) <= 0.03, (quiet, noisy)
    quiet, noisy = np.mean(by_half[ConstantOracle], axis=0)
    assert quiet > 0.9 and noisy < 0.72, (quiet, noisy)


def test_scaled_split_bounds_are_mu_plus_minus_spread_times_the_score_quantile() -> None:
    rng = np.random.default_rng(1)
    raw = np.sort(rng.normal(size=(7, 4)), axis=1)
    scale = rng.uniform(0.5, 2.0, 7)
    scores = rng.exponential(size=(19, 2))
    k = int(np.ceil(0.8 * 20))
    Q = Bounds("split", raw, scores, scale=scale).at(np.array([0.2, 0.2]))
    np.testing.assert_allclose(Q[:, 0], raw[:, 0] - scale * np.sort(scores[:, 0])[k - 1])
    np.testing.assert_allclose(Q[:, 3], raw[:, 3] + scale * np.sort(scores[:, 0])[k - 1])
    lows, highs = Bounds("split", raw, scores, scale=scale).points(2)  # what adapt reads
    np.testing.assert_allclose(lows[0], np.sort(raw[2, 0] - scale[2] * scores[:, 0]))
    np.testing.assert_allclose(highs[1], np.sort(raw[2, 2] + scale[2] * scores[:, 1]))


def test_raw_quantiles_from_a_small_sample_miscover() -> None:
    cov = mean_coverage("qgbm", "raw", 45, 40)
    assert np.all(np.abs(cov - NOMINAL) > 0.05), cov


def test_split_bounds_match_order_statistic_formula() -> None:
    rng = np.random.default_rng(0)
    raw = np.sort(rng.normal(size=(7, 4)), axis=1)
    scores = rng.normal(size=(19, 2))
    n = 19
    for a in (0.05, 0.2, 0.5, 0.8):
        Q = Bounds("split", raw, scores).at(np.array([a, a]))
        k = int(np.ceil((1 - a) * (n + 1)))  # eq. 10: the ceil((1-a)(n+1))-th smallest score
        q = np.sort(scores[:, 0])[k - 1]
        want_lo, want_hi = raw[:, 0] - q, raw[:, 3] + q
        got = np.sort(np.column_stack([want_lo, raw[:, 1] - np.sort(scores[:, 1])[k - 1],
                                       raw[:, 2] + np.sort(scores[:, 1])[k - 1], want_hi]), axis=1)
        np.testing.assert_allclose(Q, got)


def test_beta_is_the_largest_alpha_that_still_covers() -> None:
    rng = np.random.default_rng(3)
    lower = np.sort(rng.normal(-1, 1, 30))
    upper = np.sort(rng.normal(1, 1, 30))
    for y in rng.normal(0, 2, 200):
        beta = beta_of(lower, upper, y)
        for a in np.linspace(0.001, 0.999, 97):
            n = len(lower)
            k_lo, k_hi = int(np.floor(a * (n + 1))), int(np.ceil((1 - a) * (n + 1)))
            lo = -np.inf if k_lo < 1 else lower[k_lo - 1]
            hi = np.inf if k_hi > n else upper[k_hi - 1]
            assert (lo <= y <= hi) == (a < beta), (y, a, beta)
            if np.isfinite(lo) and np.isfinite(hi):  # the clamped form agrees where finite
                assert interval_from_points(lower, upper, a) == (lo, hi)


def test_schedule_and_levels() -> None:
    assert schedule(10) == "raw" and schedule(31) == "raw"
    assert schedule(32) == "cv+" and schedule(49) == "cv+"
    assert schedule(50) == "split" and schedule(500) == "split"
    assert schedule(100, mode="cv+") == "cv+" and schedule(100, mode="raw") == "raw"
    assert schedule(100, mode="jab+") == "jab+" and schedule(100, mode="crossval") == "crossval"
    assert schedule(20, mode="jab+") == "raw"
    assert schedule(20, 10) == "cv+" and schedule(60, 10, 80) == "cv+" and schedule(9, 10) == "raw"
    with pytest.raises(ValueError):
        schedule(100, mode="jackknife")
    lv = midpoint_levels(10)
    np.testing.assert_allclose(pair_alphas(lv), [0.1, 0.3, 0.5, 0.7, 0.9])
    for bad in ([0.2, 0.9], [0.1, 0.5, 0.9], [0.6, 0.4], [0.0, 1.0]):
        with pytest.raises(ValueError):
            check_levels(np.array(bad))


def test_split_refit_shows_a_model_of_every_observation_with_the_split_scores() -> None:
    """A GP's split shows the split model's refit on every observation and keeps the split model's
    held-out scores (and the split model, ``scored_model``, for ``transport``); a surrogate refitted
    from scratch would be another model than the one scored, so it shows the split model."""
    rng = np.random.default_rng(11)
    X = rng.random((60, 2))
    y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2  # noise-free: a GP that saw a point predicts it
    refit = conformalize(lambda: make_surrogate("qgp", LEVELS, 0), X, y, "split", 3)
    split = refit.scored_model
    cal = refit.cal_index
    assert split is not None and cal.size == 15
    np.testing.assert_array_equal(refit.scores, model_scores(split, X[cal], y[cal]))  # the split model's
    median = LEVELS.size // 2

    def error(model) -> float:
        q = model.predict_quantiles(X[cal])
        return float(np.abs(0.5 * (q[:, median - 1] + q[:, median]) - y[cal]).mean())

    assert error(refit.model) < 0.1 * error(split)  # the calibration points are in the refitted model
    # same hyperparameters: the refit only conditions on the held-out points too
    np.testing.assert_allclose(refit.model.gp_kernel()["lengthscale"], split.gp_kernel()["lengthscale"],
                               rtol=0.05)
    tree = conformalize(lambda: make_surrogate("qgbm", LEVELS, 0), X, y, "split", 3)
    assert tree.scored_model is None and tree.transport(X) is None
    np.testing.assert_array_equal(tree.scores, model_scores(tree.model, X[tree.cal_index], y[tree.cal_index]))


def test_qgp_normalized_scores_keep_the_posterior_shape_and_cover() -> None:
    # QGP's option scores="normalized": residuals in units of the GP's predictive sd, intervals the
    # GP's quantiles widened by sd * q, so width / sd is one number for every point (narrow where
    # the posterior is sure, wide where it is not); the plain quantile scores add one width to all
    covs = []
    for r in range(40):
        rng = np.random.default_rng(3000 + r)
        X, y = draw(rng, 160)
        Xt, yt = draw(rng, 300)
        Xt[:100] = 1.5 + rng.random((100, 2))  # far from the data (their yt is not theirs: width only)
        for scores in ("normalized", "cqr"):
            cf = conformalize(lambda r=r, s=scores: make_surrogate("qgp", LEVELS, r, scores=s), X, y, "split", r)
            assert cf.scaled == (scores == "normalized")
            # quantile scores: the split model's own intervals, one correction for all (the refit's
            # is carried to it per candidate: ConformalFit.transport)
            model = cf.model if cf.scaled else cf.scored_model
            sd = model.predict_moments(Xt)[1]
            scale = model.predict_scale(Xt) if cf.scaled else None
            Q = Bounds("split", model.predict_quantiles(Xt), cf.scores, scale=scale).at(ALPHAS)
            width, raw = Q[:, 3] - Q[:, 0], sd * (norm.ppf(LEVELS[3]) - norm.ppf(LEVELS[0]))
            if scores == "normalized":  # sd * (z_0.9 - z_0.1 + 2 q)
                np.testing.assert_allclose(width / sd, width[0] / sd[0], rtol=1e-6)
                near = slice(100, None)
                covs.append([np.mean((Q[near, 0] <= yt[near]) & (yt[near] <= Q[near, 3])),
                             np.mean((Q[near, 1] <= yt[near]) & (yt[near] <= Q[near, 2]))])
            else:  # sd * (z_0.9 - z_0.1) + 2 q
                np.testing.assert_allclose(width - raw, width[0] - raw[0], atol=1e-6 * np.std(y))
    cov = np.mean(covs, axis=0)
    assert np.all(np.abs(cov - NOMINAL) <= 0.03), cov


def _empty_sets(model, scores: np.ndarray, X: np.ndarray, transport: np.ndarray | None) -> np.ndarray:
    """(n, P) whether each pair's split conformal set at ``ALPHAS`` is empty (crossed ends) at rows ``X``
    (``model``: the shown model, ``scores``: the calibration scores)."""
    b = Bounds("split", model.predict_quantiles(X), scores, scale=transport)
    out = np.zeros((X.shape[0], b.P), dtype=bool)
    for i in range(X.shape[0]):
        lows, highs = b.points(i)  # each pair's sorted point sets, as a prediction stores them
        for j in range(b.P):
            a, c = interval_from_points(lows[j], highs[j], float(ALPHAS[j]))
            out[i, j] = a > c
    return out


def test_split_transported_empties_a_set_only_where_the_split_model_does() -> None:
    """The refit's correction is scaled by its spread over the split model's (``transport``). At the
    held-out points, which the refit has seen (noise-free: it predicts them almost exactly), the
    split model's negative scores added as they are would empty the refit's sets; transported, a set
    is empty exactly where the split model's own set is, and far from the data (where the refit
    changed nothing) the correction is the split's."""
    emptied = transported_empty = 0
    for r in range(5):
        rng = np.random.default_rng(r)
        X = rng.random((60, 2))
        y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2
        cf = conformalize(lambda r=r: make_surrogate("qgp", LEVELS, r), X, y, "split", r)
        Xc = X[cf.cal_index]
        own = _empty_sets(cf.scored_model, cf.scores, Xc, None)
        carried = _empty_sets(cf.model, cf.scores, Xc, cf.transport(Xc))
        np.testing.assert_array_equal(carried, own)  # empty exactly where the split model's own set is
        emptied += int(_empty_sets(cf.model, cf.scores, Xc, None).sum())  # the scores not transported
        transported_empty += int(carried.sum())
        far = 2.0 + rng.random((20, 2))
        assert np.all(np.abs(cf.transport(far) - 1.0) < 0.15)
    assert emptied >= 3 * max(transported_empty, 1), (emptied, transported_empty)


def _study_data(n: int):
    """A two-float space and ``n`` observations of a smooth function on it, for fits through the engine."""
    from calibo.engine import SearchSpace

    space = SearchSpace.from_dict({"a": {"type": "float", "low": 0.0, "high": 1.0},
                                   "b": {"type": "float", "low": 0.0, "high": 1.0}})
    rng = np.random.default_rng(2)
    return space, [({"a": float(a), "b": float(b)}, float(np.sin(6 * b) + 2 * a)) for a, b in rng.random((n, 2))]


def test_a_split_fit_stores_the_transported_correction() -> None:
    from calibo.engine import EngineConfig, fit
    from calibo.engine.snapshot import Snapshot

    space, obs = _study_data(60)
    moved = fit(obs, space, EngineConfig(n_candidates=200), seed=0)
    assert moved.method == "split" and moved.scores.shape[0] == 15  # a quarter held out
    assert moved.scale.shape == (moved.candidates.shape[0],)  # carried per candidate
    assert np.all(moved.scale > 0) and moved.scale.min() < 0.9  # the refit is narrower where it saw more
    assert np.array_equal(Snapshot.from_bytes(moved.to_bytes()).scale, moved.scale)  # stored with it


# ------------------------------------------------------------- nested intervals
def test_nesting_moves_crossed_ends_least_and_keeps_ordered_ones() -> None:
    from calibo.engine.conformal import nested

    lo, hi = np.array([-3.0, -2.0, -1.0]), np.array([3.0, 2.0, 1.0])
    a, b = nested(lo, hi)
    assert a.tobytes() == lo.tobytes() and b.tobytes() == hi.tobytes()  # bit for bit
    # the middle pair (a 30% interval, say) wider than the outer one, the inner one off to the side
    a, b = nested(np.array([-1.0, -2.0, 4.0]), np.array([1.0, 2.5, 4.0]))
    assert np.all(np.diff(a) >= 0) and np.all(np.diff(b) <= 0) and np.all(a <= b)
    # the isotonic fit: each run of ends out of order replaced by its mean
    np.testing.assert_allclose(a, [-1.5, -1.5, 2.875])
    np.testing.assert_allclose(b, [2.875, 2.875, 2.875])


def test_shown_intervals_are_nested_whatever_the_alphas() -> None:
    """ACI moves each pair's alpha on its own; a prediction's intervals stay nested (the 90% one
    contains the 70% one, ...) even when the alphas say otherwise, e.g. a 30% interval asked at a
    smaller alpha than the 10% one."""
    from dataclasses import replace

    from calibo.engine import EngineConfig, SearchSpace, StudyState, fit, select
    from calibo.engine.state import initial_states

    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1}})
    rng = np.random.default_rng(0)
    obs = [({"x": float(x)}, float(np.sin(6 * x) + 0.3 * rng.normal())) for x in rng.uniform(size=60)]
    config = EngineConfig(n_warmup=5)
    snap = fit(obs, space, config, seed=0)
    assert snap.method == "split"
    crossed = 0
    for trial in range(40):
        states = initial_states(config, 0)
        alphas = np.sort(rng.uniform(0.02, 0.98, len(states)))[rng.permutation(len(states))]
        states = [replace(s, alpha=float(a)) for s, a in zip(states, alphas, strict=True)]
        (s,) = select(snap, StudyState(trial, states), space, config, asked=60 + trial, n_observed=60)
        ivs = [vars(iv) for iv in s.prediction.outcomes[0].intervals]  # unbounded ends: infinite
        crossed += any(np.diff([iv["alpha"] for iv in ivs]) < 0)
        for outer, inner in zip(ivs, ivs[1:], strict=False):
            assert outer["lower"] <= inner["lower"] <= inner["upper"] <= outer["upper"]
    assert crossed > 10  # the alphas were out of order in most draws
