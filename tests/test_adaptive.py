"""ACI and DtACI under an abrupt distribution shift, and their serialisation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibo.engine.adaptive import (
    ACIState,
    DtACIState,
    FixedState,
    new_state,
    pinball,
    state_from_dict,
    state_to_dict,
)
from calibo.engine.conformal import beta_of, interval_from_points

TARGET = 0.2  # 80% intervals


def run_stream(kind: str, seed: int, pre: int = 300, post: int = 2000, shift: float = 2.5):
    """A fixed split-conformal predictor (median 0, scores |z| of 100 N(0,1) draws);
    outcomes are N(0,1) for ``pre`` steps, then N(0, shift^2): an abrupt shift."""
    rng = np.random.default_rng(seed)
    D = np.sort(np.abs(rng.normal(size=100)))
    lower, upper = np.sort(-D), D  # point sets of a zero prediction
    state = new_state(kind, TARGET, gamma=0.02, seed=seed)
    breaches = []
    for t in range(pre + post):
        y = rng.normal() * (1.0 if t < pre else shift)
        beta = beta_of(lower, upper, y)
        breaches.append(state.alpha >= beta)
        if np.isfinite(interval_from_points(lower, upper, state.alpha)).all() and 0 < state.alpha < 1:
            lo, hi = interval_from_points(lower, upper, state.alpha)
            # the interval actually used agrees with the breach rule wherever it is finite
            assert breaches[-1] == (not lo <= y <= hi) or state.alpha * 101 < 1
        state = state.update(beta)
    return np.array(breaches, dtype=float), state


@pytest.mark.parametrize("kind", ["aci", "dtaci"])
def test_breach_rate_returns_to_target_after_shift(kind: str) -> None:
    rates = []
    for seed in range(5):
        b, _ = run_stream(kind, seed)
        rates.append(b[-1500:].mean())  # long run after the shift
    assert abs(np.mean(rates) - TARGET) < 0.02, rates


def test_without_adaptation_the_shift_breaks_coverage() -> None:
    rates = [run_stream("none", s)[0][-1500:].mean() for s in range(5)]
    assert np.mean(rates) > TARGET + 0.2, rates


def test_dtaci_recovers_faster_than_slow_aci() -> None:
    """DtACI's fast experts take over right after the shift (first 200 steps)."""
    dt = np.mean([run_stream("dtaci", s)[0][300:500].mean() for s in range(5)])
    slow = []
    for s in range(5):
        rng = np.random.default_rng(s)
        D = np.sort(np.abs(rng.normal(size=100)))
        st = ACIState(TARGET, TARGET, gamma=0.002)
        br = []
        for t in range(500):
            y = rng.normal() * (1.0 if t < 300 else 2.5)
            beta = beta_of(np.sort(-D), D, y)
            br.append(st.alpha >= beta)
            st = st.update(beta)
        slow.append(np.mean(br[300:]))
    assert abs(dt - TARGET) < abs(np.mean(slow) - TARGET), (dt, slow)


def test_aci_update_is_eq_19() -> None:
    s = ACIState(0.2, 0.2, gamma=0.05)
    assert s.update(beta=0.1).alpha == pytest.approx(0.2 + 0.05 * (0.2 - 1))  # breach
    assert s.update(beta=0.9).alpha == pytest.approx(0.2 + 0.05 * 0.2)  # covered


def test_dtaci_constants_follow_eq_24() -> None:
    s = DtACIState.new(0.2, window=50)
    K = len(s.gammas)
    want_eta = np.sqrt(3 / 50 * (np.log(50 * K) + 2) / ((0.8**2) * (0.2**2)))
    assert s.eta == pytest.approx(want_eta)
    assert s.sigma == pytest.approx(1 / 100)
    # weights move toward experts with lower pinball loss
    s2 = DtACIState(0.2, 0.2, [0.05, 0.5], [0.5, 0.5], [0.01, 0.01])
    s3 = s2.update(beta=0.06)
    assert s3.weights[0] > s3.weights[1]
    assert pinball(0.06, 0.05, 0.2) < pinball(0.06, 0.5, 0.2)


@pytest.mark.parametrize("kind", ["aci", "dtaci", "none"])
def test_state_round_trips_through_json(kind: str) -> None:
    _, state = run_stream(kind, 1, pre=20, post=30)
    restored = state_from_dict(json.loads(json.dumps(state_to_dict(state))))
    assert restored == state
    assert restored.update(0.3) == state.update(0.3)  # same next step, DtACI draw included


def test_unknown_kinds_raise() -> None:
    with pytest.raises(ValueError):
        new_state("nope", 0.2)
    with pytest.raises(ValueError):
        state_from_dict({"kind": "nope"})
    assert isinstance(new_state("none", 0.2), FixedState)


def test_aci_keeps_its_long_run_bound_on_the_shown_intervals_where_no_score_bounds_the_outcome() -> None:
    """ACI's guarantee (Gibbs & Candes 2021, Prop. 4.1), for any outcomes: the issued intervals'
    miss rate over T steps is within (max(a_1, 1 - a_1) + gamma) / (gamma T) of the target. It
    needs the interval at alpha < 1/(n+1) to be the whole line. Here half the outcomes land beyond
    every score (a model optimistic wherever it is asked, as in a search that picks where it errs
    low): clamped at the extreme point, the shown interval missed all of them whatever alpha did,
    so every pair missed half the time and alpha fell without end. Through ``adapt_outcome``, on
    intervals built as ``select`` shows them (each pair's own set, nested)."""
    from calibo.engine import EngineConfig
    from calibo.engine.adapt import adapt_outcome
    from calibo.engine.conformal import pair_alphas, pair_intervals
    from calibo.engine.prediction import Interval, OutcomePrediction
    from calibo.engine.state import initial_states

    config = EngineConfig()
    rng = np.random.default_rng(3)
    D = np.sort(np.abs(rng.normal(size=20)))
    pts = np.stack([np.tile(np.sort(-D), (5, 1)), np.tile(D, (5, 1))])  # (2, P, n): a zero prediction
    states = initial_states(config)
    nominal = pair_alphas(config.level_grid)
    T, gamma = 400, config.aci_gamma
    misses, lowest, unbounded = [], 1.0, 0
    for _ in range(T):
        alphas = np.array([s.alpha for s in states])
        lows, highs = pair_intervals(pts, alphas)
        ivs = [Interval(round(1 - float(a), 10), float(al), float(lo), float(hi))
               for a, al, lo, hi in zip(nominal, alphas, lows, highs, strict=True)]
        pred = OutcomePrediction("split", list(config.level_grid), [0.0] * len(config.level_grid), 0.0, ivs,
                                 points=pts)
        y = 100.0 if rng.uniform() < 0.5 else float(rng.normal())
        states, record = adapt_outcome(states, pred, y)
        misses.append([not c for c in record.covered])
        unbounded += record.to_dict()["upper"][0] is None  # an unbounded end is null as data
        lowest = min(lowest, *(s.alpha for s in states))
    rate = np.mean(misses, axis=0)
    bound = (max(nominal.max(), 1 - nominal.min()) + gamma) / (gamma * T)
    assert np.all(np.abs(rate - nominal) <= bound), (rate, nominal, bound)
    assert lowest > -gamma  # no wind-up: an unbounded interval covers, and alpha climbs back
    assert unbounded > 0
