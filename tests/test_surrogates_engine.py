"""Every registered surrogate through the engine: conformal coverage, snapshot round trip, seeds.

The surrogate-level tests (test_surrogates*.py) check each family's raw
quantiles; here each goes through ``fit`` -> ``Snapshot`` as the service uses
it, with split conformal, on data with known heteroskedastic noise, and the
calibrated intervals are scored on held-out points passed as the candidates.
"""

from __future__ import annotations

import numpy as np
import pytest

from calibo.engine import EngineConfig, SearchSpace, Snapshot, StudyState, fit, select
from calibo.engine.surrogates import SURROGATES
from calibo.engine.warp import Warp

SPACE = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(3)})
ALPHAS = np.array([0.1, 0.3, 0.5, 0.7, 0.9])  # the default grid's pairs: 90/70/50/30/10% intervals
NOMINAL = 1.0 - ALPHAS


def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    X = rng.random((n, 3))
    return X, 2 * X[:, 0] + np.sin(4 * X[:, 1]) + (0.1 + 0.5 * X[:, 2]) * rng.standard_normal(n)


def observations(X: np.ndarray, y: np.ndarray) -> list[tuple[dict, float]]:
    return [({f"x{i}": float(v) for i, v in enumerate(row)}, float(t)) for row, t in zip(X, y, strict=True)]


def config(name: str, **kw) -> EngineConfig:
    return EngineConfig(surrogate=name, conformal="split", n_candidates=300, **kw)


@pytest.mark.parametrize("name", sorted(SURROGATES))
def test_split_conformal_coverage_through_the_engine(name: str) -> None:
    # 120 observations -> 30 calibration scores: the split guarantee puts the expected coverage
    # in [nominal, nominal + 1/31] (a little more for the order statistics' rounding). Averaged
    # over 24 draws (the same draws for every surrogate) the sd is about 1.5 points: no pair may
    # under-cover by more than 3 points, nor over-cover by more than 6.
    covs = []
    for r in range(24):
        rng = np.random.default_rng(500 + r)
        X, y = draw(rng, 120)
        Xt, yt = draw(rng, 300)
        snap = fit(observations(X, y), SPACE, config(name), seed=r, candidates=Xt, device="cpu")
        assert snap.method == "split"
        Q = snap.bounds.at(ALPHAS)  # on the snapshot's warped scale (engine.warp): a monotone map
        yw = Warp.from_dict(snap.meta.warp).forward(yt)
        L = Q.shape[1]
        covs.append([np.mean((Q[:, j] <= yw) & (yw <= Q[:, L - 1 - j])) for j in range(ALPHAS.size)])
    cov = np.mean(covs, axis=0)
    assert np.all(cov >= NOMINAL - 0.03) and np.all(cov <= NOMINAL + 0.06), (name, cov.round(3))


@pytest.mark.parametrize("name", sorted(SURROGATES))
def test_snapshot_round_trip_and_seeded_fits(name: str) -> None:
    rng = np.random.default_rng(7)
    X, y = draw(rng, 70)
    obs = observations(X, y)
    cfg = config(name)
    snap = fit(obs, SPACE, cfg, seed=3, device="cpu")
    again = fit(obs, SPACE, cfg, seed=3, device="cpu")
    np.testing.assert_array_equal(snap.raw, again.raw)  # reproducible under the seed
    np.testing.assert_array_equal(snap.candidates, again.candidates)
    back = Snapshot.from_bytes(snap.to_bytes())
    for part in ("raw", "scores", "scale", "candidates"):
        a, b = getattr(snap, part), getattr(back, part)
        assert (a is None and b is None) or np.array_equal(a, b), part
    assert back.surrogate == name and back.meta.device == "cpu"
    state = StudyState.initial(cfg, 1)
    x = select(snap, state, SPACE, cfg, count=3, asked=70)
    z = select(back, state, SPACE, cfg, count=3, asked=70)
    assert [s.params for s in x] == [s.params for s in z]
    assert [s.prediction.public()["intervals"] for s in x] == [s.prediction.public()["intervals"] for s in z]
