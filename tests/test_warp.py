"""Output warping (engine.warp): an exact, monotone bijection, and what it keeps through the engine."""

from __future__ import annotations

import numpy as np
import pytest

from calibo.engine import EngineConfig, SearchSpace, StudyState, adapt, fit, select
from calibo.engine.state import initial_states
from calibo.engine.warp import LAMBDA_RANGE, Warp, fit_warp

KINDS = ["yeo-johnson", "yeo-johnson-tail"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0, 1.7, 2.0])
def test_yeo_johnson_is_a_monotone_bijection_of_the_line(lam: float, kind: str) -> None:
    w = Warp(kind, lam, 0.5, 2.0)
    y = np.sort(np.concatenate([-np.logspace(3, -6, 40), [0.0, 0.5], np.logspace(-6, 3, 40)]))
    z = w.forward(y)
    assert np.all(np.isfinite(z)) and np.all(np.diff(z) > 0)
    np.testing.assert_allclose(w.inverse(z), y, rtol=1e-9, atol=1e-9)
    # any value of the line maps back to a finite one (what a predicted quantile may be), far out
    # saturating rather than overflowing to infinity, which JSON cannot carry
    back = w.inverse(np.array([-1e6, -800.0, -30.0, 0.0, 30.0, 800.0, 1e6]))
    assert np.all(np.isfinite(back)) and np.all(np.diff(back) >= 0)


@pytest.mark.parametrize("kind", KINDS)
def test_fitted_exponent_compresses_the_heavy_tail(kind: str) -> None:
    rng = np.random.default_rng(0)
    right = fit_warp(kind, rng.lognormal(0.0, 1.5, 60))  # losses with a few very bad ones
    left = fit_warp(kind, -rng.lognormal(0.0, 1.5, 60))
    normal = fit_warp(kind, rng.normal(size=400))
    assert right.lam < 0.5 and left.lam > 1.5
    assert abs(normal.lam - 1.0) < 0.25  # nearly the identity on Gaussian data
    for w in (right, left, normal):
        assert LAMBDA_RANGE[0] <= w.lam <= LAMBDA_RANGE[1]


def test_the_tail_warp_compresses_the_bad_tail_without_stretching_the_good_side() -> None:
    """With a long tail of bad values, the two-sided transform stretches the values below the
    median too (the incumbent lands far below everything the surrogate knows little about); the
    one-sided one keeps their scale and compresses only the tail. Mirrored for a long good tail."""
    rng = np.random.default_rng(1)
    y = np.r_[rng.normal(0.65, 0.02, 45), rng.uniform(0.9, 1.3, 15)]  # a tree's MSE: a few stumps
    both, tail = fit_warp("yeo-johnson", y), fit_warp("yeo-johnson-tail", y)
    assert both.lam < 1 and tail.lam < 1
    x = (y - tail.loc) / tail.scale
    good, bad = x < 0, x > 0
    np.testing.assert_allclose(tail.forward(y)[good], x[good])  # the good side keeps its scale
    assert np.all(tail.forward(y)[bad] < x[bad])  # the bad tail is compressed
    # the two-sided warp puts the best further below the median than the data does; this one doesn't
    xb = (y.min() - both.loc) / both.scale
    assert both.forward(y.min()) < 1.2 * xb
    assert tail.forward(y.min()) == pytest.approx((y.min() - tail.loc) / tail.scale)
    # a long tail of *good* values (a maximised accuracy told as its negative): only that side moves
    m = fit_warp("yeo-johnson-tail", -y)
    xm = (-y - m.loc) / m.scale
    assert m.lam > 1
    np.testing.assert_allclose(m.forward(-y)[xm > 0], xm[xm > 0])
    assert np.all(m.forward(-y)[xm < 0] > xm[xm < 0])


def test_plateaus_and_tiny_samples() -> None:
    ties = np.r_[np.full(30, 0.1), [0.05, 0.2, 0.3, 0.12]]  # more than half tie: MAD is 0
    w = fit_warp("yeo-johnson", ties)
    assert w.scale > 0 and np.all(np.isfinite(w.forward(ties)))
    assert fit_warp("yeo-johnson", np.array([1.0, 2.0, 3.0])).identity  # too few to fit a shape
    assert fit_warp("yeo-johnson", np.full(10, 4.0)).identity
    assert fit_warp("none", ties).identity
    with pytest.raises(ValueError):
        fit_warp("box-cox", ties)


