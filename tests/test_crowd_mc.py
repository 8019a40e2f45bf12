"""Monte Carlo fantasies of the trials in flight (``engine.crowd.Crowd(..., samples=S)``): qLogEI-style
integration over the running points' outcomes instead of believing them at their medians."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from calibo.engine import EngineConfig, SearchSpace, fit
from calibo.engine import acquisition as acq
from calibo.engine.crowd import Crowd, _spread, narrow
from calibo.engine.scoring import scored
from calibo.engine.state import initial_states

pytestmark = pytest.mark.unit

LINE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
FAST = {"n_warmup": 6, "conformalize_from": 10, "split_from": 16, "n_candidates": 300}


@pytest.fixture(scope="module")
def line():
    """A wiggly 1-D objective (a short length scale) fitted by the GP: (space, snapshot, Q), ``Q``
    the quantiles select scores for an improvement acquisition."""
    space = SearchSpace.from_dict(LINE)
    xs = np.linspace(0.02, 0.98, 30)
    obs = [({"x": float(x)}, float(np.sin(18 * x) + 0.3 * x)) for x in xs]
    cfg = EngineConfig(**FAST)
    snap = fit(obs, space, cfg, seed=0)
    assert snap.meta["crowd"].get("kernel") is not None
    Q = scored(snap.bounds.at(np.array([s.alpha for s in initial_states(cfg)])), snap.signal)
    return space, snap, Q


def scorer(snap, name: str, seed: int = 0):
    """select's score: the acquisition (lower is better), with its own generator for the draws."""
    rng = np.random.default_rng(seed)

    def score(Q: np.ndarray, best: float, rows: np.ndarray | None = None) -> np.ndarray:
        return acq.score(name, Q, snap.levels, best=best, rng=rng)
    return score


def _rows(snap, Q) -> list[int]:
    """Two marked rows: the best median, and one in the middle of the line."""
    x = snap.candidates[:, 0]
    return [int(np.argmin(acq.median(Q))), int(np.argmin(np.abs(x - 0.5)))]


# ------------------------------------------------------------------ samples=0
@pytest.mark.parametrize("name", ["logei", "ei", "pi", "ts", "mean"])
def test_no_samples_is_the_believer_bit_for_bit(line, name) -> None:
    space, snap, Q = line
    rows = _rows(snap, Q)
    old, new = Crowd(snap, space, Q), Crowd(snap, space, Q, samples=0, rng=np.random.default_rng(5), top=3)
    f, g = scorer(snap, name), scorer(snap, name)  # the same draws for either
    assert np.array_equal(old.scores(f, name), new.scores(g, name))  # nothing running
    old.add(rows)
    new.add(rows)
    a, b = old.scores(f, name), new.scores(g, name, alive=np.ones(Q.shape[0], dtype=bool))
    assert np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("name", ["ts", "ucb", "mean", "its", "obs"])
def test_acquisitions_without_an_improvement_keep_the_believer(line, name) -> None:
    space, snap, Q = line
    rows = _rows(snap, Q)
    old, new = Crowd(snap, space, Q), Crowd(snap, space, Q, samples=16, rng=np.random.default_rng(5))
    old.add(rows)
    new.add(rows)
    assert not new.monte_carlo(name)
    assert np.array_equal(old.scores(scorer(snap, name), name), new.scores(scorer(snap, name), name))


def test_samples_without_running_points_score_as_alone(line) -> None:
    space, snap, Q = line
    f = scorer(snap, "logei")
    view = Crowd(snap, space, Q, samples=16, rng=np.random.default_rng(5))
    assert not view.monte_carlo("logei")
    assert np.array_equal(view.scores(f, "logei"), f(Q, snap.best))


# ----------------------------------------------------------- the fantasies
def test_averaged_over_the_fantasies_a_candidate_is_back_to_its_unconditioned_spread(line) -> None:
    space, snap, Q = line
    view = Crowd(snap, space, Q, samples=8, rng=np.random.default_rng(0))
    view.add(_rows(snap, Q))
    view.add([17, 250])  # the batch chosen so far: a second block of fantasies
    b = view.believer
    assert b.W.shape[1] == 4
    # the latent variance the fantasies explain and the variance they leave add up to the posterior's
    assert np.allclose((b.W ** 2).sum(1) + b.left, b.v, rtol=1e-9, atol=1e-15)
    # on the scored quantiles: the spread of the shift and the narrowed spread add up to the spread
    everyone = np.arange(Q.shape[0])
    Cw = view.shift_weights(everyone)
    sq = _spread(Q, snap.levels)
    narrowed = _spread(narrow(Q, b.shrink()), snap.levels)
    assert np.allclose((Cw ** 2).sum(1) + narrowed ** 2, sq ** 2, rtol=1e-9)
    # the shifts average to nothing and their variance is the one taken away (fixed draws)
    S = 40000
    e = np.random.default_rng(1).standard_normal((S, b.W.shape[1]))
    shift = Cw @ e.T  # (N, S)
    sd = np.sqrt((Cw ** 2).sum(1))
    moved = sd > 1e-6 * sq
    assert moved.sum() > 20
    assert np.all(np.abs(shift[moved].mean(1)) / sd[moved] < 5.0 / math.sqrt(S))
    assert np.allclose(shift[moved].var(1) / sd[moved] ** 2, 1.0, atol=0.05)
    # a running point moves the incumbent with itself: its own shift has the full latent spread taken
    r = view.rows[0]
    assert sd[r] == pytest.approx(math.sqrt(sq[r] ** 2 - narrowed[r] ** 2), rel=1e-9)


