"""Weighted (FCS) split conformal, its snapshot arrays, and calibration with trials in flight."""

from __future__ import annotations

import heapq
import json

import numpy as np
import pytest

from calibo.engine import (
    ACIState,
    ConfigError,
    EngineConfig,
    Optimizer,
    SearchSpace,
    Snapshot,
    fit,
    initial_states,
    select,
)
from calibo.engine.conformal import Bounds, beta_of, pair_interval
from calibo.engine.optimizer import adapt
from calibo.engine.shift import density_ratio, design_distribution

ALPHAS = np.r_[np.linspace(0.0, 1.0, 101), [1 / 20, 2 / 20, 10 / 20, 19 / 20, 0.9999]]


# ------------------------------------------------------------------ the rule
@pytest.mark.parametrize("n", [5, 19, 20, 37])
@pytest.mark.parametrize("scaled", [False, True])
def test_equal_weights_reproduce_the_unweighted_split_intervals_exactly(n: int, scaled: bool) -> None:
    rng = np.random.default_rng(n)
    raw = np.sort(rng.normal(size=(40, 6)), axis=1)
    scores = rng.normal(size=(n, 3))
    scale = rng.uniform(0.5, 2.0, 40) if scaled else None
    plain = Bounds("split", raw, scores, scale=scale)
    ones = Bounds("split", raw, scores, scale=scale, cal_weight=np.ones(n), cand_weight=np.ones(40))
    assert ones.weighted and not plain.weighted
    for a in ALPHAS:
        alphas = np.array([a, min(1.0, 1.3 * a), 0.5 * a])
        np.testing.assert_array_equal(ones.at(alphas), plain.at(alphas))
    for row in (0, 7, 39):
        p, w = plain.packed(row), ones.packed(row)
        assert p.shape == (2, 3, n) and w.shape == (2, 3, 2 * n + 1)
        for j in range(3):
            for a in ALPHAS:
                assert pair_interval(p[0, j], p[1, j], a) == pair_interval(w[0, j], w[1, j], a, True)
            for y in rng.normal(0, 3, 50):
                assert beta_of(p[0, j], p[1, j], y) == beta_of(w[0, j], w[1, j], y, True)


def test_weighted_interval_covers_y_exactly_when_alpha_is_below_beta() -> None:
    # one pair, random weights: the shown interval is Bounds.at's, and beta reads the same set
    rng = np.random.default_rng(4)
    for _ in range(20):
        n = int(rng.integers(3, 40))
        raw = np.sort(rng.normal(size=(15, 2)), axis=1)
        scores = rng.normal(size=(n, 1))
        cal_w, cand_w = rng.uniform(0.2, 5.0, n), rng.uniform(0.2, 5.0, 15)
        b = Bounds("split", raw, scores, cal_weight=cal_w, cand_weight=cand_w)
        for a in rng.uniform(0.02, 0.98, 8):
            Q = b.at(np.array([a]))
            for row in range(15):
                pk = b.packed(row)
                lo, hi = pair_interval(pk[0, 0], pk[1, 0], a, True)
                if lo < hi:  # not crossed (an empty set is shown at its midpoint): at's clamped ends
                    assert (lo, hi) == pytest.approx((Q[row, 0], Q[row, 1]))
                total = cal_w.sum() + cand_w[row]
                finite = cand_w[row] <= a * total  # else both ends are infinite, clamped when shown
                for y in rng.normal(0, 3, 20):
                    beta = beta_of(pk[0, 0], pk[1, 0], y, True)
                    if not finite:  # the set is the real line
                        assert a < beta
                    elif lo == hi:  # crossed: the set is empty
                        assert not a < beta
                    else:
                        assert (lo <= y <= hi) == (a < beta), (a, beta, lo, y, hi)


# ----------------------------------------------------------- covariate shift
E3 = np.exp(3.0)


def shifted(rng: np.random.Generator, n: int) -> np.ndarray:
    """Draws from the density 3 exp(3x) / (e^3 - 1) on [0, 1] (inverse CDF)."""
    return np.log1p(rng.random(n) * (E3 - 1.0)) / 3.0