def heavy(p: dict) -> float:
    """A loss whose bad configurations are orders of magnitude worse than its good ones."""
    return float(np.exp(6.0 * (p["x"] - 0.3) ** 2 + 4.0 * (p["y"] - 0.6) ** 2))


def test_predictions_come_back_in_user_units_and_adapt_reads_them() -> None:
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1},
                                   "y": {"type": "float", "low": 0, "high": 1}})
    obs = [(p, heavy(p)) for p in space.from_unit(space.sample(60, 3))]
    for direction, sign in (("minimize", 1.0), ("maximize", -1.0)):
        cfg = EngineConfig(n_candidates=300, conformal="split")
        data = [(p, sign * v) for p, v in obs]
        snap = fit(data, space, cfg, direction, seed=1)
        assert snap.meta.warp["lam"] < 0.6  # the heavy tail is compressed
        state = StudyState.initial(cfg, 1)
        (s,) = select(snap, state, space, cfg, direction=direction, asked=60)
        pred = s.prediction.outcomes[0]
        q = np.asarray(pred.quantiles)
        assert np.all(np.diff(q) >= 0)
        value = sign * heavy(s.params)
        # the intervals are in the user's units: the same ones the record checks coverage with
        new, record = adapt(state, s.prediction, value)
        rec = record.outcomes[0]
        for iv, covered, beta, old in zip(pred.intervals, rec.covered, rec.beta, state.states, strict=True):
            assert covered == (iv.lower <= value <= iv.upper)
            # beta (read on the warped scale) agrees with the interval shown (in user units)
            assert covered == (beta >= iv.alpha - 1e-9)
            assert new.states[0].steps == old.steps + 1


@pytest.mark.parametrize("kind", KINDS)
def test_conformal_coverage_holds_on_a_heavy_tailed_objective(kind: str) -> None:
    """Split conformal on the warped scale covers held-out outcomes in the user's units (the GP's
    refit on every observation over-covers a little, by design; see conformal.conformalize)."""
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1},
                                   "y": {"type": "float", "low": 0, "high": 1}})
    cfg = EngineConfig(n_candidates=200, conformal="split", warp=kind)
    covs = []
    for r in range(12):
        rng = np.random.default_rng(100 + r)

        def noisy(p: dict, rng: np.random.Generator = rng) -> float:
            return heavy(p) * float(np.exp(0.3 * rng.standard_normal()))

        obs = [(p, noisy(p)) for p in space.from_unit(rng.random((80, 2)))]
        test = space.from_unit(rng.random((200, 2)))
        snap = fit(obs, space, cfg, seed=r, candidates=space.to_unit(test))
        states = initial_states(cfg)
        alphas = np.array([s.alpha for s in states])
        w = Warp.from_dict(snap.meta.warp)
        Q = w.inverse(snap.bounds.at(alphas))
        y = np.array([noisy(p) for p in test])
        L = Q.shape[1]
        covs.append([np.mean((Q[:, j] <= y) & (y <= Q[:, L - 1 - j])) for j in range(alphas.size)])
    nominal = 1.0 - np.array([s.target for s in initial_states(cfg)])
    cov = np.mean(covs, axis=0)
    # the refit's over-coverage reaches 8 points on one pair here (0.782 for 0.7): the warp's part is
    # that nothing under-covers
    assert np.all(cov >= nominal - 0.04) and np.all(cov <= nominal + 0.10), cov.round(3)


# ------------------------------------------------------------ extreme values
EXTREMES = [1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 1e200]


