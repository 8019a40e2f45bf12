"""Full refits and updates (``engine.retune``): an update is the full refit with the same
hyperparameters, its calibration is the conformal rule on the model it shows, and the schedule
refits fully where the data grew or moved."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from calibo.engine import EngineConfig, Optimizer, SearchSpace, fit
from calibo.engine.conformal import schedule
from calibo.engine.conformal.fit import scores
from calibo.engine.retune import RETUNE_GROWTH, Tuned, plan
from calibo.engine.study import FitResult
from calibo.engine.surrogates import qgp
from calibo.engine.warp import Warp

SPACE = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(3)})
# a tolerance for numbers computed through BLAS: kernels differ between machines
TOL = dict(rtol=1e-5, atol=1e-6)


def observations(n: int, seed: int = 0, tail: float = 0.0) -> list[tuple[dict, float]]:
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    y = 2 * X[:, 0] + np.sin(4 * X[:, 1]) + 0.1 * rng.standard_normal(n) + tail * X[:, 2] ** 8
    return [({f"x{i}": float(v) for i, v in enumerate(row)}, float(t)) for row, t in zip(X, y, strict=True)]


def config(**kw) -> EngineConfig:
    return EngineConfig(n_candidates=200, **kw)


def fixed_kernel(hyper: dict) -> ConstantKernel:
    """``qgp``'s kernel at given hyperparameters, with nothing left to tune."""
    return ConstantKernel(hyper["outputscale"], "fixed") * Matern(
        length_scale=np.asarray(hyper["lengthscale"]), length_scale_bounds="fixed", nu=2.5,
    ) + WhiteKernel(hyper["noise"], "fixed")


@pytest.mark.parametrize("n", [30, 70])  # CV+ and split
def test_an_update_equals_the_full_refit_with_the_same_hyperparameters(n: int, monkeypatch) -> None:
    obs = observations(n + 1)
    cfg = config()
    tuned = Tuned.of(fit(obs[:n], SPACE, cfg, seed=3).meta)
    update = fit(obs, SPACE, cfg, seed=3, tuned=tuned)
    assert update.meta.fit.kind == "update"
    assert update.meta.tuned == tuned.to_dict()  # the next fit keeps them too

    # the full refit whose tuning lands on those hyperparameters: its initial kernel has them, fixed
    monkeypatch.setattr(qgp, "_sklearn_kernel", lambda d, hyper=None: fixed_kernel(hyper or tuned.hyper[0]))
    full = fit(obs, SPACE, cfg, seed=3)
    assert full.meta.fit.kind == "full"
    assert update.method == full.method == ("cv+" if n < 50 else "split")
    np.testing.assert_array_equal(update.candidates, full.candidates)
    for name in ("raw", "scores", "fold_raw", "scale", "signal"):
        a, b = getattr(update, name), getattr(full, name)
        assert (a is None) == (b is None), name
        if a is not None:
            np.testing.assert_allclose(a, b, **TOL, err_msg=name)
    assert update.best == pytest.approx(full.best)


def test_an_updated_cv_plus_fit_is_calibrated_by_the_rule_on_the_model_it_shows() -> None:
    # independent of the engine's GP: scikit-learn's own, at the kept hyperparameters, on the warped
    # values, one per fold; each observation's scores come from the fold model that never saw it
    obs = observations(31, seed=1)
    cfg = config()
    tuned = Tuned.of(fit(obs[:30], SPACE, cfg, seed=5).meta)
    snap = fit(obs, SPACE, cfg, seed=5, tuned=tuned)
    assert snap.meta.fit.kind == "update" and snap.method == "cv+"
    X = SPACE.features(SPACE.to_unit([p for p, _ in obs]))
    y = Warp.from_dict(snap.meta.warp).forward(np.array([v for _, v in obs]))
    z = qgp.norm.ppf(snap.levels)
    Xc = SPACE.features(snap.candidates)

    def quantiles(rows: np.ndarray, at: np.ndarray) -> np.ndarray:
        mu, sd = y[rows].mean(), y[rows].std()
        gp = GaussianProcessRegressor(fixed_kernel(tuned.hyper[0]), optimizer=None).fit(X[rows], (y[rows] - mu) / sd)
        m, s = gp.predict(at, return_std=True)
        return np.sort(m[:, None] + s[:, None] * z[None, :], axis=1) * sd + mu

    everything = np.arange(len(obs))
    np.testing.assert_allclose(snap.raw, quantiles(everything, Xc), rtol=1e-4, atol=1e-4)  # float32 stored
    for f in range(snap.fold_raw.shape[0]):
        held = np.flatnonzero(snap.fold_of == f)
        rows = np.setdiff1d(everything, held)
        np.testing.assert_allclose(snap.scores[held], scores(quantiles(rows, X[held]), y[held]), **TOL)
        np.testing.assert_allclose(snap.fold_raw[f], quantiles(rows, Xc), rtol=1e-4, atol=1e-4)


