"""Suggest-style objectives: the trial object ``optimize`` hands an objective.

It is the params ``dict`` calibo objectives always got and Optuna's trial at once:
``suggest_float / suggest_int / suggest_categorical`` return the asked values after checking
the call against the study's space (a mismatch is the objective's bug: told failed and raised
whatever ``catch`` says), ``report(value, step)`` / ``should_prune()`` and ``TrialPruned``
(calibo's or Optuna's) prune, ``set_user_attr`` goes with the tell. Offline tests first, then
against a live server, side by side with Optuna where Optuna runs the same objective.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import optuna
import pytest
from conftest import LiveServer, unique

from calibo import (
    AsyncClient,
    AsyncSuggestTrial,
    Client,
    Reporter,
    SpaceMismatch,
    Study,
    SuggestTrial,
    Trial,
    TrialPruned,
)
from calibo._suggest import StudySpace

optuna.logging.set_verbosity(optuna.logging.ERROR)

MIXED = {"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
         "depth": {"type": "int", "low": 1, "high": 8},
         "kind": {"type": "categorical", "choices": ["a", "b", "c"]}}
KERNELS = {"kernel": {"type": "categorical", "choices": ["linear", "rbf"]},
           "gamma": {"type": "float", "low": 0.01, "high": 10.0, "log": True,
                     "condition": {"parent": "kernel", "values": ["rbf"]}},
           "scale": {"type": "float", "low": 0.0, "high": 1.0,
                     "condition": {"parent": "gamma_kind", "values": ["wide"]}},
           "gamma_kind": {"type": "categorical", "choices": ["wide", "narrow"],
                          "condition": {"parent": "kernel", "values": ["rbf"]}}}
QUICK = {"n_warmup": 100}


def mixed(trial: Any) -> float:
    """An objective written for Optuna."""
    lr = trial.suggest_float("lr", 1e-4, 1.0, log=True)
    depth = trial.suggest_int("depth", 1, 8)
    kind = trial.suggest_categorical("kind", ["a", "b", "c"])
    return (math.log10(lr) + 2) ** 2 + (depth - 3) ** 2 / 10 + {"a": 0.5, "b": 0.0, "c": 1.0}[kind]


def offline(params: dict[str, Any], space: dict[str, Any] = MIXED,
            prune: bool = False) -> tuple[SuggestTrial, list[tuple[int, float]]]:
    sent: list[tuple[int, float]] = []
    asked = Trial(id=11, number=4, params=params, prediction=None, study_id=1, user_attrs={"host": "h1"})

    def send(step: int, value: float) -> bool:
        sent.append((step, value))
        return prune

    return SuggestTrial(asked, StudySpace(space), Reporter(asked, send)), sent


# ----------------------------------------------------------------------------- offline
def test_the_trial_is_the_params_dict_the_objective_always_got() -> None:
    trial, _ = offline({"lr": 0.01, "depth": 3, "kind": "b"})
    assert isinstance(trial, dict) and trial == {"lr": 0.01, "depth": 3, "kind": "b"}
    assert trial["depth"] == 3 and dict(**trial)["kind"] == "b" and repr(trial) == repr(dict(trial))
    assert json.loads(json.dumps(trial)) == trial
    for copied in (copy.copy(trial), copy.deepcopy(trial), pickle.loads(pickle.dumps(trial))):
        assert type(copied) is dict and copied == trial
    assert (trial.id, trial.number) == (11, 4)
    assert trial.params == {}  # Optuna's trial.params: what was suggested so far
    assert trial.suggest_int("depth", 1, 8) == 3 and trial.params == {"depth": 3}
    assert trial.suggest_float("lr", 1e-4, 1.0, log=True) == 0.01
    assert trial.suggest_categorical("kind", ("a", "b", "c")) == "b"  # a tuple of the same choices
    assert trial.suggest_int("depth", 1, 8) == 3  # again: the same value
    assert trial.params == {"depth": 3, "lr": 0.01, "kind": "b"}


def test_report_takes_optunas_argument_order_and_should_prune_is_the_last_answer() -> None:
    trial, sent = offline({"lr": 0.01, "depth": 3, "kind": "b"}, prune=True)
    assert trial.should_prune() is False  # before any report
    assert trial.report(0.75, 2) is True
    assert sent == [(2, 0.75)] and trial.should_prune() is True


def test_user_attrs_set_on_the_trial() -> None:
    trial, _ = offline({"lr": 0.01, "depth": 3, "kind": "b"})
    trial.set_user_attr("epochs", 7)
    assert trial.user_attrs == {"host": "h1", "epochs": 7} and trial.told_attrs() == {"epochs": 7}
    with pytest.raises(TypeError):
        trial.set_user_attr("model", object())  # not JSON


@pytest.mark.parametrize(("call", "words"), [
    (lambda t: t.suggest_float("momentum", 0.0, 1.0), ["no parameter 'momentum'", "'lr', 'depth', 'kind'"]),
    (lambda t: t.suggest_int("lr", 1, 8), ["'lr'", "int in [1, 8]", "float in [0.0001, 1.0], log"]),
    (lambda t: t.suggest_float("depth", 1, 8), ["'depth'", "float in [1, 8]", "int in [1, 8]"]),
    (lambda t: t.suggest_float("lr", 1e-3, 1.0, log=True), ["'lr'", "float in [0.001, 1.0], log"]),
    (lambda t: t.suggest_float("lr", 1e-4, 1.0), ["'lr'", "float in [0.0001, 1.0]", "log"]),
    (lambda t: t.suggest_int("depth", 1, 9), ["'depth'", "int in [1, 9]", "int in [1, 8]"]),
    (lambda t: t.suggest_int("depth", 1, 8, step=2), ["'depth'", "step 2", "no step"]),
    (lambda t: t.suggest_float("lr", 1e-4, 1.0, step=0.1), ["'lr'", "step 0.1", "no step"]),
    (lambda t: t.suggest_categorical("kind", ["c", "b", "a"]), ["'kind'", "['c', 'b', 'a']", "['a', 'b', 'c']"]),
    (lambda t: t.suggest_categorical("depth", [1, 2]), ["'depth'", "categorical [1, 2]", "int in [1, 8]"]),
])
def test_a_call_that_does_not_match_the_space_names_the_parameter_and_both_definitions(call, words) -> None:
    trial, _ = offline({"lr": 0.01, "depth": 3, "kind": "b"})
    with pytest.raises(SpaceMismatch) as e:
        call(trial)
    for word in words:
        assert word in str(e.value)
    assert isinstance(e.value, ValueError) and e.value.param in str(e.value)
    assert trial.params == {}


def test_an_inactive_conditional_parameter_says_why() -> None:
    linear, _ = offline({"kernel": "linear"}, KERNELS)
    assert linear.suggest_categorical("kernel", ["linear", "rbf"]) == "linear"
    with pytest.raises(SpaceMismatch, match=r"'gamma' is inactive in this trial.*'kernel' is one of \['rbf'\].*"
                                            r"this trial's 'kernel' is 'linear'"):
        linear.suggest_float("gamma", 0.01, 10.0, log=True)
    with pytest.raises(SpaceMismatch, match="'scale' is inactive.*its parent 'gamma_kind' is itself inactive"):
        linear.suggest_float("scale", 0.0, 1.0)
    rbf, _ = offline({"kernel": "rbf", "gamma": 0.5, "gamma_kind": "narrow"}, KERNELS)
    assert rbf.suggest_float("gamma", 0.01, 10.0, log=True) == 0.5
    with pytest.raises(SpaceMismatch, match="this trial's 'gamma_kind' is 'narrow'"):
        rbf.suggest_float("scale", 0.0, 1.0)


def test_the_space_is_read_once_and_only_when_a_suggest_call_needs_it() -> None:
    reads = []
    space = StudySpace(None, lambda: reads.append(1) or MIXED)
    asked = Trial(id=1, number=0, params={"lr": 0.1, "depth": 2, "kind": "a"}, prediction=None, study_id=1)
    trials = [SuggestTrial(asked, space, None) for _ in range(3)]
    assert trials[0]["lr"] == 0.1 and reads == []  # params[...] reads nothing
    threads = [threading.Thread(target=t.suggest_int, args=("depth", 1, 8)) for t in trials]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reads == [1]


# ----------------------------------------------------------------------------- live
@pytest.fixture
def client(live_server: LiveServer) -> Iterator[Client]:
    with Client(live_server.url) as c:
        yield c


def test_an_objective_written_for_optuna_runs_unchanged(client: Client) -> None:
    returned: dict[int, tuple[dict[str, Any], float]] = {}

    def objective(trial: Any) -> float:
        value = mixed(trial)
        returned[trial.number] = (dict(trial.params), value)
        return value

    other = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    other.optimize(objective, n_trials=6)
    assert [t.state for t in other.trials] == [optuna.trial.TrialState.COMPLETE] * 6
    study = client.create_study(unique("suggest"), MIXED, seed=0, settings=QUICK)
    returned.clear()
    done = study.optimize(objective, n_trials=6, n_workers=2)
    assert sorted(t.number for t in done) == list(range(6))
    for t in done:
        params, value = returned[t.number]
        assert t.state == "complete" and t.params == params and t.value == pytest.approx(value)
        assert isinstance(params["depth"], int) and isinstance(params["lr"], float)


def test_a_mismatch_is_told_failed_and_raised_whatever_catch_says(client: Client) -> None:
    study = client.create_study(unique("suggest"), MIXED, seed=0, settings=QUICK)

    def objective(trial: Any) -> float:
        if trial.number == 1:
            return trial.suggest_float("momentum", 0.0, 1.0)
        return mixed(trial)

    with pytest.raises(SpaceMismatch, match="no parameter 'momentum'"):
        study.optimize(objective, n_trials=5, catch=(ValueError, Exception))
    trials = study.trials()
    assert [t.state for t in trials] == ["complete", "failed"]
    assert trials[1].user_attrs["fail_reason"].startswith("SpaceMismatch: suggest_float('momentum'")


def test_conditional_space_as_optuna_writes_it(client: Client) -> None:
    def objective(trial: Any) -> float:
        kernel = trial.suggest_categorical("kernel", ["linear", "rbf"])
        if kernel == "linear":
            return 1.0
        gamma = trial.suggest_float("gamma", 0.01, 10.0, log=True)
        if trial.suggest_categorical("gamma_kind", ["wide", "narrow"]) == "wide":
            return abs(math.log10(gamma)) + trial.suggest_float("scale", 0.0, 1.0)
        return abs(math.log10(gamma))

    other = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    other.optimize(objective, n_trials=10)
    study = client.create_study(unique("suggest"), KERNELS, seed=0, settings=QUICK)
    study.enqueue({"kernel": "linear"})  # one linear trial for sure
    done = study.optimize(objective, n_trials=10)
    assert {t.state for t in done} == {"complete"}
    assert {t.params["kernel"] for t in done} == {"linear", "rbf"}
    for t in done:  # what the objective suggested is what was told
        assert ("gamma" in t.params) == (t.params["kernel"] == "rbf")

    def always_gamma(trial: Any) -> float:  # gamma suggested whatever the kernel: the objective's bug
        trial.suggest_categorical("kernel", ["linear", "rbf"])
        return trial.suggest_float("gamma", 0.01, 10.0, log=True)

    study.optimize(always_gamma, n_trials=2, catch=ValueError)  # rbf trials: gamma is active
    study.enqueue({"kernel": "linear"}, skip_if_exists=False)
    with pytest.raises(SpaceMismatch, match="'gamma' is inactive in this trial") as e:
        study.optimize(always_gamma, n_trials=5, catch=ValueError)
    assert e.value.param == "gamma"
    last = study.trials()[-1]
    assert last.params == {"kernel": "linear"} and last.state == "failed"
    assert "running" not in {t.state for t in study.trials()}


def curve_objective(seen: dict[int, float], pruned_with: type[BaseException]):
    def objective(trial: Any) -> float:
        x1 = trial.suggest_float("x1", -5.0, 10.0)
        x2 = trial.suggest_float("x2", 0.0, 15.0)
        final = (x1 - 3) ** 2 / 50 + (x2 - 2) ** 2 / 100
        value = final
        for epoch in range(1, 10):
            value = final + 1.0 / epoch
            trial.report(value, epoch)  # Optuna's order: value, step
            seen[trial.number] = value
            if trial.should_prune():
                raise pruned_with()
        return value

    return objective


BRANIN = {"x1": {"type": "float", "low": -5, "high": 10}, "x2": {"type": "float", "low": 0, "high": 15}}


@pytest.mark.parametrize("pruned_with", [optuna.TrialPruned, TrialPruned], ids=["optuna", "calibo"])
def test_report_should_prune_and_trial_pruned(client: Client, pruned_with: type[BaseException]) -> None:
    other = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1),
                                pruner=optuna.pruners.SuccessiveHalvingPruner())
    other.optimize(curve_objective({}, optuna.TrialPruned), n_trials=12, catch=())
    their_states = [t.state for t in other.trials]
    assert optuna.trial.TrialState.PRUNED in their_states

    seen: dict[int, float] = {}
    study = client.create_study(unique("suggest"), BRANIN, seed=1, pruner={"name": "sh", "max_resource": 9})
    done = study.optimize(curve_objective(seen, pruned_with), n_trials=12, n_workers=3)
    states = [t.state for t in done]
    assert len(done) == 12 and states.count("pruned") >= 3 and "complete" in states
    for t in done:  # a pruned trial is told its last reported value
        assert t.value == pytest.approx(seen[t.number])


def test_user_attrs_set_by_the_objective_go_with_the_tell(client: Client) -> None:
    study = client.create_study(unique("suggest"), MIXED, seed=0, settings=QUICK)

    def objective(trial: Any) -> float:
        trial.set_user_attr("depth_seen", trial.suggest_int("depth", 1, 8))
        if trial.number == 1:
            raise ArithmeticError("diverged")
        return 1.0

    done = study.optimize(objective, n_trials=2, catch=ArithmeticError)
    assert done[0].user_attrs == {"depth_seen": done[0].params["depth"]}
    assert done[1].state == "failed"
    assert done[1].user_attrs == {"depth_seen": done[1].params["depth"], "fail_reason": "ArithmeticError: diverged"}


def test_two_parameter_objectives_get_the_trial_and_a_reporter(client: Client) -> None:
    study = client.create_study(unique("suggest"), MIXED, seed=0, settings=QUICK)
    kinds = []

    def objective(params: Any, reporter: Any) -> float:
        kinds.append((type(params), type(reporter)))
        reporter.report(0, 2.0)
        return params["lr"] + params.suggest_int("depth", 1, 8)

    done = study.optimize(objective, n_trials=2)
    assert kinds == [(SuggestTrial, Reporter)] * 2
    assert all(t.value == pytest.approx(t.params["lr"] + t.params["depth"]) for t in done)


class CountingTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.study_reads = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.count("/") == 3:  # /v1/studies/{id}
            self.study_reads += 1
        return super().handle_request(request)


def test_a_study_given_by_id_has_its_space_read_once(live_server: LiveServer) -> None:
    transport = CountingTransport()
    with Client(live_server.url, transport=transport) as c:
        study = c.create_study(unique("suggest"), MIXED, seed=0, settings=QUICK)
        assert len(c.optimize(study.id, lambda p: p["lr"], n_trials=3)) == 3
        assert transport.study_reads == 0  # params[...] only: nothing read
        done = c.optimize(study.id, mixed, n_trials=4, n_workers=2)
        assert transport.study_reads == 1 and {t["state"] for t in done} == {"complete"}
        c.optimize(study, mixed, n_trials=2)  # a handle knows its space
        assert transport.study_reads == 1


# ----------------------------------------------------------------------------- async
def test_async_objectives_suggest_and_report(live_server: LiveServer) -> None:
    async def main() -> None:
        async with AsyncClient(live_server.url) as c:
            study = await c.create_study(unique("suggest"), BRANIN, seed=1, pruner={"name": "sh", "max_resource": 9})
            seen: dict[int, float] = {}
            kinds = set()

            async def objective(trial: Any) -> float:
                kinds.add(type(trial))
                x1 = trial.suggest_float("x1", -5.0, 10.0)
                x2 = trial.suggest_float("x2", 0.0, 15.0)
                final = (x1 - 3) ** 2 / 50 + (x2 - 2) ** 2 / 100
                value = final
                for epoch in range(1, 10):
                    value = final + 1.0 / epoch
                    await trial.report(value, epoch)
                    seen[trial.number] = value
                    if trial.should_prune():
                        raise optuna.TrialPruned()
                    await asyncio.sleep(0)
                return value

            done = await c.optimize(study.id, objective, n_trials=12, n_workers=3)  # by id: space read first
            assert kinds == {AsyncSuggestTrial}
            states = [t["state"] for t in done]
            assert len(done) == 12 and states.count("pruned") >= 3 and "complete" in states
            assert all(t["value"] == pytest.approx(seen[t["number"]]) for t in done)

            plain_kinds = set()

            def plain(trial: Any) -> float:  # in a thread: the blocking trial, its report sent on the loop
                plain_kinds.add(type(trial))
                trial.report(1.0, 0)
                return trial.suggest_float("x1", -5.0, 10.0)

            more = await study.optimize(plain, n_trials=2)
            assert plain_kinds == {SuggestTrial} and [t.value for t in more] == [t.params["x1"] for t in more]

            with pytest.raises(SpaceMismatch, match="no parameter 'x3'"):
                await study.optimize(lambda t: t.suggest_float("x3", 0, 1), n_trials=3, catch=ValueError)
            assert (await study.trials())[-1].state == "failed"

    asyncio.run(main())


def test_the_trial_knows_its_study(client: Client) -> None:
    study = client.create_study(unique("suggest"), MIXED, seed=0, settings=QUICK)
    studies = []
    study.optimize(lambda t: studies.append(t.study) or 0.0, n_trials=1)
    assert studies == [study]
    client.optimize(study.id, lambda t: studies.append(t.study) or 0.0, n_trials=1)
    assert isinstance(studies[1], Study) and studies[1].id == study.id