def noisy(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """sin(4x) plus Gaussian noise whose sd grows from 0.2 to 2.0 over [0, 1]."""
    return np.sin(4 * x) + (0.2 + 1.8 * x**2) * rng.normal(size=x.size)


def test_fcs_weights_restore_coverage_under_covariate_shift() -> None:
    # calibration x ~ U(0, 1), test x shifted to where the noise is large; the model's interval
    # has a constant width, so the unweighted 80% interval misses; FCS estimates w and covers
    cover = []
    half = 1.28 * 0.8
    for r in range(20):
        rng = np.random.default_rng(100 + r)
        xc, xt = rng.random(200), shifted(rng, 500)
        yc, yt = noisy(rng, xc), noisy(rng, xt)
        scores = np.maximum(np.sin(4 * xc) - half - yc, yc - np.sin(4 * xc) - half)[:, None]
        raw = np.column_stack([np.sin(4 * xt) - half, np.sin(4 * xt) + half])
        cal_w, test_w = density_ratio(xc[:, None], xt[:, None], np.full(xt.size, 1.0 / xt.size))
        row = []
        for b in (Bounds("split", raw, scores), Bounds("split", raw, scores, cal_weight=cal_w, cand_weight=test_w)):
            Q = b.at(np.array([0.2]))
            row.append(np.mean((Q[:, 0] <= yt) & (yt <= Q[:, 1])))
        cover.append(row)
    plain, weighted = np.mean(cover, axis=0)
    assert plain < 0.70, plain  # measured 0.62
    assert abs(weighted - 0.80) <= 0.03, weighted  # measured 0.81 (oracle weights: 0.81)


def test_design_distribution_and_weights_are_bounded() -> None:
    p = design_distribution(np.array([0.0, 1.0, 2.0, 3.0]))
    assert p.sum() == pytest.approx(1.0) and np.all(np.diff(p) > 0)
    assert np.allclose(design_distribution(np.zeros(5)), 0.2)
    rng = np.random.default_rng(0)
    w_cal, w_des = density_ratio(rng.random((30, 2)), rng.random((200, 2)) ** 3, np.full(200, 1 / 200))
    assert w_cal.mean() == pytest.approx(1.0, abs=0.5)
    assert np.all((0.2 <= w_des) & (w_des <= 5.0)) and w_des.mean() > w_cal.mean()


# ------------------------------------------------------------ the engine
SPACE = SearchSpace.from_dict({"a": {"type": "float", "low": 0, "high": 1},
                               "b": {"type": "categorical", "choices": ["x", "y", "z"]}})


def observations(n: int) -> list:
    configs = SPACE.from_unit(SPACE.sample(n, 3))
    return [(c, float(np.sin(6 * c["a"]) + {"x": 0, "y": 0.5, "z": 1}[c["b"]])) for c in configs]


def test_shift_setting_is_checked() -> None:
    assert EngineConfig().shift == "none"
    assert EngineConfig(shift="fcs", conformal="jab+").shift == "fcs"
    for bad in ({"shift": "bogus"}, {"shift": "fcs", "conformal": "cv+"}, {"shift": "fcs", "conformal": "raw"}):
        with pytest.raises(ConfigError) as e:
            EngineConfig(**bad)
        assert e.value.field == "shift"


def test_fcs_snapshot_round_trips_its_weights_and_selects_identically() -> None:
    cfg = EngineConfig(surrogate="qgp", n_candidates=200, shift="fcs")
    assert fit(observations(40), SPACE, cfg, seed=1).cal_weight is None  # the CV+ phase stays unweighted
    snap = fit(observations(60), SPACE, cfg, seed=1)
    assert snap.method == "split" and snap.bounds.weighted
    assert snap.cal_weight.shape == (snap.scores.shape[0],) and snap.cand_weight.shape == (snap.candidates.shape[0],)
    back = Snapshot.from_bytes(snap.to_bytes())
    for name in ("cal_weight", "cand_weight", "scores", "raw"):
        np.testing.assert_array_equal(getattr(back, name), getattr(snap, name))
    states = initial_states(cfg)
    x = select(snap, states, SPACE, cfg, count=3, asked=60)
    y = select(back, states, SPACE, cfg, count=3, asked=60)
    assert [s.params for s in x] == [s.params for s in y]
    for a, b in zip(x, y, strict=True):
        assert a.prediction["shift"] == "fcs" and np.array_equal(a.prediction["points"], b.prediction["points"])
        assert a.prediction["intervals"] == b.prediction["intervals"]
    # adapt reads the weighted point sets, also after a JSON round trip of the prediction
    pred = x[0].prediction
    wire = json.loads(json.dumps({**pred, "points": pred["points"].tolist()}))
    _, r1 = adapt(states, pred, 0.3)
    _, r2 = adapt(states, wire, 0.3)
    assert r1["beta"] == r2["beta"] and r1["covered"] == r2["covered"]
    # a snapshot written before the weights existed loads as unweighted
    old = Snapshot.from_bytes(fit(observations(60), SPACE, EngineConfig(n_candidates=200), seed=1).to_bytes())
    assert old.cal_weight is None and old.cand_weight is None and not old.bounds.weighted


def test_late_feedback_updates_with_the_issued_intervals_outcome() -> None:
    cfg = EngineConfig(adapter="aci", n_candidates=200)
    snap = fit(observations(60), SPACE, cfg, seed=1)
    states = initial_states(cfg)
    pred = select(snap, states, SPACE, cfg, asked=60)[0].prediction
    value = pred["mean"] + 0.01
    same, rec = adapt(states, pred, value)  # sequential: the plain ACI update
    assert [s.alpha for s in same] == [s.update(b).alpha for s, b in zip(states, rec["beta"], strict=True)]
    # other outcomes moved the states before this one arrived: the update is the issued interval's miss
    moved = [ACIState(s.target, s.alpha + d, s.gamma) for s, d in zip(states, (0.3, -0.2, 0.25, -0.15, 0.05),
                                                                        strict=True)]
    late, rec = adapt(moved, pred, value)
    for m, new, covered in zip(moved, late, rec["covered"], strict=True):
        assert new.alpha == pytest.approx(m.alpha + m.gamma * (m.target - (not covered)))


# ------------------------------------------------------------------ crowds
CROWD_SPACE = {"x0": {"type": "float", "low": 0, "high": 1}, "x1": {"type": "float", "low": 0, "high": 1}}
NOMINAL = np.array([0.9, 0.7, 0.5, 0.3, 0.1])


def crowd_records(seed: int, objective, k: int = 8, trials: int = 100) -> list[dict]:
    """The default engine with ``k`` trials in flight, lognormal durations: outcomes arrive late
    and out of order. Returns its calibration records of conformalized predictions."""
    return [r for r in crowd_run(seed, objective, k, trials).records if r["method"] != "raw"]


def crowd_run(seed: int, objective, k: int = 8, trials: int = 100) -> Optimizer:
    opt = Optimizer(CROWD_SPACE, seed=seed, n_candidates=500)
    rng = np.random.default_rng([seed, 1])
    running: list = []
    clock, asked = 0.0, 0
    while asked < trials or running:
        while len(running) < k and asked < trials:
            s = opt.ask()[0]
            asked += 1
            heapq.heappush(running, (clock + rng.lognormal(0.0, 1.0), asked, s.params, objective(s.params, rng)))
        clock, _, params, value = heapq.heappop(running)
        opt.tell(params, value)
    return opt


def gaussian(p: dict, rng: np.random.Generator) -> float:
    return float(np.sin(3 * p["x0"]) + 2 * (p["x1"] - 0.5) ** 2 + 0.2 * rng.normal())


def test_crowd_of_eight_covers_nominal_on_known_gaussian_noise() -> None:
    covered = np.vstack([np.array([r["covered"] for r in crowd_records(seed, gaussian)], dtype=float)
                         for seed in range(3)])
    cov = covered.mean(axis=0)
    assert covered.shape[0] >= 150
    # measured 0.92/0.72/0.50/0.32/0.12 (gap 0.017); one pair's binomial sd here is ~0.035
    assert np.all(np.abs(cov - NOMINAL) <= 0.1), cov
    assert np.mean(np.abs(cov - NOMINAL)) <= 0.05, cov


def noiseless(p: dict, rng: np.random.Generator) -> float:
    return float(np.sin(3 * p["x0"]) + 2 * (p["x1"] - 0.5) ** 2)


def test_shown_intervals_are_nested_and_are_what_aci_controls() -> None:
    # a noiseless objective crowds asks next to observations, where a pair's conformal ends cross
    # (an empty set) and pairs' alphas wander apart: the shown intervals must still nest, and the
    # coverage a study reports must be the coverage ACI controls (it is fed their breaches)
    opt = crowd_run(0, noiseless, trials=70)
    records = [r for r in opt.records if r["method"] != "raw"]
    assert len(records) > 20
    for r in records:
        lo, hi = np.array(r["lower"]), np.array(r["upper"])
        assert np.all(np.diff(lo) >= 0) and np.all(np.diff(hi) <= 0) and np.all(lo <= hi), r
    # replaying every record's shown breach through eq. 19 gives the alphas the study ended with:
    # records are in completion order, as the updates were
    opt_states = opt.states
    alphas = np.array([s.target for s in opt_states])
    gamma = opt_states[0].gamma
    for r in records:
        alphas = alphas + gamma * (np.array([s.target for s in opt_states]) - (1.0 - np.array(r["covered"], float)))
    np.testing.assert_allclose(alphas, [s.alpha for s in opt_states], atol=1e-12)
