"""Several objectives in the engine: fronts and hypervolume (checked against moocore), the calibrated
draws the acquisitions use, and the in-process Optimizer on ZDT1 / a 3-objective problem."""

from __future__ import annotations

import math

import moocore
import numpy as np
import pytest

from calibo.engine import ConfigError, EngineConfig, Optimizer, ParamError, multi
from calibo.engine.snapshot import Snapshot

ZDT_SPACE = {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(6)}


def zdt1(p: dict) -> list[float]:
    x = np.array([p[f"x{i}"] for i in range(6)])
    g = 1.0 + 9.0 * x[1:].mean()
    return [float(x[0]), float(g * (1.0 - math.sqrt(x[0] / g)))]


def dtlz2(p: dict) -> list[float]:
    x = np.array([p[f"x{i}"] for i in range(6)])
    g = float(np.sum((x[2:] - 0.5) ** 2))
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b), (1 + g) * math.sin(a)]


# ------------------------------------------------------------------ fronts and hypervolume
@pytest.mark.parametrize("m", [2, 3, 4])
def test_hypervolume_matches_moocore(m: int) -> None:
    rng = np.random.default_rng(m)
    for n in (1, 5, 30):
        Y = rng.random((n, m))
        ref = np.full(m, 1.1)
        assert multi.hypervolume(Y, ref) == pytest.approx(float(moocore.hypervolume(Y, ref=ref)), rel=1e-9)
    # points beyond the reference add nothing; an empty set has none
    assert multi.hypervolume(np.full((3, m), 2.0), np.ones(m)) == 0.0
    assert multi.hypervolume(np.empty((0, m)), np.ones(m)) == 0.0


def test_pareto_mask_and_ranks_match_a_brute_force_dominance_check() -> None:
    rng = np.random.default_rng(0)
    Y = rng.integers(0, 5, size=(60, 3)).astype(float)  # many ties
    dom = np.array([[np.all(a <= b) and np.any(a < b) for b in Y] for a in Y])
    nondominated = ~dom.any(axis=0)
    mask = multi.pareto_mask(Y)
    assert set(map(tuple, Y[mask])) == set(map(tuple, Y[nondominated]))
    assert len(Y[mask]) == len(set(map(tuple, Y[mask])))  # equal points kept once
    rank = multi.pareto_ranks(Y)
    assert np.array_equal(rank == 0, nondominated)
    for i, j in zip(*np.nonzero(dom), strict=True):  # a dominating point has a lower rank
        assert rank[i] < rank[j]


def test_hypervolume_improvement_in_2d_is_the_gain_in_hypervolume() -> None:
    rng = np.random.default_rng(1)
    front = rng.random((8, 2))
    ref = np.array([1.2, 1.2])
    pts = rng.random((200, 2)) * 1.3
    gain = multi.hvi_2d(front, ref, pts[:, 0], pts[:, 1])
    base = multi.hypervolume(front, ref)
    want = [multi.hypervolume(np.vstack([front, p]), ref) - base for p in pts]
    np.testing.assert_allclose(gain, want, atol=1e-12)


def test_draws_follow_the_calibrated_quantiles() -> None:
    levels = np.array([0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95])
    from scipy.stats import norm

    Q = np.stack([norm.ppf(levels, loc=3.0, scale=2.0), norm.ppf(levels, loc=-1.0, scale=0.1)])
    u = multi.uniforms(1, np.random.default_rng(2), n=20000)[0]
    draws = multi.sample(Q, levels, u)
    for row in range(2):  # the empirical quantiles at the levels are the given ones
        np.testing.assert_allclose(np.quantile(draws[row], levels), Q[row], atol=0.02 * (Q[row, -1] - Q[row, 0]))
    # beyond the outermost quantiles the tails are the matching normal's: its 1% quantile
    assert np.quantile(draws[0], 0.01) == pytest.approx(norm.ppf(0.01, 3.0, 2.0), abs=0.15)


def test_ehvi_prefers_improving_candidates_and_orders_the_others() -> None:
    levels = np.linspace(0.05, 0.95, 10)
    front = np.array([[0.2, 0.8], [0.5, 0.5], [0.8, 0.2]])
    ref = np.array([1.1, 1.1])
    centres = np.array([[0.3, 0.3], [0.6, 0.6], [0.9, 0.9], [0.45, 0.45]])
    spread = 0.01 * (levels - 0.5)
    Qs = [centres[:, j, None] + spread[None, :] for j in range(2)]
    u = multi.uniforms(2, np.random.default_rng(0))
    sc = multi.scores("ehvi", Qs, levels, front, ref, u)
    assert sc[0] < sc[3] < sc[1] < sc[2]  # improving ones first, by how much; dominated ones by their gap
    assert sc[1] >= multi.FLOOR and sc[2] > sc[1]
    w = np.array([0.5, 0.5])
    inc = float(multi.chebyshev(front, w).min())
    pg = multi.scores("parego", Qs, levels, front, ref, u, weights=w, incumbent=inc)
    assert pg[0] < pg[3] < pg[1] < pg[2]


