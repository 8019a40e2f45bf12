"""CaliboSampler on define-by-run conditional spaces: the learned space, and that it is modelled.

An objective declares ``gamma`` only for some kernels and ``degree`` only for ``poly``: the
sampler learns those conditions from the completed trials and samples the conditional
parameters itself (no independent sampling, no fallback warning) once warmed up.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

optuna = pytest.importorskip("optuna")

from calibo.optuna import CaliboSampler  # noqa: E402
from calibo.optuna._space import Encoding, learn_space  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


def svc_like(trial: Any) -> float:
    kernel = trial.suggest_categorical("kernel", ["linear", "rbf", "poly"])
    c = trial.suggest_float("C", 1e-3, 1e3, log=True)
    loss = (math.log10(c) - 1.0) ** 2
    if kernel != "linear":
        gamma = trial.suggest_float("gamma", 1e-4, 1.0, log=True)
        loss += (math.log10(gamma) + 2.0) ** 2
    if kernel == "poly":
        degree = trial.suggest_int("degree", 2, 5)
        loss += 0.5 * (degree - 3) ** 2
        if trial.suggest_categorical("coef", ["zero", "one"]) == "one":  # nested under degree's parent
            loss += trial.suggest_float("coef0", 0.0, 1.0) ** 2
    return loss + {"linear": 2.0, "rbf": 0.0, "poly": 1.0}[kernel]


class CountingRandom(optuna.samplers.RandomSampler):
    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.calls: list[tuple[int, str]] = []

    def sample_independent(self, study, trial, param_name, param_distribution):  # noqa: ANN001
        self.calls.append((trial.number, param_name))
        return super().sample_independent(study, trial, param_name, param_distribution)


@contextmanager
def optuna_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Optuna's warnings, in ``caplog`` (Optuna's logger does not propagate by default)."""
    optuna.logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING, logger="optuna"):
            yield
    finally:
        optuna.logging.disable_propagation()


def _random_study(n: int, seed: int = 0) -> optuna.Study:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    study.optimize(svc_like, n_trials=n)
    return study


def test_the_learned_space_names_each_parent_and_its_values() -> None:
    study = _random_study(60)
    learned = learn_space(study.trials)
    assert set(learned.distributions) == {"kernel", "C", "gamma", "degree", "coef", "coef0"}
    parent, values = learned.conditions["gamma"]
    assert parent == "kernel" and sorted(values) == ["poly", "rbf"]
    assert learned.conditions["degree"] == ("kernel", ["poly"])
    assert learned.conditions["coef"] == ("kernel", ["poly"])
    assert learned.conditions["coef0"] == ("coef", ["one"])  # nested: coef is itself conditional
    assert "kernel" not in learned.conditions and "C" not in learned.conditions
    enc = Encoding(learned.distributions, learned.conditions)
    for t in study.trials:  # every trial is a configuration of the learned space, and decodes back
        values = enc.encode(t.params)
        assert values is not None, t.params
        assert enc.decode(values) == pytest.approx(t.params)
    assert enc.encode({"kernel": "linear", "C": 1.0, "gamma": 0.1}) is None  # gamma inactive for linear
    assert enc.encode({"kernel": "rbf", "C": 1.0}) is None  # gamma missing


def test_a_parameter_no_parent_explains_or_whose_range_changes_is_left_out() -> None:
    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        if trial.number % 3 == 0:  # appears by trial number: no parameter explains it
            trial.suggest_float("odd", 0, 1)
        trial.suggest_float("dyn", 0, 1 + trial.number % 2)  # its range changes
        return x

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    study.optimize(objective, n_trials=12)
    learned = learn_space(study.trials)
    assert set(learned.distributions) == {"x"}
    assert learned.unexplained == {"odd"} and learned.dynamic == {"dyn"}


