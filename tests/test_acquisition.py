"""Acquisitions pick the known best on constructed quantile arrays; directions are symmetric."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from calibo.engine import EngineConfig, SearchSpace, Snapshot, StudyState, fit, select
from calibo.engine import acquisition as acq
from calibo.engine.state import initial_states
from calibo.engine.warp import Warp

L = 10
LEVELS = (np.arange(L) + 0.5) / L


def normal_rows(means, sds) -> np.ndarray:
    return np.asarray(means)[:, None] + np.asarray(sds)[:, None] * norm.ppf(LEVELS)[None, :]


def pick(name: str, Q: np.ndarray, best: float | None = 0.0, seed: int = 0) -> int:
    return int(np.argmin(acq.score(name, Q, LEVELS, best=best, rng=np.random.default_rng(seed))))


@pytest.mark.parametrize("name", acq.ACQUISITIONS)
def test_a_dominating_candidate_is_picked(name: str) -> None:
    # candidate 3's whole distribution lies below every other's
    Q = normal_rows([5.0, 4.0, 6.0, 0.0, 4.5], [0.2, 0.2, 0.2, 0.2, 0.2])
    assert pick(name, Q, best=1.0) == 3


@pytest.mark.parametrize("name", ["ucb", "ei", "pi", "mean", "logei"])
def test_a_slightly_shifted_copy_is_picked_by_deterministic_scores(name: str) -> None:
    # same shape, the middle row shifted down by a little: every deterministic score must see it
    shape = np.sort(np.random.default_rng(3).normal(size=L))
    Q = np.stack([shape + 0.05, shape, shape + 0.02])
    assert pick(name, Q, best=float(np.median(shape))) == 1


@pytest.mark.parametrize("name", ["ts", "its", "obs"])
def test_stochastic_scores_pick_a_dominating_candidate_for_every_draw(name: str) -> None:
    rng = np.random.default_rng(4)
    Q = np.sort(rng.normal(size=(30, L)), axis=1) + 5.0
    Q[17] = np.sort(rng.normal(size=L)) - 5.0  # support entirely below every other row
    assert {pick(name, Q, seed=s) for s in range(50)} == {17}


def test_ucb_prefers_the_lower_optimistic_end() -> None:
    Q = normal_rows([1.0, 1.5], [0.1, 2.0])  # the wide one reaches lower
    assert pick("ucb", Q) == 1
    assert pick("mean", Q) == 0


def test_ei_prefers_variance_when_means_tie_above_best() -> None:
    Q = normal_rows([1.0, 1.0], [0.1, 1.0])
    assert pick("ei", Q, best=0.0) == 1
    assert pick("pi", Q, best=0.0) == 1


def test_log_ei_is_gaussian_ei_in_the_tails_and_close_in_the_body() -> None:
    means = np.array([0.0, 0.5, 1.0, 3.0, 8.0, 40.0])
    sds = np.array([1.0, 0.3, 2.0, 0.5, 1.0, 1.0])
    best = 0.2
    z = (best - means) / sds
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 60  # the reference in high precision: at z = -40 double precision underflows
    exact = np.array([float(mpmath.log(s * (mpmath.npdf(v) + v * mpmath.ncdf(v))))
                      for s, v in zip(sds, z, strict=True)])
    got = acq.log_ei(normal_rows(means, sds), LEVELS, best)
    assert np.all(np.isfinite(got))
    # far from improving, only the Gaussian tail counts: exact; near, the piecewise-uniform body
    # between the 5% and 95% quantiles differs from the normal by a few percent
    np.testing.assert_allclose(got[3:], exact[3:], rtol=1e-9)
    np.testing.assert_allclose(np.exp(got[:3]), np.exp(exact[:3]), rtol=0.05)


def test_log_h_is_finite_and_exact_far_into_the_tail() -> None:
    """log(phi(z) + z Phi(z)) for z from 5 down to -1e9: finite, increasing, and within 1e-12
    (relative) of the asymptote phi(z)/z^2 where that is exact, with no floating-point warning."""
    z = np.concatenate([np.linspace(5.0, -1.0, 50), -np.logspace(0.01, 9.0, 400)])
    with np.errstate(all="raise"):
        v = acq.log_h(z)
    assert np.isfinite(v).all() and np.all(np.diff(v) < 0)
    far = z < -1e4
    asym = -0.5 * z[far] ** 2 - 0.5 * np.log(2 * np.pi) - 2 * np.log(-z[far])
    assert np.allclose(v[far], asym, rtol=1e-12, atol=0)
    near = (z > -6) & (z < 5)  # against the direct formula where it does not underflow
    direct = np.log(norm.pdf(z[near]) + z[near] * norm.cdf(z[near]))
    assert np.allclose(v[near], direct, rtol=1e-9, atol=1e-12)


def test_log_ei_tells_apart_what_ei_scores_zero() -> None:
    # once the search found a good region, most candidates' bounded EI is exactly 0: a tie that
    # argmin breaks by row order; log EI still ranks them by how far (in their spread) they are
    Q = normal_rows([3.0, 5.0, 4.0, 3.5], [0.5, 2.0, 0.4, 0.3])
    assert np.all(acq.ei(Q, LEVELS, 0.0) == 0.0)
    s = acq.logei(Q, LEVELS, 0.0)
    assert np.all(np.isfinite(s)) and len(set(s.round(9))) == 4
    assert int(np.argmin(s)) == 1  # z = -2.5: the most likely to improve, and by the most


def test_a_plateau_tie_is_not_sure_improvement() -> None:
    """A quantized metric: many observations at the best value make the model predict that value,
    with little spread, across the plateau. PI scores such a point near 1/2, above any uncertain
    point; log EI values the size of an improvement, and prefers the point that could improve."""
    Q = normal_rows([0.10, 0.13], [0.001, 0.04])  # on the plateau at best = 0.10 / off it, uncertain
    assert pick("pi", Q, best=0.10) == 0
    assert pick("logei", Q, best=0.10) == 1


def test_ei_matches_monte_carlo_of_its_piecewise_uniform_distribution() -> None:
    rng = np.random.default_rng(1)
    Q = np.sort(rng.normal(size=(4, L)) * [[1.0], [2.0], [0.5], [3.0]], axis=1)
    q, p = acq._knots(Q, LEVELS)
    u = rng.random(400_000)
    for i in range(4):
        y = np.interp(u, p, q[i])  # inverse CDF of the piecewise-linear quantile function
        for best in (-1.0, 0.0, 0.5):
            mc = np.maximum(best - y, 0).mean()
            assert -acq.ei(Q[i : i + 1], LEVELS, best)[0] == pytest.approx(mc, abs=3e-3)
            assert -acq.pi(Q[i : i + 1], LEVELS, best)[0] == pytest.approx((y < best).mean(), abs=3e-3)
        assert acq.mean_of(Q[i : i + 1], LEVELS)[0] == pytest.approx(y.mean(), abs=1e-2)


@pytest.mark.parametrize(("a", "b"), [(0.0, 1.0), (-3.0, 5.0), (10.0, 10.5)])
def test_ei_pi_and_mean_are_exact_for_a_uniform_distribution(a: float, b: float) -> None:
    # the midpoint quantiles of U[a, b] extend linearly to exactly a and b, so the
    # piecewise-uniform distribution *is* U[a, b] and the closed forms must hold
    Q = (a + (b - a) * LEVELS)[None, :]
    q, p = acq._knots(Q, LEVELS)
    np.testing.assert_allclose(q[0, [0, -1]], [a, b], atol=1e-12)
    assert acq.mean_of(Q, LEVELS)[0] == pytest.approx((a + b) / 2, abs=1e-12)
    for t in np.linspace(a - 1, b + 1, 23):
        ei_exact = (t - (a + b) / 2) if t >= b else ((t - a) ** 2 / (2 * (b - a)) if t > a else 0.0)
        pi_exact = min(max((t - a) / (b - a), 0.0), 1.0)
        assert -acq.ei(Q, LEVELS, t)[0] == pytest.approx(ei_exact, abs=1e-9)
        assert -acq.pi(Q, LEVELS, t)[0] == pytest.approx(pi_exact, abs=1e-8)  # 1e-9 tie-break term


def test_pi_breaks_ties_by_the_lowest_quantile() -> None:
    # no candidate has mass below best: PI is 0 for all, the lowest lower end wins
    Q = normal_rows([5.0, 4.0, 6.0], [1.0, 0.1, 3.0])
    assert pick("pi", Q, best=-100.0) == int(np.argmin(Q[:, 0])) == 2
    # every candidate surely improves: probability 1 for all, again the lowest quantile
    assert pick("pi", Q, best=100.0) == 2


def test_ei_pi_without_a_best_fall_back_to_the_mean() -> None:
    Q = normal_rows([1.0, 0.5, 2.0], [3.0, 0.1, 0.1])
    rng = np.random.default_rng(0)
    for name in ("ei", "pi"):
        np.testing.assert_array_equal(acq.score(name, Q, LEVELS, best=None, rng=rng), acq.mean_of(Q, LEVELS))


def test_ucb_is_the_optimistic_end_of_the_widest_interval() -> None:
    # the wide row reaches lowest at the 90% interval (though not at the 10% one): UCB takes it
    Q = np.stack([np.linspace(-4.5, 5.5, L), np.linspace(-1.0, 0.2, L)])
    rng = np.random.default_rng(0)
    assert int(np.argmin(acq.score("ucb", Q, LEVELS, best=0.0, rng=rng))) == 0
    np.testing.assert_array_equal(acq.ucb(Q, LEVELS), Q[:, 0])


def test_obs_is_the_ts_draw_floored_by_the_mean() -> None:
    rng = np.random.default_rng(5)
    Q = np.sort(rng.normal(size=(200, L)) * rng.uniform(0.1, 3, (200, 1)), axis=1)
    draw = acq.ts(Q, LEVELS, np.random.default_rng(9))
    o = acq.obs(Q, LEVELS, np.random.default_rng(9))
    np.testing.assert_array_equal(o, np.minimum(draw, acq.mean_of(Q, LEVELS)))
    assert np.all((draw[:, None] == Q).any(axis=1))  # a TS draw is one of the row's own quantiles


def test_mean_of_symmetric_distribution_is_its_median() -> None:
    Q = normal_rows([2.0, -1.0], [1.0, 3.0])
    np.testing.assert_allclose(acq.mean_of(Q, LEVELS), [2.0, -1.0], atol=1e-12)
    # any symmetric, non-Gaussian shape too (mean == median == centre)
    half = np.cumsum(np.random.default_rng(6).exponential(size=(5, L // 2)), axis=1)
    centre = np.arange(5.0) - 2
    Q = centre[:, None] + np.hstack([-half[:, ::-1], half])
    np.testing.assert_allclose(acq.mean_of(Q, LEVELS), centre, atol=1e-12)
    assert np.all(acq.mean_of(Q + 1.0, LEVELS) > acq.mean_of(Q, LEVELS))


def test_ts_draws_levels_uniformly_and_obs_floors_at_the_mean() -> None:
    Q = np.tile(np.arange(L, dtype=float), (20000, 1))
    draws = acq.ts(Q, LEVELS, np.random.default_rng(0))
    counts = np.bincount(draws.astype(int), minlength=L) / draws.size
    assert np.all(np.abs(counts - 1 / L) < 0.01)
    o = acq.obs(Q, LEVELS, np.random.default_rng(0))
    assert np.all(o <= acq.mean_of(Q[:1], LEVELS)[0] + 1e-12)  # min(mean, draw) when minimising


@pytest.mark.parametrize("name", acq.ACQUISITIONS)
def test_minimize_and_maximize_are_symmetric(name: str) -> None:
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1}})
    rng = np.random.default_rng(2)
    N = 50
    cand = space.snap(rng.random((N, 1)))
    Q = np.sort(rng.normal(size=(N, L)) * rng.uniform(0.2, 2, (N, 1)) + rng.normal(size=(N, 1)), axis=1)
    cfg = EngineConfig(acquisition=name, surrogate="qgp", conformal="raw", n_warmup=4)
    common = {"levels": LEVELS, "candidates": cand, "observed": np.empty((0, 1)), "method": "raw", "n_obs": 40}
    # minimising y with quantiles Q is maximising -y, whose quantiles are -Q reversed;
    # the engine stores the minimise orientation, so both snapshots hold Q.
    lo = Snapshot(raw=Q, best=-0.5, **common)
    hi = Snapshot(raw=Q.copy(), best=-0.5, **common)
    a = select(lo, StudyState(1, initial_states(cfg)), space, cfg, direction="minimize", asked=3)[0]
    b = select(hi, StudyState(1, initial_states(cfg)), space, cfg, direction="maximize", asked=3)[0]
    assert a.params == b.params
    qa, qb = np.array(a.prediction.to_dict()["quantiles"]), np.array(b.prediction.to_dict()["quantiles"])
    row = space.keys(cand).index(space.keys(space.to_unit([a.params]))[0])
    np.testing.assert_array_equal(qa, Q[row])
    # the maximised variable is the negation: its quantiles are -Q reversed, as the user sees them
    np.testing.assert_allclose(qb, -Q[row, ::-1])
    ia, ib = a.prediction.to_dict()["intervals"][0], b.prediction.to_dict()["intervals"][0]
    assert (ib["lower"], ib["upper"]) == pytest.approx((-ia["upper"], -ia["lower"]))
    assert b.prediction.to_dict()["mean"] == pytest.approx(-a.prediction.to_dict()["mean"])


def smooth_observations(space: SearchSpace, n: int) -> list:
    configs = space.from_unit(space.sample(n, 5))
    return [(c, float((c["x"] - 0.3) ** 2 + 0.3 * np.sin(7 * c["z"]) + {"a": 0.0, "b": 0.4}[c["k"]]))
            for c in configs]


@pytest.mark.parametrize("n", [20, 40])  # raw, CV+
@pytest.mark.parametrize("name", acq.ACQUISITIONS)
def test_fit_and_select_are_symmetric_in_direction(name: str, n: int) -> None:
    # maximising -f stores the same internal (minimise) snapshot as minimising f, so the
    # same candidates are picked (TS draws align: same seed and asked), reported negated
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1},
                                   "z": {"type": "float", "low": 0, "high": 1},
                                   "k": {"type": "categorical", "choices": ["a", "b"]}})
    cfg = EngineConfig(acquisition=name, surrogate="qgp", n_candidates=200)
    obs = smooth_observations(space, n)
    lo = fit(obs, space, cfg, "minimize", seed=2)
    hi = fit([(c, -v) for c, v in obs], space, cfg, "maximize", seed=2)
    np.testing.assert_array_equal(lo.raw, hi.raw)
    assert lo.best == hi.best
    # the snapshot works on warped values (engine.warp); its best maps back to the best observed
    np.testing.assert_allclose(Warp.from_dict(lo.meta.warp).inverse(lo.best), min(v for _, v in obs))
    states = initial_states(cfg)
    a = select(lo, StudyState(2, states), space, cfg, count=3, direction="minimize", asked=n)
    b = select(hi, StudyState(2, states), space, cfg, count=3, direction="maximize", asked=n)
    assert [s.params for s in a] == [s.params for s in b]
    for sa, sb in zip(a, b, strict=True):
        np.testing.assert_allclose(sb.prediction.to_dict()["quantiles"],
                                   -np.array(sa.prediction.to_dict()["quantiles"])[::-1])
        assert sb.prediction.to_dict()["mean"] == pytest.approx(-sa.prediction.to_dict()["mean"])


def test_the_incumbent_is_the_best_observation_even_a_lucky_draw() -> None:
    """What an improvement acquisition improves on: the best observed value (warped, minimised),
    even where a noisy draw lies far below anything the objective reaches."""
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    rng = np.random.default_rng(4)
    x = rng.uniform(0.0, 1.0, 60)
    y = 4.0 * (x - 0.7) ** 2 + rng.normal(0.0, 0.3, 60)
    y[np.argmin(np.abs(x - 0.2))] = -2.0  # at x ~ 0.2 the bowl is ~1: a draw no configuration repeats
    obs = [({"x": float(a)}, float(b)) for a, b in zip(x, y, strict=True)]
    snap = fit(obs, space, EngineConfig(warp="none", n_candidates=300), seed=0)
    assert snap.best == -2.0


def test_unknown_acquisition() -> None:
    with pytest.raises(ValueError):
        acq.score("nope", np.zeros((2, L)), LEVELS, best=0.0, rng=np.random.default_rng(0))


def test_its_draws_follow_the_linearly_interpolated_quantile_function() -> None:
    # one row repeated: the fraction of draws below each calibrated quantile is its level,
    # and draws between two knots are uniform (linear interpolation of the quantile function)
    q = np.sort(np.random.default_rng(5).normal(size=L) * 3)
    Q = np.tile(q, (200_000, 1))
    draws = acq.its(Q, LEVELS, np.random.default_rng(6))
    below = (draws[:, None] <= q[None, :]).mean(axis=0)
    np.testing.assert_allclose(below, LEVELS, atol=0.004)
    inner = draws[(draws > q[4]) & (draws < q[5])]
    np.testing.assert_allclose(np.mean(inner), (q[4] + q[5]) / 2, atol=0.01 * (q[5] - q[4]) + 1e-3)
    assert draws.min() >= q[0] - (q[1] - q[0]) / (LEVELS[1] - LEVELS[0]) * LEVELS[0] - 1e-9