# ------------------------------------------------------------------ the Optimizer
def run(fn, directions, n: int, seed: int, **kw) -> Optimizer:
    opt = Optimizer(ZDT_SPACE, directions=directions, seed=seed, **kw)
    for _ in range(n):
        s = opt.ask()[0]
        opt.tell(s.params, fn(s.params))
    return opt


def test_zdt1_hypervolume_beats_the_quasi_random_design() -> None:
    ref = [1.1, 11.0]
    ours = [run(zdt1, ["minimize", "minimize"], 40, seed).hypervolume(ref) for seed in range(3)]
    # a quasi-random design: no fold models before 1000 observations, so no rank test ends the warm-up
    sobol = [run(zdt1, ["minimize", "minimize"], 40, seed, n_warmup=1000,
                 config={"conformalize_from": 1000}).hypervolume(ref) for seed in range(3)]
    assert min(ours) > max(sobol), (ours, sobol)


def test_a_maximised_objective_is_handled_in_its_own_orientation() -> None:
    def neg(p):  # the same problem with the second objective's sign flipped, and maximised
        a, b = zdt1(p)
        return [a, -b]

    opt = run(neg, ["minimize", "maximize"], 30, 0)
    flipped = run(zdt1, ["minimize", "minimize"], 30, 0)
    assert [p for p, _ in opt.pareto] == [p for p, _ in flipped.pareto]  # the same choices, mirrored
    assert opt.hypervolume([1.1, -11.0]) == pytest.approx(flipped.hypervolume([1.1, 11.0]))
    s = opt.ask()[0]
    lo, hi = (s.prediction["objectives"][1]["intervals"][0][k] for k in ("lower", "upper"))
    assert hi <= 0.0 or lo < hi  # in the user's units (values are negative)
    assert s.prediction["objectives"][1]["mean"] < 0


def test_three_objectives_use_parego_and_each_objective_is_predicted() -> None:
    opt = run(dtlz2, ["minimize"] * 3, 25, 0)
    batch = opt.ask(4)
    assert len({tuple(sorted(s.params.items())) for s in batch}) == 4
    pred = batch[0].prediction
    assert pred["acquisition"] == "parego" and len(pred["objectives"]) == 3
    for o in pred["objectives"]:
        lo, hi = o["intervals"][0]["lower"], o["intervals"][0]["upper"]  # null: an unbounded end
        assert len(o["quantiles"]) == 10 and (-math.inf if lo is None else lo) <= (math.inf if hi is None else hi)
    for s in batch:
        opt.tell(s.params, dtlz2(s.params))
    assert all(len(r["objectives"]) == 3 for r in opt.records)
    assert opt.pareto and all(len(v) == 3 for _, v in opt.pareto)


def test_per_objective_calibration_after_conformalization() -> None:
    """Noisy objectives: each one's conformal intervals cover about as often as they say."""
    rng = np.random.default_rng(5)

    def noisy(p):
        a, b = zdt1(p)
        return [a + 0.05 * rng.standard_normal(), b + 0.3 * rng.standard_normal()]

    gaps = {0: [], 1: []}
    for seed in range(2):
        opt = run(noisy, ["minimize", "minimize"], 110, seed)
        recs = [r for r in opt.records if r["objectives"][0]["method"] != "raw"]
        assert len(recs) >= 50
        for j in (0, 1):
            cov = np.array([r["objectives"][j]["covered"] for r in recs], dtype=float).mean(axis=0)
            nominal = np.array(recs[0]["objectives"][j]["coverage"])
            gaps[j].append(float(np.mean(np.abs(cov - nominal))))
    for j in (0, 1):
        assert np.mean(gaps[j]) <= 0.10, gaps


def test_constraints_leave_infeasible_points_off_the_front() -> None:
    opt = Optimizer(ZDT_SPACE, directions=["minimize", "minimize"], seed=0, constraints=["c"], n_warmup=8)
    for _ in range(20):
        s = opt.ask()[0]
        f = zdt1(s.params)
        opt.tell(s.params, f, constraints=[0.3 - s.params["x0"]])  # feasible when x0 >= 0.3
    assert opt.pareto and all(p["x0"] >= 0.3 for p, _ in opt.pareto)
    pred = opt.ask()[0].prediction
    assert 0.0 <= pred["feasibility"] <= 1.0 and len(pred["constraints"]) == 1 and len(pred["objectives"]) == 2


def test_state_dict_resumes_the_same_next_ask() -> None:
    opt = run(zdt1, ["minimize", "maximize"], 20, 3)
    again = Optimizer.from_state_dict(opt.state_dict())
    assert again.directions == ("minimize", "maximize")
    assert again.ask(2)[0].params == opt.ask(2)[0].params


