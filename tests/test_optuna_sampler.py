"""``calibo.optuna.CaliboSampler`` against Optuna's own sampler test suite, and what it promises beyond it.

Optuna's ``BasicSamplerTestCase`` and ``RelativeSamplerTestCase`` (``optuna.testing.pytest_samplers``)
run twice: with the default warm-up, and with a 4-trial warm-up so that their short studies reach the
fitted surrogate and the calibrated select. None of their cases is skipped.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

optuna = pytest.importorskip("optuna")
from optuna.testing.pytest_samplers import (  # noqa: E402
    BasicSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    RelativeSamplerTestCase,
)
from optuna.trial import TrialState  # noqa: E402

from calibo.optuna import CaliboSampler  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


class TestDefault(BasicSamplerTestCase, RelativeSamplerTestCase, MultiObjectiveSamplerTestCase):
    @pytest.fixture
    def sampler(self):
        return lambda: CaliboSampler(seed=0)


class TestFittedEarly(BasicSamplerTestCase, RelativeSamplerTestCase, MultiObjectiveSamplerTestCase):
    @pytest.fixture
    def sampler(self):
        return lambda: CaliboSampler(seed=1, n_startup_trials=4)


def branin(trial) -> float:
    x = trial.suggest_float("x", -5, 10)
    y = trial.suggest_float("y", 0, 15)
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


def mixed(trial) -> float:
    x = trial.suggest_float("x", -3, 3, step=0.25)
    k = trial.suggest_int("k", 2, 64, log=True)
    m = trial.suggest_int("m", 0, 20, step=4)
    c = trial.suggest_categorical("c", ["a", None, 3, True])
    return (x - 1.25) ** 2 + (math.log2(k) - 3) ** 2 + abs(m - 8) / 4 + (0.0 if c is None else 1.0)


def predicted(study) -> list:
    from calibo.optuna._sampler import stored

    return [t for t in study.trials if stored(study, t, "prediction") is not None]


def test_reproducible_with_a_seed() -> None:
    runs = []
    for _ in range(2):
        study = optuna.create_study(sampler=CaliboSampler(seed=7, n_startup_trials=5))
        study.optimize(mixed, n_trials=14)
        runs.append([t.params for t in study.trials])
    assert runs[0] == runs[1]
    other = optuna.create_study(sampler=CaliboSampler(seed=8, n_startup_trials=5))
    other.optimize(mixed, n_trials=14)
    assert [t.params for t in other.trials] != runs[0]


def test_finds_branin_and_steps_grids() -> None:
    study = optuna.create_study(sampler=CaliboSampler(seed=0))
    study.optimize(branin, n_trials=40)
    assert study.best_value < 0.45  # the minimum is 0.3979; random search at 40 trials ends near 1.5
    # the surrogate chooses from 5 results on while it ranks them better than chance, and every
    # trial from the 15th result (the warm-up's cap) on
    numbers = {t.number for t in predicted(study)}
    assert min(numbers) >= 5 and set(range(15, 40)) <= numbers
    grid = optuna.create_study(sampler=CaliboSampler(seed=0, n_startup_trials=6))
    grid.optimize(mixed, n_trials=25)
    for t in grid.trials:
        assert (t.params["x"] + 3) / 0.25 == round((t.params["x"] + 3) / 0.25)
        assert t.params["m"] % 4 == 0 and type(t.params["k"]) is int
    configs = [tuple(sorted(t.params.items(), key=lambda kv: kv[0])) for t in grid.trials]
    assert len(set(map(repr, configs))) == len(configs)  # no configuration suggested twice
    bests = [grid.best_value]
    for seed in (1, 2):  # random search's median best at 25 trials is about 2 (seeds 0-5: 0.46 to 2.34)
        other = optuna.create_study(sampler=CaliboSampler(seed=seed, n_startup_trials=6))
        other.optimize(mixed, n_trials=25)
        bests.append(other.best_value)
    assert float(np.median(bests)) < 1.0, bests


def test_calibration_state_replays_what_was_told() -> None:
    from calibo.optuna._sampler import stored
    from calibo.optuna._space import Encoding as _Encoding

    def _get(t, key):
        return stored(study, t, key)

    settings = {"conformalize_from": 8, "split_from": 12}
    sampler = CaliboSampler(seed=3, n_startup_trials=5, settings=settings)
    study = optuna.create_study(sampler=sampler)
    study.enqueue_trial({"x": 9.0, "y": 1.0})  # not chosen on a prediction: must not adapt
    study.optimize(branin, n_trials=30)
    (key, (numbers, state)), = sampler._adapted.items()
    states = state.states
    complete = [t.number for t in study.trials if t.state == TrialState.COMPLETE]
    assert numbers == complete[:-1]  # the last ask saw every trial but its own
    conformal = [t.number for t in study.trials if _get(t, "prediction") is not None
                 and _get(t, "prediction")["prediction"]["data"]["method"] != "raw"]
    assert conformal, "no conformalized prediction was made"
    # every pair's state stepped once per conformalized prediction that was told before the last ask
    assert {s.steps for s in states} == {len([n for n in conformal if n in numbers])}
    assert any(s.alpha != s.target for s in states)
    # the same study read by a fresh sampler (another process, say) rebuilds the same state
    fresh = CaliboSampler(seed=3, n_startup_trials=5, settings=settings)
    space = {"x": optuna.distributions.FloatDistribution(-5, 10), "y": optuna.distributions.FloatDistribution(0, 15)}
    again = fresh._states(study, key[:2], _Encoding(space), [t for t in study.trials if t.number in numbers])
    assert again == state
    # an enqueued trial whose told configuration differs from the suggestion does not adapt
    fixed = [t for t in study.trials if t.number == 0][0]
    assert _get(fixed, "prediction") is None and fixed.params == {"x": 9.0, "y": 1.0}


def test_failed_pruned_and_nan_trials_do_not_break_it() -> None:
    sampler = CaliboSampler(seed=0, n_startup_trials=4)
    study = optuna.create_study(sampler=sampler)

    def objective(trial) -> float:
        v = branin(trial)
        if trial.number % 5 == 1:
            return float("nan")  # told failed by Optuna
        if trial.number % 5 == 2:
            raise optuna.TrialPruned()
        if trial.number == 3:
            return float("inf")
        return v

    study.optimize(objective, n_trials=25, catch=())
    states = {t.state for t in study.trials}
    assert states == {TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED}
    keys = [(round(t.params["x"], 12), round(t.params["y"], 12)) for t in study.trials]
    assert len(set(keys)) == len(keys)
    assert predicted(study)


def test_parallel_jobs_on_rdb_storage(tmp_path) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    study = optuna.create_study(storage=storage, sampler=CaliboSampler(seed=0, n_startup_trials=6))
    study.optimize(branin, n_trials=24, n_jobs=3)
    trials = study.trials
    assert len(trials) == 24 and all(t.state == TrialState.COMPLETE for t in trials)
    keys = {(t.params["x"], t.params["y"]) for t in trials}
    assert len(keys) == 24
    assert len(predicted(study)) >= 12
    # a second process' sampler on the same storage goes on from what is stored
    again = optuna.load_study(study_name=study.study_name, storage=storage,
                              sampler=CaliboSampler(seed=0, n_startup_trials=6))
    again.optimize(branin, n_trials=4)
    assert len(again.trials) == 28 and again.best_value <= study.best_value


def test_multi_objective_studies_model_each_objective() -> None:
    """Two objectives: the engine's EHVI on one calibrated surrogate per objective; its front beats
    the quasi-random design's, and each objective's prediction and calibration state are replayed."""
    from calibo.optuna._sampler import stored

    def two(trial) -> tuple[float, float]:
        x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
        g = 1 + 9 * y
        return x, g * (1 - math.sqrt(x / g))

    def hv(study) -> float:
        import moocore

        Y = np.array([t.values for t in study.best_trials])
        return float(moocore.hypervolume(Y, ref=[1.1, 11.0]))

    ours = optuna.create_study(directions=["minimize", "minimize"], sampler=CaliboSampler(seed=0, n_startup_trials=8))
    ours.optimize(two, n_trials=30)
    sobol = optuna.create_study(directions=["minimize", "minimize"],
                                sampler=CaliboSampler(seed=0, n_startup_trials=1000,
                                                      settings={"conformalize_from": 1000}))
    sobol.optimize(two, n_trials=30)
    assert hv(ours) > hv(sobol)
    pred = stored(ours, ours.trials[-1], "prediction")["prediction"]["data"]
    assert pred["acquisition"] == "ehvi" and len(pred["objectives"]) == 2
    three = optuna.create_study(directions=["minimize", "maximize", "minimize"],
                                sampler=CaliboSampler(seed=0, n_startup_trials=5))
    three.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1), t.params["x"] * t.params["y"]),
                   n_trials=8)
    assert stored(three, three.trials[-1], "prediction")["prediction"]["data"]["acquisition"] == "parego"
    with pytest.raises(ValueError, match="reference_point"):
        optuna.create_study(directions=["minimize"] * 3, sampler=CaliboSampler(
            settings={"reference_point": [1.0, 1.0]})).optimize(two, n_trials=1, catch=())


def test_engine_settings_are_checked() -> None:
    from calibo.engine import ConfigError

    with pytest.raises(ConfigError):
        CaliboSampler(acquisition="nope")
    with pytest.raises(ConfigError):
        CaliboSampler(settings={"n_candidates": 0})
    assert np.isfinite(CaliboSampler(seed=None)._seed)


def test_constraints_told_with_set_constraint_are_modelled() -> None:
    def objective(trial) -> float:
        v = branin(trial)
        trial.set_constraint("budget", trial.params["x"] + trial.params["y"] - 8.0)  # feasible below
        return v

    sampler = CaliboSampler(seed=0, n_startup_trials=8, settings={"conformalize_from": 12, "split_from": 16})
    study = optuna.create_study(sampler=sampler)
    study.optimize(objective, n_trials=30)
    preds = [t for t in predicted(study)]
    assert preds
    from calibo.optuna._sampler import stored

    last = stored(study, preds[-1], "prediction")["prediction"]["data"]
    assert 0.0 <= last["feasibility"] <= 1.0 and len(last["constraints"]) == 1
    feasible = [t for t in study.trials if t.constraints["budget"] <= 0]
    late = [t for t in study.trials[8:]]
    assert sum(t.constraints["budget"] <= 0 for t in late) / len(late) > 0.6
    assert min(t.value for t in feasible) < 1.0
    (_, (_, state)), = sampler._adapted.items()
    heads = state.constraints
    assert len(heads) == 1 and heads[0][0].steps > 0  # the constraint's own calibration state moved
