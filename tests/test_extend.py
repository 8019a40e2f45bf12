"""engine.extend: a snapshot brought up to date at its own candidates is the snapshot a fit with
the same hyperparameters, split and candidates makes, and the schedule says when a fit draws again."""

from __future__ import annotations

import numpy as np
import pytest

from calibo.engine import Optimizer, SearchSpace
from calibo.engine.config import EngineConfig
from calibo.engine.conformal import fold_scores, model_scores, spread_ratio
from calibo.engine.extend import EXTENDS
from calibo.engine.fit import fit
from calibo.engine.retune import Tuned
from calibo.engine.snapshot import Snapshot
from calibo.engine.surrogates import make_surrogate
from calibo.engine.warp import fit_warp

pytestmark = pytest.mark.unit

SPACE = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(3)})


def _f(x: np.ndarray) -> float:
    return float(np.sum((x - 0.3) ** 2) + 0.3 * np.sin(7 * x[0]))


def _observations(n: int, seed: int = 0) -> list[tuple[dict, float]]:
    rng = np.random.default_rng(seed)
    return [({f"x{i}": float(x[i]) for i in range(3)}, _f(x) + 0.01 * rng.standard_normal())
            for x in rng.random((n, 3))]


def _worse(obs: list[tuple[dict, float]], k: int, seed: int = 1) -> list[tuple[dict, float]]:
    """``k`` more observations, none better than the best of ``obs``, each in the value range."""
    rng = np.random.default_rng(seed)
    values = np.array([v for _, v in obs])
    lo, hi = values.min(), values.max()
    more = [({f"x{i}": float(x[i]) for i in range(3)}, float(lo + (hi - lo) * (0.3 + 0.4 * rng.random())))
            for x in rng.random((k, 3))]
    return obs + more


def _reference(snap: Snapshot, prev: Snapshot, obs: list[tuple[dict, float]], config: EngineConfig) -> dict:
    """What a fit with ``prev``'s hyperparameters, split and candidates makes of ``obs``, by the
    surrogate's own code at every candidate (no extend), observations in the snapshot's order."""
    h = Tuned.of(prev.meta).hyper[0]
    U = SPACE.to_unit([p for p, _ in obs])
    keys = {k: i for i, k in enumerate(SearchSpace.keys(U))}
    order = [keys[k] for k in SearchSpace.keys(snap.observed)]
    X = SPACE.features(U[order])
    v = np.array([obs[i][1] for i in order])
    y = fit_warp(config.warp, v).forward(v)

    def gp():
        return make_surrogate("qgp", config.level_grid, 0, hyper=h, **config.surrogate_options)

    Xc = SPACE.features(snap.candidates)
    shown = gp().fit(X, y)
    raw, signal = shown.predict_quantiles_and_signal(Xc)
    out = {"raw": raw, "signal": signal}
    if snap.method == "split":
        train = np.asarray(prev.meta.carry["train"])
        cal = np.setdiff1d(np.arange(len(obs)), train)
        scored = gp().fit(X[train], y[train])
        out["scores"] = model_scores(scored, X[cal], y[cal])
        out["scale"] = spread_ratio(raw, scored.predict_quantiles(Xc))
    if shown.scaled:  # normalized scores: the shown model's spread
        out["scale"] = shown.predict_scale(Xc)
    if snap.method == "cv+":  # the folds as the snapshot keeps them, each fold model fitted directly
        folds = [gp().fit(X[snap.fold_of != f], y[snap.fold_of != f]) for f in range(snap.fold_raw.shape[0])]
        out["scores"] = fold_scores(folds, snap.fold_of, X, y)[0]
        out["fold_raw"] = np.stack([m.predict_quantiles(Xc) for m in folds])
        out["fold_scale"] = np.stack([m.predict_scale(Xc) for m in folds]) if shown.scaled else None
    return out


@pytest.mark.parametrize("conformal,n,scores", [("adaptive", 60, "cqr"), ("raw", 40, "cqr"), ("cv+", 40, "cqr"),
                                                ("adaptive", 60, "normalized"), ("cv+", 40, "normalized")])
