"""The in-process Optimizer: reproducibility, state round trip, batches, search quality."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import wilcoxon

from calibo.engine import ConfigError, EngineConfig, Optimizer, ParamError, SearchSpace

BRANIN_SPACE = {"x1": {"type": "float", "low": -5, "high": 10}, "x2": {"type": "float", "low": 0, "high": 15}}
MIXED_SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "depth": {"type": "int", "low": 1, "high": 8},
    "kind": {"type": "categorical", "choices": ["a", "b", "c"]},
    "size": {"type": "ordinal", "choices": [16, 32, 64, 128]},
}
FAST = {"surrogate": "qgp", "n_candidates": 500}


def branin(p: dict) -> float:
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def mixed(p: dict) -> float:
    shift = {"a": 0.0, "b": 0.5, "c": 1.5}[p["kind"]]
    return (math.log10(p["lr"]) + 2) ** 2 + 0.3 * (p["depth"] - 5) ** 2 + shift + abs(math.log2(p["size"]) - 6)


def run(opt: Optimizer, f, n: int) -> list[dict]:
    seen = []
    for _ in range(n):
        s = opt.ask()[0]
        seen.append(s.params)
        opt.tell(s.params, f(s.params))
    return seen


def test_same_seed_same_sequence() -> None:
    a = run(Optimizer(MIXED_SPACE, seed=3, config=FAST), mixed, 40)
    b = run(Optimizer(MIXED_SPACE, seed=3, config=FAST), mixed, 40)
    c = run(Optimizer(MIXED_SPACE, seed=4, config=FAST), mixed, 40)
    assert a == b
    assert a != c


def test_state_round_trip_gives_identical_next_ask() -> None:
    opt = Optimizer(BRANIN_SPACE, seed=1, config=FAST)
    run(opt, branin, 36)  # past warm start and into the conformalized (CV+) regime
    pending = opt.ask(2)  # leave two running
    state = json.loads(json.dumps(opt.state_dict()))
    twin = Optimizer.from_state_dict(state)
    nxt, twin_nxt = opt.ask(3), twin.ask(3)
    assert [s.params for s in nxt] == [s.params for s in twin_nxt]
    assert [s.prediction for s in nxt] == [s.prediction for s in twin_nxt]
    for s in pending:  # telling the pending ones adapts both identically
        opt.tell(s.params, branin(s.params))
        twin.tell(s.params, branin(s.params))
    assert [st.alpha for st in opt.states] == [st.alpha for st in twin.states]
    assert opt.ask()[0].params == twin.ask()[0].params


def test_warm_start_is_quasi_random_then_model_based() -> None:
    opt = Optimizer(BRANIN_SPACE, seed=0, n_warmup=10, config=FAST)
    first = [opt.ask()[0] for _ in range(10)]
    assert all(s.prediction is None for s in first)
    expected = SearchSpace.from_dict(BRANIN_SPACE).sample(10, 0)
    got = SearchSpace.from_dict(BRANIN_SPACE).to_unit([s.params for s in first])
    np.testing.assert_allclose(got, expected)
    for s in first:
        opt.tell(s.params, branin(s.params))
    s = opt.ask()[0]
    assert s.prediction is not None and s.prediction["method"] == "raw"
    lo, hi = s.prediction["intervals"][0]["lower"], s.prediction["intervals"][0]["upper"]
    assert lo < hi


def _first_model_based_ask(opt: Optimizer, in_flight: int, trials: int = 30) -> int | None:
    """Run ``opt`` with ``in_flight`` trials running at all times (oldest told first); the number
    of the first ask that came with a prediction."""
    running = opt.ask(in_flight)
    first = next((i for i, s in enumerate(running) if s.prediction is not None), None)
    for _ in range(trials):
        s = running.pop(0)
        opt.tell(s.params, branin(s.params))
        new = opt.ask()[0]
        if first is None and new.prediction is not None:
            first = opt.asked - 1
        running.append(new)
    return first


def test_with_trials_in_flight_the_warm_up_can_count_launched_trials() -> None:
    """By default (warmup_observed=1) a crowd of 8 waits for 15 finished trials (22 quasi-random
    ones launched); with 2/3 it fits first on 10 finished trials, 17 launched; with 0.5 it
    launches the warm-up's 15 points, and the model takes over once 8 have finished.
    Sequentially the warm-up is the first 15 observations whatever the share."""
    space = SearchSpace.from_dict(BRANIN_SPACE)
    assert _first_model_based_ask(Optimizer(BRANIN_SPACE, seed=3, config=FAST), 8) == 22
    assert _first_model_based_ask(Optimizer(BRANIN_SPACE, seed=3, config=FAST | {"warmup_observed": 2 / 3}), 8) == 17
    opt = Optimizer(BRANIN_SPACE, seed=3, config=FAST | {"warmup_observed": 0.5})
    assert _first_model_based_ask(opt, 8) == 15  # trials 0-14 quasi-random, 15 from the model
    # the warm-up trials are the study's first 15 Sobol points, none skipped
    launched = [p for p, _ in opt.observations] + [p for p, _ in opt.pending]
    assert set(space.keys(space.sample(15, 3))) <= set(space.keys(space.to_unit(launched)))
    for share in (0.5, 2 / 3, 1.0):
        seq = Optimizer(BRANIN_SPACE, seed=3, config=FAST | {"warmup_observed": share})
        assert _first_model_based_ask(seq, 1) == 15


def test_warmed_up_needs_four_observations_and_the_launched_warm_up() -> None:
    cfg = EngineConfig(n_warmup=15, warmup_observed=0.5)
    assert not cfg.warmed_up(7, 100) and cfg.warmed_up(8, 7) and not cfg.warmed_up(8, 6)
    assert cfg.warmed_up(15) and not cfg.warmed_up(14)
    assert not EngineConfig(n_warmup=15).warmed_up(14, 100)  # the default waits for 15 finished
    two_thirds = EngineConfig(warmup_observed=2 / 3)  # 10 of the 15 finished, once 15 are launched
    assert two_thirds.warmup_least == 10 and two_thirds.warmed_up(10, 7) and not two_thirds.warmed_up(9, 100)
    assert not two_thirds.warmed_up(10, 4) and not two_thirds.warmed_up(14) and two_thirds.warmed_up(15)
    small = EngineConfig(n_warmup=2, warmup_observed=0.5)  # a fit needs 4 observations, whatever the warm-up
    assert not small.warmed_up(3, 10) and small.warmed_up(4)
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ConfigError) as e:
            EngineConfig(warmup_observed=bad)
        assert e.value.field == "warmup_observed"


def test_batch_ask_in_radius_mode_is_distinct_diverse_and_unseen() -> None:
    opt = Optimizer(BRANIN_SPACE, seed=2, config=FAST | {"crowd": "radius", "diversity": 0.05})
    run(opt, branin, 20)
    batch = opt.ask(8)
    space = SearchSpace.from_dict(BRANIN_SPACE)
    U = space.to_unit([s.params for s in batch])
    d = np.linalg.norm(U[:, None] - U[None], axis=-1) / math.sqrt(2)
    assert len(batch) == 8
    assert d[np.triu_indices(8, 1)].min() >= 0.05
    seen = {tuple(p.values()) for p, _ in opt.observations}
    assert not seen & {tuple(s.params.values()) for s in batch}
    # the next ask keeps away from the 8 still running
    nxt = space.to_unit([opt.ask()[0].params])
    assert np.linalg.norm(U - nxt, axis=1).min() / math.sqrt(2) >= 0.05


def test_never_resuggests_in_a_small_discrete_space() -> None:
    space = {"a": {"type": "int", "low": 0, "high": 4}, "b": {"type": "categorical", "choices": ["x", "y"]}}
    opt = Optimizer(space, seed=0, n_warmup=4, config=FAST)
    seen = set()
    for _ in range(10):
        s = opt.ask()[0]
        key = (s.params["a"], s.params["b"])
        assert key not in seen
        seen.add(key)
        opt.tell(s.params, (s.params["a"] - 2) ** 2 + (s.params["b"] == "y"))
    assert len(seen) == 10


def test_an_exhausted_space_returns_what_is_left_quickly() -> None:
    space = SearchSpace.from_dict({"a": {"type": "int", "low": 0, "high": 2},
                                   "b": {"type": "ordinal", "choices": [1, 2]}})
    assert space.size == 6
    assert SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1}}).size is None
    opt = Optimizer(space, seed=0, n_warmup=10)
    first = opt.ask(4)
    rest = opt.ask(5)  # only two are left
    assert opt.ask(1) == []
    got = {(s.params["a"], s.params["b"]) for s in first + rest}
    assert len(first) == 4 and len(rest) == 2 and len(got) == 6


def test_maximize_finds_the_maximum() -> None:
    opt = Optimizer(BRANIN_SPACE, direction="maximize", seed=0, config=FAST)
    run(opt, lambda p: -branin(p), 50)
    assert opt.best[1] > -0.6  # max of -branin is -0.397887
    s = opt.ask()[0]
    iv = s.prediction["intervals"][0]
    assert iv["lower"] < iv["upper"]  # intervals come back in user units, ordered


def test_tell_validates_params_and_value() -> None:
    opt = Optimizer(MIXED_SPACE, seed=0)
    good = {"lr": 0.01, "depth": 3, "kind": "a", "size": 32}
    for bad, field in (
        ({**good, "depth": 9}, "depth"),
        ({**good, "kind": "z"}, "kind"),
        ({k: v for k, v in good.items() if k != "lr"}, "lr"),
        ({**good, "extra": 1}, "extra"),
    ):
        with pytest.raises(ParamError) as e:
            opt.tell(bad, 1.0)
        assert e.value.field == field
    for value in (float("nan"), float("inf"), "1.0", None):
        with pytest.raises(ParamError) as e:
            opt.tell(good, value)
        assert e.value.field == "value"
    assert not opt.observations  # nothing half-stored


def test_config_errors_name_the_setting() -> None:
    for kw, field in (({"surrogate": "nope"}, "surrogate"), ({"acquisition": "x"}, "acquisition"),
                      ({"n_levels": 5}, "n_levels"), ({"cal_fraction": 1.5}, "cal_fraction")):
        with pytest.raises(ConfigError) as e:
            EngineConfig(**kw)
        assert e.value.field == field
    with pytest.raises(ConfigError) as e:
        EngineConfig.from_dict({"bogus": 1})
    assert e.value.field == "bogus"


def test_adaptive_state_moves_once_conformalized() -> None:
    opt = Optimizer(BRANIN_SPACE, seed=5, config=FAST)
    run(opt, branin, 45)
    assert any(r["method"] == "cv+" for r in opt.records)
    assert any(st.steps > 0 for st in opt.states)
    assert {r["method"] for r in opt.records} >= {"raw", "cv+"}


@pytest.mark.parametrize("surrogate", ["qgp"])
def test_beats_random_search_on_branin(surrogate: str) -> None:
    """Over 8 seeds, best-after-40 is lower than random search's, significantly."""
    ours, rand = [], []
    for seed in range(8):
        opt = Optimizer(BRANIN_SPACE, seed=seed, surrogate=surrogate, config={"n_candidates": 500})
        run(opt, branin, 40)
        ours.append(opt.best[1])
        rng = np.random.default_rng(seed)
        pts = rng.random((40, 2)) * [15, 15] + [-5, 0]
        rand.append(min(branin({"x1": a, "x2": b}) for a, b in pts))
    ours, rand = np.array(ours), np.array(rand)
    assert np.median(ours) < np.median(rand)
    assert wilcoxon(ours, rand, alternative="less").pvalue < 0.05, (ours, rand)


