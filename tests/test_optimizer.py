"""The in-process Optimizer: reproducibility, state round trip, batches, search quality."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import wilcoxon

from calibo.engine import ConfigError, EngineConfig, Optimizer, ParamError, SearchSpace
from calibo.engine.fit import fit

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
    assert [st.alpha for st in opt.state.states] == [st.alpha for st in twin.state.states]
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
    assert s.prediction is not None and s.prediction["method"] == "cv+"  # conformalized from the first fit
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


@pytest.mark.slow  # 60 tells with fits, ~3 s
def test_the_model_takes_over_once_it_ranks_held_out_results() -> None:
    """Sequentially the model takes over at the first fit whose out-of-fold predictions rank the
    results significantly (one-sided Spearman p < 0.05), before the ``n_warmup`` cap (15); a crowd
    of 8 on the results it has, rather than after 15 of them (22 quasi-random trials launched)."""
    space = SearchSpace.from_dict(BRANIN_SPACE)
    seq = Optimizer(BRANIN_SPACE, seed=3, config=FAST)
    first = _first_model_based_ask(seq, 1)
    assert 5 <= first < 15
    for n in range(5, first + 1):  # the rank test of the fit on each number of results, up to the first model ask
        rank_p = fit(seq.observations[:n], seq.space, seq.config, seed=seq.seed).meta.rank_p
        assert (rank_p < 0.05) == (n == first), (n, rank_p)
    crowd = Optimizer(BRANIN_SPACE, seed=3, config=FAST)
    assert _first_model_based_ask(crowd, 8) < 22
    # the warm-up trials are the study's first Sobol points, none skipped
    launched = [p for p, _ in crowd.observations] + [p for p, _ in crowd.pending]
    assert set(space.keys(space.sample(12, 3))) <= set(space.keys(space.to_unit(launched)))


def test_without_an_order_to_rank_the_warm_up_runs_to_n_warmup() -> None:
    """A flat objective gives the model nothing to rank: the quasi-random warm-up goes on to
    ``n_warmup`` results; the fits made meanwhile are kept, with their rank test, on the snapshot."""
    opt = Optimizer(BRANIN_SPACE, seed=3, config=FAST)
    firsts = []
    for i in range(17):
        s = opt.ask()[0]
        if s.prediction is not None:
            firsts.append(i)
        opt.tell(s.params, 1.0)
        if len(opt.observations) >= 5:
            assert opt.snapshot.meta.rank_p == 1.0  # all values equal: no order to predict
    assert firsts[0] == 15


def test_warmed_up_follows_the_rank_test_and_caps_at_n_warmup() -> None:
    cfg = EngineConfig(n_warmup=15)
    assert cfg.warmup_least == 5 and not cfg.fits(4) and cfg.fits(5)
    assert not cfg.warmed_up(4, rank_p=0.001)  # too few for any fit
    assert cfg.warmed_up(5, rank_p=0.01) and not cfg.warmed_up(5, rank_p=0.2) and not cfg.warmed_up(14, rank_p=None)
    assert cfg.warmed_up(15, rank_p=0.9) and cfg.warmed_up(15)  # the cap: n_warmup results
    small = EngineConfig(n_warmup=2)  # a fit needs 4 observations, whatever the warm-up
    assert small.warmup_least == 4 and not small.warmed_up(3) and small.warmed_up(4)
    assert EngineConfig(n_warmup=30).warmup_least == 5


def test_batch_ask_is_distinct_and_unseen() -> None:
    opt = Optimizer(BRANIN_SPACE, seed=2, config=FAST)
    run(opt, branin, 20)
    batch = opt.ask(8)
    space = SearchSpace.from_dict(BRANIN_SPACE)
    keys = space.keys(space.to_unit([s.params for s in batch]))
    assert len(batch) == 8 and len(set(keys)) == 8
    assert all(s.prediction is not None for s in batch)
    seen = set(space.keys(space.to_unit([p for p, _ in opt.observations])))
    assert not seen & set(keys)
    # the next ask is none of the 8 still running
    assert space.key(opt.ask()[0].params) not in set(keys)


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
    """By default every prediction is conformalized, from the first fit (CV+ below ``split_from``);
    a study that conformalizes later shows the surrogate's raw quantiles until then."""
    opt = Optimizer(BRANIN_SPACE, seed=5, config=FAST)
    run(opt, branin, 45)
    assert {r["method"] for r in opt.records} == {"cv+"}
    assert any(st.steps > 0 for st in opt.state.states)
    late = Optimizer(BRANIN_SPACE, seed=5, config={**FAST, "conformalize_from": 32})
    run(late, branin, 45)
    assert {r["method"] for r in late.records} == {"raw", "cv+"}