def test_an_extend_is_the_fit_with_the_same_hyperparameters_split_and_candidates(conformal: str, n: int,
                                                                                 scores: str) -> None:
    config = EngineConfig(conformal=conformal, surrogate_options={"scores": scores})
    obs = _observations(n)
    prev = fit(obs, SPACE, config, seed=3)
    assert prev.meta.carry is not None and prev.gp_sd is not None
    more = _worse(obs, 2)
    snap = fit(more, SPACE, config, seed=3, tuned=Tuned.of(prev.meta), previous=prev)
    assert snap.meta.fit.kind == "extend"
    assert snap.method == prev.method == {"adaptive": "split"}.get(conformal, conformal)
    np.testing.assert_array_equal(snap.candidates, prev.candidates)
    ref = _reference(snap, prev, more, config)
    spread = float(np.ptp(ref["raw"]))
    np.testing.assert_allclose(snap.raw, ref["raw"], rtol=0, atol=1e-5 * spread)  # stored as float32
    np.testing.assert_allclose(snap.signal, ref["signal"], rtol=1e-5, atol=1e-6)
    if scores == "normalized":
        np.testing.assert_allclose(snap.scale, ref["scale"], rtol=1e-5)
    if snap.method == "split":
        assert snap.scores.shape[0] == prev.scores.shape[0] + 2  # the new observations are calibration rows
        np.testing.assert_allclose(snap.scores, ref["scores"], rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(snap.scale, ref["scale"], rtol=1e-5)
    elif snap.method == "cv+":
        np.testing.assert_array_equal(snap.fold_of[:n], prev.fold_of)  # the folds are kept
        assert np.bincount(snap.fold_of).max() - np.bincount(snap.fold_of).min() <= 1  # and stay balanced
        np.testing.assert_allclose(snap.scores, ref["scores"], rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(snap.fold_raw, ref["fold_raw"], rtol=0, atol=1e-5 * spread)
        assert snap.meta.rank_p is not None
        if scores == "normalized":
            np.testing.assert_allclose(snap.fold_scale, ref["fold_scale"], rtol=1e-5)
    else:
        assert snap.scores is None and snap.scale is None


def test_extends_of_extends_stay_the_fit_then_a_fit_draws_again() -> None:
    config = EngineConfig()
    obs = _observations(80)  # 80 / 16 >= EXTENDS: the cap, not the growth, calls the fit
    prev = first = fit(obs, SPACE, config, seed=5)
    tuned = Tuned.of(first.meta)
    for k in range(1, EXTENDS + 2):
        more = _worse(obs, k, seed=11)
        snap = fit(more, SPACE, config, seed=5, tuned=tuned, previous=prev)
        if k <= EXTENDS:
            assert snap.meta.fit.kind == "extend", snap.meta.fit
            ref = _reference(snap, first, more, config)
            np.testing.assert_allclose(snap.raw, ref["raw"], rtol=0, atol=1e-5 * float(np.ptp(ref["raw"])))
            np.testing.assert_allclose(snap.scores, ref["scores"], rtol=1e-7, atol=1e-9)
            # what the next extend starts from survives storage
            prev = Snapshot.from_bytes(snap.to_bytes())
            np.testing.assert_array_equal(prev.gp_sd, snap.gp_sd)
            assert prev.meta.carry == snap.meta.carry
        else:  # EXTENDS observations since the candidates were drawn: a fit draws them again
            assert snap.meta.fit.kind == "update"
            assert not np.array_equal(snap.candidates[:100], first.candidates[:100])


@pytest.mark.parametrize("n,extends", [(12, 0), (20, 1), (40, 2), (100, EXTENDS)])
def test_a_small_study_draws_candidates_again_once_its_data_grew_by_a_sixteenth(n: int, extends: int) -> None:
    config = EngineConfig(conformal="raw")
    obs = _observations(n)
    first = fit(obs, SPACE, config, seed=6)
    tuned, prev, kinds = Tuned.of(first.meta), first, []
    for k in range(1, EXTENDS + 2):
        snap = fit(_worse(obs, k, seed=9), SPACE, config, seed=6, tuned=tuned, previous=prev)
        kinds.append(snap.meta.fit.kind)
        if snap.meta.fit.kind != "extend":
            break
        prev = snap
    assert kinds == ["extend"] * extends + [kinds[-1]] and kinds[-1] != "extend"


def test_a_new_best_or_anything_an_extend_cannot_keep_makes_a_fit() -> None:
    config = EngineConfig()
    obs = _observations(60)
    prev = fit(obs, SPACE, config, seed=2)
    tuned = Tuned.of(prev.meta)
    best = min(v for _, v in obs)

    def kind(more, **kw) -> str:
        return fit(more, SPACE, kw.pop("config", config), seed=2, tuned=tuned, previous=prev, **kw).meta.fit.kind

    assert kind(_worse(obs, 1)) == "extend"  # 60 observations: up to 3 extends
    assert kind(obs + [({"x0": 0.31, "x1": 0.29, "x2": 0.3}, best - 1e-3)]) != "extend"  # a new best
    assert kind(_worse(obs, 1)[1:]) != "extend"  # an observation the snapshot saw is gone
    assert kind(_worse(obs, 1), pending=[{"x0": 0.123, "x1": 0.5, "x2": 0.5}]) != "extend"  # not a candidate
    assert kind(_worse(obs, 1), constraints=[[0.0]] * 61) != "extend"
    assert kind(_worse(obs, 1), failed=[{"x0": 0.9, "x1": 0.9, "x2": 0.9}]) != "extend"
    # the schedule moves from CV+ to split at 50: no extend across it
    small = fit(obs[:49], SPACE, config, seed=2)
    assert small.method == "cv+" and small.meta.carry is not None
    assert fit(_worse(obs[:49], 1), SPACE, config, seed=2, tuned=Tuned.of(small.meta),
               previous=small).meta.fit.kind != "extend"
    assert fit(_worse(obs[:45], 1), SPACE, config, seed=2, tuned=Tuned.of(small.meta),
               previous=small).meta.fit.kind != "extend"  # observations the snapshot saw are gone
    # JaB+ and CrossVal-CP keep no fold models an extend could condition
    for method in ("jab+", "crossval"):
        other = EngineConfig(conformal=method)
        assert fit(obs, SPACE, other, seed=2).meta.carry is None


def test_the_optimizer_extends_and_its_state_dict_keeps_the_next_ask() -> None:
    space = {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(3)}
    opt = Optimizer(space, seed=4)
    kinds = []
    for _ in range(75):
        s = opt.ask()[0]
        opt.tell(s.params, _f(np.array([s.params[f"x{i}"] for i in range(3)])))
        if opt.snapshot is not None:
            kinds.append(opt.snapshot.meta.fit.kind)
    assert "extend" in kinds
    # a saved optimizer whose newest snapshot may be extended asks what the original asks, twice over
    other = Optimizer.from_state_dict(opt.state_dict())
    for _ in range(2):
        a, b = opt.ask()[0], other.ask()[0]
        assert a.params == b.params
        value = _f(np.array([a.params[f"x{i}"] for i in range(3)]))
        opt.tell(a.params, value)
        other.tell(b.params, value)