def test_the_schedule_refits_fully_as_the_data_grows_and_at_each_change_of_method() -> None:
    obs = observations(80, seed=2)
    cfg = config(split_from=40)
    snap, full = None, []
    for n in range(5, 81):
        snap = fit(obs[:n], SPACE, cfg, seed=1, tuned=Tuned.of(snap.meta) if snap else None)
        if snap.meta.fit.kind == "full":
            full.append(n)
            assert snap.meta.tuned["n_obs"] == n
    assert full[0] == 5 and 40 in full  # the first fit, the switch to split
    for a, b in zip(full, full[1:], strict=False):  # never more than a quarter more data between full refits
        assert b <= int(np.ceil(a * (1 + RETUNE_GROWTH)))
    assert len(full) < 76 / 4  # and mostly updates


def test_growth_alone_calls_for_the_full_refits_the_docs_list() -> None:
    # docs/concepts/surrogates.md: 14 full refits in 120 sequential trials with the default settings
    cfg = EngineConfig()
    tuned, full = None, []
    for n in range(cfg.warmup_least, 121):
        method = schedule(n, cfg.conformalize_from, cfg.split_from, cfg.conformal)
        kept, _ = plan(tuned, cfg.surrogate, cfg.surrogate_options, n, method, 1, 3)
        if kept is None:
            full.append(n)
            tuned = Tuned(n, method, ({"outputscale": 1.0, "noise": 0.01, "lengthscale": [0.5] * 3},), (None,))
    assert full == [5, 7, 9, 12, 15, 19, 24, 30, 38, 48, 50, 63, 79, 99]


def test_growth_zero_tunes_at_every_fit() -> None:
    obs = observations(40)
    cfg = config(surrogate_options={"retune_growth": 0.0})
    first = fit(obs[:39], SPACE, cfg, seed=1)
    again = fit(obs, SPACE, cfg, seed=1, tuned=Tuned.of(first.meta))
    assert again.meta.fit.kind == "full"
    assert "grew" in again.meta.fit.why


def test_a_warp_that_moved_refits_fully() -> None:
    # a heavy tail appears: the warp's exponent moves, the kept hyperparameters were tuned on another shape
    calm, wild = observations(30, seed=4), observations(31, seed=4, tail=400.0)
    cfg = config()
    first = fit(calm, SPACE, cfg, seed=1)
    nxt = fit(wild, SPACE, cfg, seed=1, tuned=Tuned.of(first.meta))
    assert abs(first.meta.warp["lam"] - nxt.meta.warp["lam"]) > 0.5
    assert nxt.meta.fit.kind == "full"
    assert "warp" in nxt.meta.fit.why


def test_surrogates_without_hyperparameters_to_keep_refit_fully() -> None:
    obs = observations(20)
    cfg = config(surrogate="qrf")
    first = fit(obs[:19], SPACE, cfg, seed=1)
    assert first.meta.tuned is None
    assert fit(obs, SPACE, cfg, seed=1, tuned=Tuned.of(first.meta)).meta.fit.kind == "full"


@pytest.mark.parametrize("bad", [None, {}, {"hyper": "x"}, {"n_obs": 3, "method": "cv+", "hyper": [{}], "warps": []}])
def test_an_unreadable_stored_tuning_is_a_full_refit(bad) -> None:
    assert Tuned.from_dict(bad) is None
    assert fit(observations(12), SPACE, config(), seed=1, tuned=Tuned.from_dict(bad)).meta.fit.kind == "full"


def test_the_optimizer_updates_between_full_refits() -> None:
    opt = Optimizer(SPACE, config=config(), seed=0)
    kinds = []
    for _ in range(40):
        p = opt.ask()[0].params
        opt.tell(p, 2 * p["x0"] + np.sin(4 * p["x1"]))
        if opt.snapshot is not None:
            kinds.append(opt.snapshot.meta.fit.kind)
    # between full refits the hyperparameters are kept: by updates, or by extends (engine.extend)
    assert kinds.count("update") + kinds.count("extend") > kinds.count("full") > 0


def test_a_stored_fit_hands_its_tuning_on() -> None:
    # the service stores a fit's tuning beside its snapshot, as JSON (``snapshots.tuned``), and its
    # next fit job reads that back, not the snapshot's arrays
    snap = fit(observations(12), SPACE, config(), seed=1)
    stored = json.loads(json.dumps(FitResult.of(snap).to_dict()["tuned"]))
    assert Tuned.from_dict(stored) == Tuned.of(snap.meta) is not None
    assert FitResult.of(snap).kind == "full"