@pytest.mark.parametrize("kind", ["none", *KINDS])
def test_any_finite_value_warps_to_a_finite_one_in_order(kind: str) -> None:
    """Values up to +-1.8e308 beside ordinary ones: the warp squashes them first, so every warped
    value is finite and moderate, their order is kept, and the inverse gives finite values back."""
    rng = np.random.default_rng(3)
    y = np.concatenate([rng.normal(size=30), EXTREMES])
    w = fit_warp(kind, y)
    assert w.squash is not None and not w.identity
    z = w.forward(y)
    assert np.all(np.isfinite(z)) and np.max(np.abs(z)) < 1e4
    order = np.argsort(y, kind="stable")
    assert np.all(np.diff(z[order]) >= 0) and np.all(np.diff(z[order][:30]) > 0)
    back = w.inverse(z)
    assert np.all(np.isfinite(back)) and np.all(np.diff(back[order]) >= 0)
    ordinary = np.abs(y) < 1e3
    np.testing.assert_allclose(back[ordinary], y[ordinary], rtol=1e-9, atol=1e-9)
    # the warp survives the snapshot's and the prediction's JSON
    assert Warp.from_dict(w.to_dict()) == w
    far = w.inverse(np.array([-1e6, -2e3, 0.0, 2e3, 1e6]))
    assert np.all(np.isfinite(far)) and np.all(np.diff(far) >= 0)


@pytest.mark.parametrize("kind", ["none", *KINDS])
def test_ordinary_values_are_never_squashed(kind: str) -> None:
    """Heavy tails, plateaus and large but representable scales keep the plain warp and its stored form."""
    rng = np.random.default_rng(4)
    for y in (rng.lognormal(0.0, 3.0, 80), 1e100 * rng.normal(size=40), np.r_[np.zeros(30), 1.0, 2.0],
              np.r_[rng.normal(size=40) * 1e-6, 1e12]):
        w = fit_warp(kind, y)
        assert w.squash is None and "squash" not in w.to_dict()


@pytest.mark.parametrize("directions", [None, ["minimize", "maximize"]])
def test_a_study_told_extreme_values_keeps_fitting_and_asking(directions) -> None:
    """Told +-1e308 among ordinary values (objective, every objective, constraints): each fit
    succeeds on every schedule (raw, CV+, split), and every prediction is finite JSON."""
    import json

    from calibo.engine import Optimizer

    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1},
                                   "y": {"type": "float", "low": 0, "high": 1}})
    opt = Optimizer(space, seed=1, n_warmup=6, directions=directions, constraints=["c"]) if directions \
        else Optimizer(space, seed=1, n_warmup=6, constraints=["c"])
    methods = set()
    for i in range(56):
        (s,) = opt.ask(1)
        big = EXTREMES[i % len(EXTREMES)] if i % 3 == 0 else None
        v = big if big is not None else s.params["x"] - s.params["y"]
        value = [v, -v if big is None else big] if directions else v
        opt.tell(s.params, value, s.prediction, constraints=[big if big is not None else s.params["y"] - 0.5])
        if s.prediction is not None:
            json.dumps(s.prediction, allow_nan=False, default=lambda a: a.tolist())
            methods.add((s.prediction.get("objectives") or [s.prediction])[0]["method"])
    assert {"cv+", "split"} <= methods


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("shape", ["one_objective", "two_objectives", "constraint"])
def test_every_outcome_an_extreme_of_alternating_sign_keeps_predictions_finite(shape: str) -> None:
    """Each told value an extreme, their signs alternating (the median distance between values then
    overflows): every fit lands and every prediction, record and state is finite JSON, through the
    raw, CV+ and split schedules, with two and three parameters; no step overflows on the way (an
    overflow warning is an error: the tie check of the incumbent took the span of +-1.8e308)."""
    import json

    from calibo.engine import Optimizer

    for dim in (2, 3):
        space = {f"x{j}": {"type": "float", "low": 0, "high": 1} for j in range(dim)}
        kw = {"directions": ["minimize", "maximize"]} if shape == "two_objectives" else \
            {"constraints": ["c"]} if shape == "constraint" else {}
        opt = Optimizer(space, seed=dim, n_warmup=4, config={"conformalize_from": 8, "split_from": 14,
                                                               "n_candidates": 200}, **kw)
        for i in range(18):
            (s,) = opt.ask(1)
            big = (1.7976931348623157e308, -1e308, 1e308, -1.7976931348623157e308)[i % 4]
            value = [big, -big] if shape == "two_objectives" else s.params["x0"] if shape == "constraint" else big
            opt.tell(s.params, value, s.prediction, constraints=[big] if shape == "constraint" else None)
            if s.prediction is not None:
                json.dumps(s.prediction, allow_nan=False, default=lambda a: a.tolist())
        json.dumps(opt.state.to_dict(), allow_nan=False)
        assert any(s.prediction is not None for s in opt.ask(3))