def test_candidates_near_a_running_best_point_are_worth_less_and_the_incumbent_falls(line) -> None:
    space, snap, Q = line
    x = snap.candidates[:, 0]
    med = acq.median(Q)
    row = int(np.argmin(med))
    assert med[row] < snap.best  # clearly the best candidate: it lowers the believed incumbent
    ls = snap.meta["crowd"]["kernel"]["lengthscale"][0]
    d = np.abs(x - x[row])
    near, far = (d > 0) & (d < ls / 2), d > 3 * ls
    assert near.sum() > 10 and far.sum() > 10
    f = scorer(snap, "logei")
    plain = f(Q, snap.best)
    n = Q.shape[0]
    mc_view = Crowd(snap, space, Q, samples=64, rng=np.random.default_rng(3), top=n)
    bel_view = Crowd(snap, space, Q)
    for v in (mc_view, bel_view):
        v.add([row])
    mc, bel = mc_view.scores(f, "logei"), bel_view.scores(f, "logei")
    assert np.all(np.isfinite(mc[np.arange(n) != row]))
    for sc in (mc, bel):  # the running point takes more from its neighbours than from afar
        cost = sc - plain
        assert np.median(cost[near]) > np.median(cost[far]) + 1.0
        # far from it the candidates are as before but the incumbent is lower: less to expect
        assert np.all(cost[far] > 0.0)
        assert np.all(cost[near] > 0.0)
    # expected improvement under the fantasies: never above the same candidate's alone
    for name in ("ei", "pi"):
        g = scorer(snap, name)
        v = Crowd(snap, space, Q, samples=64, rng=np.random.default_rng(3), top=n)
        v.add([row])
        assert np.all(v.scores(g, name)[far] >= g(Q, snap.best)[far] - 1e-12)


def test_rows_outside_the_top_stay_behind_it_in_the_believers_order(line) -> None:
    space, snap, Q = line
    n = Q.shape[0]
    rows = _rows(snap, Q)
    f = scorer(snap, "logei")
    bel_view = Crowd(snap, space, Q)
    bel_view.add(rows)
    bel = bel_view.scores(f, "logei")
    alive = np.ones(n, dtype=bool)
    alive[rows] = False
    alive[np.argsort(bel)[:5]] = False  # observed elsewhere, say: not to be chosen
    view = Crowd(snap, space, Q, samples=32, rng=np.random.default_rng(0), top=20)
    view.add(rows)
    sc = view.scores(f, "logei", alive=alive)
    assert not np.isnan(sc).any()
    idx = np.flatnonzero(alive)
    top = idx[np.argsort(bel[idx], kind="stable")[:20]]
    rest = np.setdiff1d(np.arange(n), top)
    assert sc[rest].min() > sc[top].max()
    order = rest[np.argsort(bel[rest], kind="stable")]
    assert np.all(np.diff(sc[order]) >= 0)  # the believer's order among them
    # the default mask: every row not marked
    view = Crowd(snap, space, Q, samples=32, rng=np.random.default_rng(0), top=20)
    view.add(rows)
    sc = view.scores(f, "logei")
    free = np.setdiff1d(np.arange(n), rows)
    top = free[np.argsort(bel[free], kind="stable")[:20]]
    assert np.setdiff1d(np.arange(n), top).size == n - 20
    assert sc[np.setdiff1d(np.arange(n), top)].min() > sc[top].max()


def test_a_per_candidate_weight_is_given_the_rows_it_weighs(line) -> None:
    """A score that adds a per-candidate term (log probability of feasibility) takes ``rows``: the
    fantasies' average commutes with it."""
    space, snap, Q = line
    rows = _rows(snap, Q)
    term = np.random.default_rng(9).uniform(0.0, 3.0, Q.shape[0])
    f = scorer(snap, "logei")
    seen: list[np.ndarray] = []

    def weighted(Qv: np.ndarray, best: float, rows: np.ndarray | None = None) -> np.ndarray:
        seen.append(rows)
        return f(Qv, best) + (term if rows is None else term[rows])

    a, b = (Crowd(snap, space, Q, samples=16, rng=np.random.default_rng(2), top=30) for _ in range(2))
    a.add(rows)
    b.add(rows)
    plain, heavy = a.scores(f, "logei"), b.scores(weighted, "logei")
    assert seen[0] is None and all(r is not None and r.size == 30 for r in seen[1:]) and len(seen) == 17
    top = seen[1]
    assert np.allclose(heavy[top], plain[top] + term[top], rtol=1e-12, atol=1e-9)