def test_predictions_are_conformalized_from_the_first_fit_and_the_search_follows_the_paper() -> None:
    """Below 32 observations a suggestion is the argmin of the acquisition on the surrogate's own
    quantiles (the quantile HPO paper's schedule), while the prediction it carries is CV+'s; from
    32 on the acquisition scores the calibrated quantiles the prediction shows."""
    from calibo.engine import acquisition as acq
    from calibo.engine import select
    from calibo.engine.config import SEARCH_CONFORMALIZED_FROM
    from calibo.engine.scoring import narrows, scored

    opt = Optimizer(BRANIN_SPACE, seed=1, config=FAST)
    # 16: past the warm-up's longest (n_warmup, 15), so the model chose it whatever the rank test said
    for n, raw_search in ((16, True), (SEARCH_CONFORMALIZED_FROM, False)):
        run(opt, branin, n - len(opt.observations))
        snap = opt.snapshot
        assert snap.method == "cv+"
        s = select(snap, opt.state, opt.space, opt.config, asked=opt.asked,
                   exclude=[p for p, _ in opt.observations], n_observed=n)[0]
        assert s.prediction.outcomes[0].method == "cv+"
        alphas = np.array([st.alpha for st in opt.state.states])
        Q = snap.raw if raw_search else snap.bounds.at(alphas)
        sc = acq.score(opt.config.acquisition, scored(Q, snap.signal if narrows(opt.config, several=False) else None),
                       snap.levels, best=snap.best, rng=np.random.default_rng(0))
        keys = snap.candidate_keys()
        seen = set(opt.space.keys(snap.observed))
        alive = [i for i, k in enumerate(keys) if k not in seen]
        assert opt.space.from_unit(snap.candidates[[alive[int(np.argmin(sc[alive]))]]])[0] == s.params

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
    assert [s.alpha for s in lo.state.states] == [s.alpha for s in hi.state.states]


def test_used_up_candidates_fall_back_to_quasi_random_points() -> None:
    """A crowd can outrun the fits: asks keep getting fresh configurations, unpredicted."""
    from calibo.engine import StudyState, fit, select

    space = SearchSpace.from_dict(BRANIN_SPACE)
    obs = [(p, branin(p)) for p in space.from_unit(space.sample(20, 0))]
    cfg = EngineConfig(n_candidates=6, mutation_fraction=0.0, n_warmup=5)
    snap = fit(obs, space, cfg, seed=0)
    n = len(snap.candidates)
    assert 6 < n <= 6 + 6 + 2  # the drawn six, and the local search's ends (from them and the two best)
    got = select(snap, StudyState.initial(cfg, 0), space, cfg, count=n + 4, asked=20)
    assert len(got) == n + 4
    assert [s.prediction is not None for s in got] == [True] * n + [False] * 4
    keys = [space.key(s.params) for s in got]
    assert len(set(keys)) == n + 4 and not set(keys) & set(space.keys(snap.observed))


def test_a_failed_tell_ends_the_trial_and_its_configuration_is_not_suggested_again() -> None:
    space = {"k": {"type": "categorical", "choices": ["a", "b", "c"]}}
    opt = Optimizer(space, seed=0, n_warmup=2)
    (s,) = opt.ask()
    opt.tell(s.params, state="failed")
    assert opt.pending == [] and opt.failed == [s.params] and opt.observations == []
    later = [opt.ask()[0].params for _ in range(2)]
    assert s.params not in later and len({p["k"] for p in later}) == 2
    with pytest.raises(ParamError, match="state"):
        opt.tell(later[0], 1.0, state="running")
    with pytest.raises(ParamError, match="value"):
        opt.tell(later[0], 1.0, state="failed")
