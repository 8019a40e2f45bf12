"""Snapshots survive their bytes: a restored snapshot selects exactly what the original did."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from calibo.engine import (
    ACIState,
    EngineConfig,
    SearchSpace,
    Snapshot,
    StudyState,
    fit,
    select,
)
from calibo.engine.snapshot import FitKind, SnapshotMeta
from calibo.engine.state import initial_states
from calibo.engine.warp import Warp

SPACE = SearchSpace.from_dict({"a": {"type": "float", "low": 0, "high": 1},
                               "b": {"type": "categorical", "choices": ["x", "y", "z"]}})


def observations(n: int) -> list:
    configs = SPACE.from_unit(SPACE.sample(n, 3))
    return [(c, float(np.sin(6 * c["a"]) + {"x": 0, "y": 0.5, "z": 1}[c["b"]])) for c in configs]


def assert_same_predictions(x: list, y: list) -> None:
    """Suggestions' predictions equal, conformal point sets (arrays) included."""
    assert len(x) == len(y)
    for a, b in zip([s.prediction and s.prediction.to_dict() for s in x],
                    [s.prediction and s.prediction.to_dict() for s in y], strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.keys() == b.keys()
            for k in a:
                assert np.array_equal(a[k], b[k]) if k == "points" else a[k] == b[k], k


@pytest.mark.parametrize("n", [20, 40, 60])  # raw (a study that conformalizes from 32), CV+, split
def test_bytes_round_trip_selects_identically(n: int) -> None:
    cfg = EngineConfig(surrogate="qgp", n_candidates=200, conformalize_from=32)
    snap = fit(observations(n), SPACE, cfg, seed=1)
    back = Snapshot.from_bytes(snap.to_bytes())
    assert back.method == snap.method == {20: "raw", 40: "cv+", 60: "split"}[n]
    for name in ("levels", "candidates", "raw", "observed", "scores", "fold_raw", "fold_of"):
        a, b = getattr(snap, name), getattr(back, name)
        assert (a is None and b is None) or np.array_equal(a, b), name
    states = initial_states(cfg)
    x = select(snap, StudyState(0, states), SPACE, cfg, count=3, asked=n)
    y = select(back, StudyState(0, states), SPACE, cfg, count=3, asked=n)
    assert [s.params for s in x] == [s.params for s in y]
    assert_same_predictions(x, y)
    for name in ("n_obs", "best", "surrogate", "fit_seconds", "meta"):
        assert getattr(back, name) == getattr(snap, name), name
    assert back.raw.dtype == np.float64
    # any alpha, not only the nominal ones: the restored calibration is the same
    moved = [ACIState(s.target, min(0.99, s.alpha * f)) for s, f in zip(states, (0.5, 1.3, 2.0, 0.7, 1.1), strict=True)]
    np.testing.assert_array_equal(snap.bounds.at(np.array([m.alpha for m in moved])),
                                  back.bounds.at(np.array([m.alpha for m in moved])))
    x = select(snap, StudyState(5, moved), SPACE, cfg, count=2, asked=n + 1, pending=[x[0].params])
    y = select(back, StudyState(5, moved), SPACE, cfg, count=2, asked=n + 1, pending=[y[0].params])
    assert [s.params for s in x] == [s.params for s in y]
    assert_same_predictions(x, y)


@pytest.mark.parametrize("conformal", ["crossval", "jab+", "cv+", "split"])
def test_scaled_surrogate_snapshots_keep_their_spread(conformal: str) -> None:
    # a scaled surrogate's snapshot carries its spread per candidate (and per CV+ fold):
    # the round trip selects and calibrates identically at any alpha
    cfg = EngineConfig(surrogate="lw-knn", n_candidates=200, conformal=conformal, n_bootstraps=5)
    snap = fit(observations(60), SPACE, cfg, seed=2)
    assert snap.method == conformal and snap.scale is not None and np.all(snap.scale > 0)
    assert (snap.fold_scale is not None) == (conformal == "cv+")
    back = Snapshot.from_bytes(snap.to_bytes())
    for name in ("scale", "fold_scale", "scores", "raw"):
        a, b = getattr(snap, name), getattr(back, name)
        assert (a is None and b is None) or np.array_equal(a, b), name
    states = initial_states(cfg)
    alphas = np.array([0.05, 0.2, 0.4, 0.6, 0.85])
    np.testing.assert_array_equal(snap.bounds.at(alphas), back.bounds.at(alphas))
    x = select(snap, StudyState(0, states), SPACE, cfg, count=3, asked=60)
    y = select(back, StudyState(0, states), SPACE, cfg, count=3, asked=60)
    assert [s.params for s in x] == [s.params for s in y]
    assert_same_predictions(x, y)


@pytest.mark.parametrize("acquisition", ["ts", "obs", "ei", "ucb"])
def test_maximize_snapshot_round_trip(acquisition: str) -> None:
    cfg = EngineConfig(surrogate="qgp", n_candidates=200, acquisition=acquisition)
    obs = [(c, -v) for c, v in observations(40)]
    snap = fit(obs, SPACE, cfg, direction="maximize", seed=2)
    back = Snapshot.from_bytes(snap.to_bytes())
    assert back.best == snap.best and back.meta == snap.meta
    # minimise orientation, on the warped scale the snapshot carries (engine.warp)
    np.testing.assert_allclose(Warp.from_dict(snap.meta.warp).inverse(snap.best), -max(v for _, v in obs))
    states = initial_states(cfg)
    x = select(snap, StudyState(2, states), SPACE, cfg, count=2, direction="maximize", asked=40)
    y = select(back, StudyState(2, states), SPACE, cfg, count=2, direction="maximize", asked=40)
    assert [s.params for s in x] == [s.params for s in y]
    assert_same_predictions(x, y)


def test_hand_built_snapshot_stores_float32_quantiles() -> None:
    rng = np.random.default_rng(0)
    levels = (np.arange(4) + 0.5) / 4
    raw = np.sort(rng.normal(size=(6, 4)), axis=1)  # float64, not yet rounded
    snap = Snapshot(n_obs=10, method="raw", levels=levels, candidates=SPACE.sample(6, 0), raw=raw,
                    best=-1.25, observed=SPACE.sample(10, 1), meta=SnapshotMeta(rank_p=0.5, fit=FitKind("update", "x")))
    back = Snapshot.from_bytes(snap.to_bytes())
    np.testing.assert_array_equal(back.raw, raw.astype(np.float32).astype(np.float64))
    np.testing.assert_allclose(back.raw, raw, rtol=1e-6)
    np.testing.assert_array_equal(back.candidates, snap.candidates)  # unit rows keep float64
    np.testing.assert_array_equal(back.observed, snap.observed)
    assert back.scores is None and back.fold_raw is None and back.fold_of is None
    assert back.meta == SnapshotMeta(rank_p=0.5, fit=FitKind("update", "x")) and back.best == -1.25
    assert back.method == "raw"


def header_meta(data: bytes) -> dict:
    with np.load(io.BytesIO(data)) as z:
        return json.loads(bytes(z["header"]).decode())["meta"]


def test_meta_round_trips_and_reads_the_stored_form() -> None:
    """``Snapshot.meta`` is a ``SnapshotMeta``; its stored form is the dict the header always held:
    bytes written round-trip to an equal meta, and a header's meta dict in that form (keys only where
    a fit set them, in the order it set them) loads and is written back as the same dict."""
    cfg = EngineConfig(surrogate="qgp", n_candidates=60)
    snap = fit(observations(20), SPACE, cfg, seed=1, constraints=[[0.5 - c["a"]] for c, _ in observations(20)])
    data = snap.to_bytes()
    back = Snapshot.from_bytes(data)
    assert isinstance(back.meta, SnapshotMeta) and back.meta == snap.meta
    assert header_meta(back.to_bytes()) == header_meta(data) == snap.meta.to_dict()
    assert list(header_meta(data)) == ["device", "rank_p", "crowd", "fit", "tuned", "warp", "n_feasible"]
    old = {"device": "cpu", "rank_p": 0.01, "crowd": {"kernel": {"outputscale": 1.5, "lengthscale": [0.2, 0.3],
                                                                  "noise": 0.01}},
           "fit": {"kind": "full", "why": "first"}}
    richer = old | {"tuned": {"n_obs": 20, "method": "raw", "hyper": [], "warps": [None]},
                    "warp": {"kind": "yeo-johnson", "lam": 0.7, "loc": 0.1, "scale": 2.0}, "n_feasible": 0,
                    "n_failed": 3, "directions": ["minimize", "maximize"], "device_fallback": "CUDA failed"}
    for stored in (old, richer):
        raw = np.sort(np.random.default_rng(0).normal(size=(6, 4)), axis=1).astype(np.float32)
        loaded = Snapshot.from_bytes(npz(HEADER | {"meta": stored}, levels=(np.arange(4) + 0.5) / 4,
                                         candidates=SPACE.sample(6, 0), raw=raw, observed=SPACE.sample(3, 1)))
        assert loaded.meta == SnapshotMeta.from_dict(stored)
        assert loaded.meta.to_dict() == stored and list(loaded.meta.to_dict()) == list(stored)
        assert header_meta(loaded.to_bytes()) == stored
    meta = SnapshotMeta.from_dict(old)
    assert (meta.rank_p, meta.fit, meta.crowd["kernel"]["noise"]) == (0.01, FitKind("full", "first"), 0.01)
    assert meta.tuned is meta.warp is meta.n_feasible is meta.directions is meta.device_fallback is None
    assert meta.n_failed == 0
    rich = SnapshotMeta.from_dict(richer)
    assert (rich.n_feasible, rich.n_failed, rich.directions) == (0, 3, ["minimize", "maximize"])
    # a snapshot stored before any of these keys: the defaults the readers took
    assert SnapshotMeta.from_dict({}) == SnapshotMeta() and SnapshotMeta().fit.kind == "full"


def test_a_snapshot_stored_with_covariate_shift_weights_loads_unweighted() -> None:
    """The removed ``shift="fcs"`` setting stored ``cal_weight`` and ``cand_weight`` arrays with a
    split snapshot: such bytes still load, the weights ignored, and select exactly as the same
    snapshot stored without them."""
    rng = np.random.default_rng(2)
    levels = (np.arange(4) + 0.5) / 4
    raw = np.sort(rng.normal(size=(6, 4)), axis=1).astype(np.float32)
    arrays = {"levels": levels, "candidates": SPACE.sample(6, 0), "raw": raw, "observed": SPACE.sample(40, 1),
              "scores": rng.normal(size=(10, 2))}
    header = {"format": 1, "n_obs": 40, "method": "split", "best": -1.0}
    plain = Snapshot.from_bytes(npz(header, **arrays))
    old = Snapshot.from_bytes(npz(header, **arrays, cal_weight=rng.uniform(0.2, 5.0, 10),
                                  cand_weight=rng.uniform(0.2, 5.0, 6)))
    for alphas in ([0.1, 0.3], [0.6, 0.05]):
        np.testing.assert_array_equal(old.bounds.at(np.array(alphas)), plain.bounds.at(np.array(alphas)))
    np.testing.assert_array_equal(old.bounds.packed(3), plain.bounds.packed(3))
    assert old.bounds.packed(3).shape == (2, 2, 10)
    assert "cal_weight" not in np.load(io.BytesIO(old.to_bytes())).files


def test_fit_is_deterministic_and_candidates_unseen() -> None:
    cfg = EngineConfig(surrogate="qgp", n_candidates=300)
    obs = observations(30)
    a, b = fit(obs, SPACE, cfg, seed=4), fit(obs, SPACE, cfg, seed=4)
    assert np.array_equal(a.raw, b.raw) and np.array_equal(a.candidates, b.candidates)
    seen = set(SPACE.keys(SPACE.to_unit([p for p, _ in obs])))
    assert not seen & set(SPACE.keys(a.candidates))
    assert len(set(SPACE.keys(a.candidates))) == a.candidates.shape[0]


def test_corrupt_or_unknown_format_raises() -> None:
    snap = fit(observations(20), SPACE, EngineConfig(surrogate="qgp", n_candidates=50), seed=0)
    with pytest.raises(ValueError):
        Snapshot.from_bytes(b"not a snapshot")
    buf = io.BytesIO()
    header = json.dumps({"format": 9}).encode()
    np.savez(buf, header=np.frombuffer(header, dtype=np.uint8), raw=snap.raw)
    with pytest.raises(ValueError):
        Snapshot.from_bytes(buf.getvalue())


def npz(header: object | None, **arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    if header is not None:
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(buf, **arrays)
    return buf.getvalue()


def good_bytes() -> bytes:
    return fit(observations(20), SPACE, EngineConfig(surrogate="qgp", n_candidates=50), seed=0).to_bytes()


def npy_bytes() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.zeros(3))
    return buf.getvalue()


HEADER = {"format": 1, "n_obs": 3, "method": "raw", "best": 0.0}
@pytest.mark.parametrize("make", [
    pytest.param(lambda: b"", id="empty"),
    pytest.param(lambda: b"PK\x03\x04 junk", id="zip-magic-junk"),
    pytest.param(lambda: npz(None, raw=np.zeros((2, 2))), id="no-header"),
    pytest.param(lambda: npz({"format": 0}), id="old-format"),
    pytest.param(lambda: npz(HEADER | {"format": "1"}), id="format-as-string"),
    pytest.param(lambda: good_bytes()[:-40], id="truncated-end"),
    pytest.param(lambda: good_bytes()[: len(good_bytes()) // 2], id="truncated-half"),
    pytest.param(npy_bytes, id="npy-not-npz"),
    pytest.param(lambda: npz({"format": 1}), id="header-missing-keys"),
    pytest.param(lambda: npz([1, 2]), id="header-not-an-object"),
    pytest.param(lambda: npz(HEADER), id="arrays-missing"),
])
def test_every_corruption_is_a_value_error(make) -> None:
    with pytest.raises(ValueError):
        Snapshot.from_bytes(make())