# ---------------------------------------------------- determinism, extremes
def test_the_same_draws_give_the_same_scores(line) -> None:
    space, snap, Q = line
    rows = _rows(snap, Q)
    f = scorer(snap, "logei")

    def run(seed: int) -> np.ndarray:
        v = Crowd(snap, space, Q, samples=16, rng=np.random.default_rng(seed))
        v.add(rows)
        return v.scores(f, "logei")

    assert np.array_equal(run(4), run(4))
    assert not np.array_equal(run(4), run(5))


@pytest.mark.parametrize("name", ["logei", "ei", "pi"])
def test_no_nan_with_extreme_quantiles(line, name) -> None:
    space, snap, Q = line
    Qx = Q.copy()
    n = Qx.shape[0]
    Qx[::7] += 1e6  # no improvement in any sample: EI underflows (exactly 0 for ei)
    with np.errstate(over="ignore"):
        Qx[3::11] = acq.median(Qx[3::11])[:, None] + 1e150 * (Qx[3::11] - acq.median(Qx[3::11])[:, None])
        Qx[5::13] = np.sort(Qx[5::13] * 1e300, axis=1)  # overflows once shifted (or already)
    rows = _rows(snap, Q) + [3, 5, 7]
    f = scorer(snap, name)

    def broken(Qv: np.ndarray, best: float, rows: np.ndarray | None = None) -> np.ndarray:  # a score that is sometimes NaN or infinite
        sc = f(Qv, best)
        sc[::5] = np.nan
        sc[1::9] = np.inf
        sc[2::17] = -np.inf
        return sc

    for g in (f, broken):
        with np.errstate(all="ignore"):
            v = Crowd(snap, space, Qx, samples=32, rng=np.random.default_rng(0), top=n)
            v.add(rows)
            sc = v.scores(g, name)
            assert sc.shape == (n,) and not np.isnan(sc).any()
            v = Crowd(snap, space, Qx, samples=32, rng=np.random.default_rng(0), top=16)
            v.add(rows)
            assert not np.isnan(v.scores(g, name)).any()
    # a candidate whose EI is nothing in every sample: the worst score, not NaN
    v = Crowd(snap, space, Qx, samples=32, rng=np.random.default_rng(0), top=n)
    v.add(rows)
    with np.errstate(all="ignore"):
        sc = v.scores(f, name)
    hopeless = np.zeros(n, dtype=bool)
    hopeless[::7] = True
    hopeless[rows] = False
    if name == "logei":
        assert np.all(sc[hopeless] > 1e6)
    else:
        assert np.all(sc[hopeless] >= -1e-300)


# ------------------------------------------------------------------- timing
def test_timing_of_the_fantasies_at_2000_candidates() -> None:
    """Not an assertion of speed: what a choice costs with 8 points running (printed, ``-s``)."""
    space = SearchSpace.from_dict({f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(3)})

    def f(p: dict) -> float:
        x = np.array([p["x0"], p["x1"], p["x2"]])
        return float(((x - 0.3) ** 2).sum() + 0.2 * np.sin(9 * x).sum())

    obs = [(p, f(p)) for p in space.from_unit(space.sample(40, 3))]
    cfg = EngineConfig(**(FAST | {"n_candidates": 2000}))
    snap = fit(obs, space, cfg, seed=0)
    Q = scored(snap.bounds.at(np.array([s.alpha for s in initial_states(cfg)])), snap.signal)
    n = Q.shape[0]
    assert n >= 2000
    rows = [int(r) for r in np.argsort(acq.median(Q))[:8]]
    out = {}
    for name in ("logei", "ei"):
        g = scorer(snap, name)
        for samples in (0, 32):
            v = Crowd(snap, space, Q, samples=samples, rng=np.random.default_rng(0), top=64)
            v.add(rows)
            v.scores(g, name)  # warm: the believer's columns
            reps = 20
            t = time.perf_counter()
            for _ in range(reps):
                sc = v.scores(g, name)
            out[name, samples] = (time.perf_counter() - t) / reps * 1e3
            assert not np.isnan(sc).any()
    print(f"\nCrowd.scores, {n} candidates, 8 running, top=64: " + ", ".join(
        f"{name} S={s}: {ms:.2f} ms" for (name, s), ms in out.items()))