@pytest.mark.parametrize("acquisition", ["obs", "ei", "ucb"])
def test_minimizing_f_and_maximizing_minus_f_suggest_the_same(acquisition: str) -> None:
    lo = Optimizer(MIXED_SPACE, direction="minimize", seed=9, acquisition=acquisition, config=FAST)
    hi = Optimizer(MIXED_SPACE, direction="maximize", seed=9, acquisition=acquisition, config=FAST)
    assert run(lo, mixed, 36) == run(hi, lambda p: -mixed(p), 36)
    assert [s.alpha for s in lo.states] == [s.alpha for s in hi.states]


def test_used_up_candidates_fall_back_to_quasi_random_points() -> None:
    """A crowd can outrun the fits: asks keep getting fresh configurations, unpredicted."""
    from calibo.engine import fit, initial_states, select

    space = SearchSpace.from_dict(BRANIN_SPACE)
    obs = [(p, branin(p)) for p in space.from_unit(space.sample(20, 0))]
    cfg = EngineConfig(n_candidates=6, mutation_fraction=0.0, n_warmup=5, local_search=2)
    snap = fit(obs, space, cfg, seed=0)
    assert 6 < len(snap.candidates) <= 6 + 2 + 2  # the drawn six, and the local search's ends
    got = select(snap, initial_states(cfg), space, cfg, count=10, asked=20)
    assert len(got) == 10
    assert [s.prediction is not None for s in got] == [True] * len(snap.candidates) + [False] * (10 - len(snap.candidates))
    keys = [space.key(s.params) for s in got]
    assert len(set(keys)) == 10 and not set(keys) & set(space.keys(snap.observed))