def test_bad_multi_objective_input_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError) as e:
        Optimizer(ZDT_SPACE, directions=["minimize", "up"])
    assert e.value.field == "directions.1"
    with pytest.raises(ConfigError) as e:
        Optimizer(ZDT_SPACE, directions=["minimize"] * 5)
    assert e.value.field == "directions"
    with pytest.raises(ConfigError) as e:
        Optimizer(ZDT_SPACE, directions=["minimize"] * 2, reference_point=[1.0, 2.0, 3.0])
    assert e.value.field == "reference_point"
    with pytest.raises(ConfigError) as e:
        EngineConfig(multi_acquisition="nsga")
    assert e.value.field == "multi_acquisition"
    with pytest.raises(ConfigError) as e:
        Optimizer(ZDT_SPACE, directions=["minimize"] * 4, multi_acquisition="ehvi")
    assert e.value.field == "multi_acquisition"
    opt = Optimizer(ZDT_SPACE, directions=["minimize", "minimize"])
    s = opt.ask()[0]
    for bad, field in ((1.0, "value"), ([1.0], "value"), ([1.0, float("nan")], "value.1"), ([1.0, "x"], "value.1")):
        with pytest.raises(ParamError) as e:
            opt.tell(s.params, bad)
        assert e.value.field == field
    assert not opt.observations
    with pytest.raises(ValueError, match="pareto"):
        _ = opt.best


def test_a_multi_objective_snapshot_round_trips_through_storage_bytes() -> None:
    opt = run(zdt1, ["minimize", "minimize"], 20, 1)
    snap = opt.snapshot
    back = Snapshot.from_bytes(snap.to_bytes())
    assert back.meta.directions == ["minimize", "minimize"]
    np.testing.assert_allclose(back.observed_y, snap.observed_y)
    assert [h.kind for h in back.heads] == ["objective"]


def test_qgp_normalized_scores_travel_with_a_multi_objective_snapshot() -> None:
    """A multi-objective study's QGP conformalizes every head with residuals in units of the GP's
    own sd by default (scores="normalized"): the spread is stored with each head and survives the
    snapshot's bytes. A study that chooses the quantile scores (scores="cqr") stores no spread, and a
    single-objective study keeps the quantile scores by default."""
    snap = run(zdt1, ["minimize", "minimize"], 40, 2).snapshot
    assert snap.method != "raw" and snap.scale is not None and snap.heads[0].scale is not None
    assert np.all(snap.scale > 0) and np.ptp(snap.scale) > 0  # the GP's own sd: not one width
    back = Snapshot.from_bytes(snap.to_bytes())
    np.testing.assert_array_equal(back.heads[0].scale, snap.heads[0].scale)
    chosen = run(zdt1, ["minimize", "minimize"], 40, 2, surrogate_options={"scores": "normalized"}).snapshot
    np.testing.assert_array_equal(chosen.scale, snap.scale)  # the default is exactly that option
    plain = run(zdt1, ["minimize", "minimize"], 40, 2, surrogate_options={"scores": "cqr"}).snapshot
    assert plain.scale is None and plain.heads[0].scale is None
    opt = run(zdt1, ["minimize", "minimize"], 40, 2)
    assert opt.config.surrogate_options == {"scores": "normalized"}  # resolved when the study is made
    state = opt.state_dict()
    state["config"]["surrogate_options"] = {}  # a state saved before the default: it keeps its scores
    old = Optimizer.from_state_dict(state)
    assert old.config.surrogate_options == {}
    old.tell(*_next(old))
    assert old.snapshot.scale is None
    one = run(lambda p: zdt1(p)[0], ["minimize"], 40, 2)
    assert one.snapshot.method != "raw" and one.snapshot.scale is None


def _next(opt: Optimizer) -> tuple[dict, list[float]]:
    s = opt.ask()[0]
    return s.params, zdt1(s.params)


def test_three_objective_ehvi_prefers_improving_candidates_and_runs_a_study() -> None:
    """EHVI over three objectives (asked for; ``auto`` is ParEGO): candidates that add hypervolume
    come first, by how much, dominated ones after by their distance from the front; and a study runs
    on it, its predictions saying so."""
    levels = np.linspace(0.05, 0.95, 10)
    front = np.array([[0.2, 0.8, 0.5], [0.5, 0.5, 0.5], [0.8, 0.2, 0.5], [0.5, 0.5, 0.2]])
    ref = np.array([1.1, 1.1, 1.1])
    centres = np.array([[0.3, 0.3, 0.3], [0.6, 0.6, 0.6], [0.9, 0.9, 0.9], [0.45, 0.45, 0.45]])
    spread = 0.01 * (levels - 0.5)
    Qs = [centres[:, j, None] + spread[None, :] for j in range(3)]
    u = multi.uniforms(3, np.random.default_rng(0))
    sc = multi.scores("ehvi", Qs, levels, front, ref, u)
    assert sc[0] < sc[3] < sc[1] < sc[2]
    assert sc[1] >= multi.FLOOR
    gain = multi.hvi_3d(front, ref, *centres[[0, 3]].T)
    assert sc[0] == pytest.approx(-math.log(gain[0]), abs=0.05) and sc[3] == pytest.approx(-math.log(gain[1]), abs=0.05)
    opt = run(dtlz2, ["minimize"] * 3, 22, 0, multi_acquisition="ehvi", n_warmup=15)
    batch = opt.ask(3)
    assert {s.prediction["acquisition"] for s in batch} == {"ehvi"}
    assert len({tuple(sorted(s.params.items())) for s in batch}) == 3