def test_conditional_parameters_are_modelled_without_fallback(caplog: pytest.LogCaptureFixture) -> None:
    independent = CountingRandom(seed=0)
    sampler = CaliboSampler(seed=0, n_startup_trials=8, independent_sampler=independent)
    study = optuna.create_study(sampler=sampler)
    with optuna_warnings(caplog):
        study.optimize(svc_like, n_trials=30)
    assert not [r for r in caplog.records if "sampled independently" in r.getMessage()]
    # independent draws only while a parameter is being discovered (no completed trial holds it)
    first_seen: dict[str, int] = {}
    for t in study.trials:
        for name in t.params:
            first_seen.setdefault(name, t.number)
    late = [(n, p) for n, p in independent.calls if n > first_seen[p]]
    assert late == []
    modelled = [t for t in study.trials if t.number >= 12 and "gamma" in t.params]
    assert modelled, "no rbf/poly trial after the warm-up"
    kernels = {t.params["kernel"] for t in study.trials if t.number >= 12}
    assert "rbf" in kernels  # the model finds the best branch
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_a_real_fallback_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", 0, 1)
        return x + trial.suggest_float("dyn", 0, 1 + trial.number % 2)

    study = optuna.create_study(sampler=CaliboSampler(seed=0, n_startup_trials=3))
    with optuna_warnings(caplog):
        study.optimize(objective, n_trials=6)
    assert any("'dyn'" in r.getMessage() and "sampled independently" in r.getMessage() for r in caplog.records)


def test_a_space_that_grows_mid_study_goes_on() -> None:
    def objective(trial: Any) -> float:
        x = trial.suggest_float("x", -1, 1)
        kind = trial.suggest_categorical("kind", ["a", "b"])
        loss = x * x + (0.5 if kind == "a" else 0.0)
        if trial.number >= 10:  # a new parameter from trial 10 on, for every trial
            loss += trial.suggest_float("y", 0, 1)
        if kind == "b":
            loss += trial.suggest_int("k", 1, 4) / 10
        return loss

    study = optuna.create_study(sampler=CaliboSampler(seed=3, n_startup_trials=5))
    study.optimize(objective, n_trials=22)
    assert len(study.trials) == 22
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    # trials 0-9 lack y: learned as conditional on nothing, so left out until all hold it
    learned = learn_space(study.trials)
    assert "y" in learned.unexplained and learned.conditions["k"] == ("kind", ["b"])


def test_a_child_appearing_under_a_new_parent_value_is_discovery_not_fallback(
        caplog: pytest.LogCaptureFixture) -> None:
    """``gamma`` first seen under rbf, then ``kernel`` takes sigmoid for the first time: gamma's
    learned condition (rbf only) does not cover it yet, so it is drawn independently, unwarned."""

    def objective(trial: Any) -> float:
        kernel = trial.suggest_categorical("kernel", ["linear", "rbf", "poly", "sigmoid"])
        loss = (math.log10(trial.suggest_float("C", 1e-3, 1e3, log=True)) - 1.0) ** 2
        if kernel != "linear":
            loss += (math.log10(trial.suggest_float("gamma", 1e-5, 1.0, log=True)) + 2.0) ** 2
        if kernel == "poly":
            loss += trial.suggest_int("degree", 2, 5)
        return loss

    branches_found = 0
    for seed in (0, 1, 3):  # seeds whose warm-up meets a kernel for the first time after gamma is known
        independent = CountingRandom(seed=seed)
        study = optuna.create_study(sampler=CaliboSampler(seed=seed, independent_sampler=independent))
        with optuna_warnings(caplog):
            study.optimize(objective, n_trials=12)
        for number, name in independent.calls:
            before = [t for t in study.trials[:number] if name in t.params]
            kernel = study.trials[number].params["kernel"]
            assert not any(t.params["kernel"] == kernel for t in before), (seed, number, name)
            branches_found += bool(before)
    assert branches_found >= 3  # the case arose: a known child under a parent value new to it
    assert not [r for r in caplog.records if "sampled independently" in r.getMessage()]
