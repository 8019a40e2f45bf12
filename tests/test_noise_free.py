"""The noise-free acquisition: improvement is scored on the objective's own spread, the calibrated
quantiles narrowed by the surrogate's signal fraction."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from calibo.engine import EngineConfig, SearchSpace, StudyState, fit, select
from calibo.engine.conformal import midpoint_levels
from calibo.engine.snapshot import Snapshot
from calibo.engine.state import initial_states
from calibo.engine.surrogates import make_surrogate

LEVELS = midpoint_levels(10)
SPACE = SearchSpace.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})


@pytest.mark.parametrize("family", ["qgp", "mlp-ensemble"])
def test_signal_fraction_is_small_amid_noisy_data_and_near_one_far_from_it(family: str) -> None:
    """Data with known noise (sd 0.3 about a smooth line) packed into [0, 0.3]: there the spread
    is mostly noise; far outside it the model's own uncertainty dominates."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 0.3, (60, 1))
    y = np.sin(3.0 * X[:, 0]) + rng.normal(0.0, 0.3, 60)
    model = make_surrogate(family, LEVELS, seed=0).fit(X, y)
    inside = model.predict_signal_fraction(np.linspace(0.05, 0.25, 9)[:, None])
    far = model.predict_signal_fraction(np.array([[3.0], [4.0]]))
    assert inside.max() < 0.6, inside
    assert far.min() > 0.8, far
    assert inside.min() >= 0.01 and far.max() <= 1.0


def test_families_without_a_noise_term_keep_their_whole_spread() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(40, 2))
    model = make_surrogate("qrf", LEVELS, seed=0).fit(X, X.sum(axis=1))
    assert np.array_equal(model.predict_signal_fraction(X), np.ones(40))


def _plateau_snapshot(signal: np.ndarray | None) -> Snapshot:
    """Two candidates against a best of 0: ``a`` predicted to tie the best with a wide spread the
    surrogate calls noise (signal 0.05); ``b`` predicted 0.5 above it with a narrower spread that
    is all the objective's own (signal 1)."""
    z = norm.ppf(LEVELS)
    raw = np.stack([0.0 + 1.0 * z, 0.5 + 0.6 * z])
    return Snapshot(n_obs=40, method="raw", levels=LEVELS, candidates=np.array([[0.2], [0.8]]), raw=raw,
                    best=0.0, observed=np.array([[0.1], [0.15], [0.25], [0.3]]), signal=signal)


@pytest.mark.parametrize("acquisition", ["logei", "ei"])  # pi gives any median tie 1/2: no spread changes that
def test_a_noisy_tie_with_the_best_loses_to_a_real_chance_of_improving(acquisition: str) -> None:
    cfg = EngineConfig(acquisition=acquisition, n_warmup=5)

    def chosen(signal):
        snap = _plateau_snapshot(signal)
        (s,) = select(snap, StudyState(0, initial_states(cfg)), SPACE, cfg, count=1, asked=40)
        return s.params["x"]

    assert chosen(None) == pytest.approx(0.2)  # the observation's spread: the tie looks like a coin flip
    assert chosen(np.array([0.05, 1.0])) == pytest.approx(0.8)  # the objective's: only b may improve


def test_the_prediction_reported_keeps_the_calibrated_spread() -> None:
    """Narrowing is for scoring only: what a suggestion reports (and adapt scores) is the
    calibrated observation quantiles."""
    cfg = EngineConfig(n_warmup=5)
    plain, = select(_plateau_snapshot(None), StudyState(0, initial_states(cfg)), SPACE, cfg, count=1, asked=40)
    narrowed, = select(_plateau_snapshot(np.array([0.5, 0.5])), StudyState(0, initial_states(cfg)), SPACE, cfg, count=1,
                       asked=40)
    assert plain.params == narrowed.params == {"x": pytest.approx(0.2)}
    q = narrowed.prediction.to_dict()["quantiles"]
    assert q == pytest.approx(plain.prediction.to_dict()["quantiles"])
    assert q[-1] - q[0] == pytest.approx(2 * norm.ppf(LEVELS[-1]), rel=1e-5)  # a's full spread, sd 1


def test_fit_stores_signal_fractions_that_survive_storage() -> None:
    rng = np.random.default_rng(1)
    obs = [({"x": float(x)}, float(np.round(np.sin(6 * x), 1))) for x in rng.uniform(size=30)]
    snap = fit(obs, SPACE, EngineConfig(n_candidates=200), seed=0)
    assert snap.signal is not None and snap.signal.shape == (snap.candidates.shape[0],)
    assert np.all((snap.signal >= 0.01) & (snap.signal <= 1.0))
    back = Snapshot.from_bytes(snap.to_bytes())
    assert np.array_equal(back.signal, snap.signal)
