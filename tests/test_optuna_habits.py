"""The client follows Optuna wherever both have the concept, side by side with Optuna on the same call.

Each test makes the same call through ``optuna.create_study(...)`` and through a calibo study on a
live server, and checks the same observable behaviour: which exception type, which states, what
value. Where calibo departs from Optuna on purpose (a waiting trial whose configuration was since
evaluated), the test says what Optuna does and why calibo does otherwise. Then: short reprs of
every user-facing object of the client and the engine, and ``CaliboSampler``'s Optuna spellings
and what its studies' ``trials_dataframe()`` shows.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Iterator
from typing import Any

import httpx
import optuna
import pytest
from conftest import LiveServer, unique
from optuna.trial import TrialState as OptunaState

import calibo
from calibo import AsyncClient, Client, Study

optuna.logging.set_verbosity(optuna.logging.ERROR)

SPACE = {"x": {"type": "float", "low": -5.0, "high": 10.0}, "y": {"type": "float", "low": 0.0, "high": 15.0}}
QUICK = {"n_warmup": 100}  # quasi-random asks: no fit to wait for


def quadratic(trial: Any) -> float:
    x = trial.suggest_float("x", -5.0, 10.0)
    y = trial.suggest_float("y", 0.0, 15.0)
    return (x - 1.0) ** 2 + (y - 2.0) ** 2


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[Client]:
    with Client(live_server.url) as c:
        yield c


def ours(client: Client, **kw: Any) -> Study:
    return client.create_study(unique("habits"), SPACE, seed=0, settings=QUICK, **kw)


def theirs(**kw: Any) -> optuna.Study:
    return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), **kw)


def their_trial(study: optuna.Study) -> optuna.Trial:
    trial = study.ask()
    quadratic(trial)
    return trial


def raised(call: Any) -> type[BaseException] | None:
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e)
    return None


# ----------------------------------------------------------------------------- create_study
def test_direction_and_directions_together_are_refused_as_optuna_does(client: Client,
                                                                      live_server: LiveServer) -> None:
    both = {"direction": "maximize", "directions": ["minimize", "maximize"]}
    assert raised(lambda: optuna.create_study(**both)) is ValueError
    name = unique("both")
    assert raised(lambda: client.create_study(name, SPACE, **both)) is ValueError
    assert raised(lambda: client.create_study(name, SPACE, "minimize", directions=["minimize", "maximize"])) \
        is ValueError

    async def async_create() -> type[BaseException] | None:
        async with AsyncClient(live_server.url) as c:
            try:
                await c.create_study(name, SPACE, **both)
            except ValueError as e:
                return type(e)
            return None

    assert asyncio.run(async_create()) is ValueError
    assert client.list_studies(name=name) == []  # nothing was created
    # either one alone still works, as in Optuna
    assert client.create_study(name, SPACE, direction="maximize").direction == "maximize"
    multi = client.create_study(unique("multi"), SPACE, directions=["minimize", "maximize"])
    assert multi.directions == ["minimize", "maximize"]


# ----------------------------------------------------------------------------- tell
def test_tell_of_a_string_raises_type_error_and_leaves_the_trial_running(client: Client,
                                                                         live_server: LiveServer) -> None:
    other = theirs()
    trial = their_trial(other)
    assert raised(lambda: other.tell(trial, "0.1")) is TypeError
    assert other.trials[0].state == OptunaState.RUNNING

    mine = ours(client)
    t = mine.ask()
    assert raised(lambda: mine.tell(t, "0.1")) is TypeError
    assert mine.trial(t).state == "running"

    async def async_tell() -> tuple[type[BaseException] | None, str]:
        async with AsyncClient(live_server.url) as c:
            study = await c.load_study(mine.id)
            trial = await study.ask()
            try:
                await study.tell(trial, "0.1")
            except TypeError as e:
                return type(e), (await study.trial(trial)).state
            return None, (await study.trial(trial)).state

    assert asyncio.run(async_tell()) == (TypeError, "running")


def test_tell_of_a_bool_is_the_number_it_stands_for_as_in_optuna(client: Client) -> None:
    other = theirs()
    told = other.tell(their_trial(other), True)
    assert (told.state, told.values) == (OptunaState.COMPLETE, [1.0])
    mine = ours(client)
    record = mine.tell(mine.ask(), True)
    assert (record.state, record.value) == ("complete", 1.0)


def test_tell_of_nan_tells_the_trial_failed_with_a_warning(client: Client, live_server: LiveServer) -> None:
    other = theirs()
    with pytest.warns(UserWarning, match="nan"):
        told = other.tell(their_trial(other), float("nan"))
    assert told.state == OptunaState.FAIL and told.values is None

    mine = ours(client)
    t = mine.ask()
    with pytest.warns(UserWarning, match="nan") as warned:
        record = mine.tell(t, float("nan"))
    assert record.state == "failed" and record.value is None
    assert warned[0].filename == __file__  # the warning names the caller's line
    assert mine.trial(t).state == "failed"

    two = theirs(directions=["minimize", "maximize"])
    with pytest.warns(UserWarning, match="nan"):
        assert two.tell(their_trial(two), [1.0, float("nan")]).state == OptunaState.FAIL
    mine2 = client.create_study(unique("habits"), SPACE, directions=["minimize", "maximize"], settings=QUICK)
    with pytest.warns(UserWarning, match="nan"):
        assert mine2.tell(mine2.ask(), [1.0, float("nan")]).state == "failed"

    async def async_tell() -> str:
        async with AsyncClient(live_server.url) as c:
            study = await c.load_study(mine.id)
            trial = await study.ask()
            with pytest.warns(UserWarning, match="nan"):
                await study.tell(trial, float("nan"))
            return (await study.trial(trial)).state

    assert asyncio.run(async_tell()) == "failed"


# ----------------------------------------------------------------------------- optimize
def test_optimize_takes_optunas_arguments_in_optunas_positional_order(client: Client) -> None:
    def positional(sig: inspect.Signature) -> list[str]:
        return [p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]

    assert positional(inspect.signature(Study.optimize))[2:] == \
        positional(inspect.signature(optuna.Study.optimize))[2:]  # after (self, objective / func)
    assert positional(inspect.signature(calibo.AsyncStudy.optimize))[2:] == \
        positional(inspect.signature(optuna.Study.optimize))[2:]

    def failing(trial: Any) -> float:
        value = quadratic(trial)
        if trial.number == 1:
            raise ValueError("diverged")
        return value

    seen: dict[str, list[int]] = {"optuna": [], "calibo": []}
    other, mine = theirs(), ours(client)
    # n_trials, timeout, n_jobs, catch, callbacks, gc_after_trial, show_progress_bar: all positional
    other.optimize(failing, 3, 600.0, 1, (ValueError,), [lambda s, t: seen["optuna"].append(t.number)], True,
                   False)
    mine.optimize(failing, 3, 600.0, 1, (ValueError,), [lambda s, t: seen["calibo"].append(t.number)], True,
                  False)
    assert [t.state.name for t in other.trials] == [t.state.name for t in mine.trials()] == \
        ["COMPLETE", "FAIL", "COMPLETE"]
    assert seen["optuna"] == seen["calibo"] == [0, 1, 2]
    # calibo's own name for the workers is a keyword
    assert len(mine.optimize(quadratic, 2, n_workers=2)) == 2
    with pytest.raises(ValueError, match="n_workers or n_jobs"):
        mine.optimize(quadratic, 2, None, 2, n_workers=3)


# ----------------------------------------------------------------------------- best, states
def test_best_of_a_multi_objective_study_raises_runtime_error(client: Client, live_server: LiveServer) -> None:
    def two(trial: Any) -> tuple[float, float]:
        v = quadratic(trial)
        return v, -v

    other = theirs(directions=["minimize", "maximize"])
    other.optimize(two, n_trials=2)
    mine = client.create_study(unique("habits"), SPACE, directions=["minimize", "maximize"], settings=QUICK)
    mine.optimize(two, n_trials=2)
    for name in ("best_value", "best_trial", "best_params"):
        assert raised(lambda name=name: getattr(other, name)) is RuntimeError
        assert raised(lambda name=name: getattr(mine, name)) is RuntimeError, name
    assert len(mine.best_trials) >= 1  # the Pareto front is the answer, as in Optuna

    async def async_best() -> list[type[BaseException] | None]:
        async with AsyncClient(live_server.url) as c:
            study = await c.load_study(mine.id)
            out = []
            for name in ("best_value", "best_trial", "best_params"):
                try:
                    await getattr(study, name)()
                    out.append(None)
                except RuntimeError as e:
                    out.append(type(e))
            return out

    assert asyncio.run(async_best()) == [RuntimeError] * 3


def test_states_read_the_same_in_trials_and_in_the_data_frame(client: Client) -> None:
    def objective(trial: Any) -> float:
        value = quadratic(trial)
        if trial.number == 1:
            raise ValueError("diverged")
        if trial.number == 2:
            raise optuna.TrialPruned()
        return value

    other, mine = theirs(), ours(client)
    other.optimize(objective, n_trials=4, catch=(ValueError,))
    mine.optimize(objective, n_trials=4, catch=(ValueError,))
    their_running, our_running = other.ask(), mine.ask()
    assert their_running.number == our_running.number == 4
    their_df, our_df = other.trials_dataframe(), mine.trials_dataframe()
    assert list(their_df["state"]) == list(our_df["state"]) == ["COMPLETE", "FAIL", "PRUNED", "COMPLETE", "RUNNING"]
    # as in Optuna, the frame shows each trial's state by its name
    assert list(their_df["state"]) == [t.state.name for t in other.trials]
    assert list(our_df["state"]) == [t.state.name for t in mine.trials()]
    # and the state is the wire's word too, and the same member everywhere the client shows a trial
    trials = mine.trials()
    assert [t.state for t in trials] == ["complete", "failed", "pruned", "complete", "running"]
    assert trials[0].state is calibo.TrialState.COMPLETE and trials[1].state is calibo.TrialState.FAIL
    assert mine.trials(state=calibo.TrialState.PRUNED)[0].number == 2
    assert mine.tell(our_running, 1.0).state is calibo.TrialState.COMPLETE


# ----------------------------------------------------------------------------- origin
def test_a_trial_handed_out_carries_the_origin_its_record_has(client: Client) -> None:
    mine = ours(client)
    asked = mine.ask()
    assert asked.origin == mine.trial(asked).origin == "asked"
    mine.enqueue({"x": 1.0, "y": 2.0})
    queued = mine.ask()
    assert queued.origin == mine.trial(queued).origin == "enqueued"
    (batch,) = client.ask(mine.id)
    assert batch.origin == "asked"


# ----------------------------------------------------------------------------- enqueue, then add
def test_a_waiting_trial_whose_configuration_was_since_added_is_not_handed_out(http: httpx.Client) -> None:
    """Optuna hands the enqueued row out anyway (``enqueue_trial`` with or without
    ``skip_if_exists``, then ``add_trial`` of the same params: the next ask gets them again): its
    ``skip_if_exists`` is looked at only when enqueueing. A service shared by many workers checks
    it again when an ask would hand the trial out, so a configuration is not evaluated twice."""
    s = http.post("/v1/studies", json={"name": unique("enq"), "space": SPACE, "settings": QUICK}).json()
    base = f"/v1/studies/{s['id']}"
    kept = http.post(f"{base}/enqueue", json={"params": {"x": 1.0, "y": 2.0}}).json()
    again = http.post(f"{base}/enqueue", json={"params": {"x": 3.0, "y": 4.0}, "skip_if_exists": False}).json()
    other = http.post(f"{base}/enqueue", json={"params": {"x": 5.0, "y": 6.0}}).json()
    added = http.post(f"{base}/trials", json={"trials": [{"params": {"x": 1.0, "y": 2.0}, "value": 4.0},
                                                         {"params": {"x": 3.0, "y": 4.0}, "value": 8.0}]})
    assert added.status_code == 201, added.text
    (first,) = http.post(f"{base}/ask", json={}).json()["trials"]
    # the one enqueued with skip_if_exists (the default) is dropped: its configuration has a result
    assert first["id"] == again["id"] and first["params"] == {"x": 3.0, "y": 4.0}  # wanted again: kept
    assert http.get(f"{base}/trials/{kept['id']}").status_code == 404
    (second,) = http.post(f"{base}/ask", json={}).json()["trials"]
    assert second["id"] == other["id"]
    view = http.get(base).json()
    assert view["trials"]["waiting"] == 0 and view["trials"]["complete"] == 2
    # the same holds for a configuration a tell completed
    t = http.post(f"{base}/enqueue", json={"params": {"x": 7.0, "y": 8.0}}).json()
    (handed,) = http.post(f"{base}/ask", json={}).json()["trials"]
    assert handed["id"] == t["id"]
    http.post(f"{base}/trials/{handed['id']}/tell", json={"value": 1.0})
    later = http.post(f"{base}/enqueue", json={"params": {"x": 7.0, "y": 8.0}, "skip_if_exists": False}).json()
    dup = http.post(f"{base}/enqueue", json={"params": {"x": 7.0, "y": 8.0}})  # skipped: answers the told one
    assert dup.status_code == 200 and dup.json()["id"] == t["id"]
    (next_one,) = http.post(f"{base}/ask", json={}).json()["trials"]
    assert next_one["id"] == later["id"]


# ----------------------------------------------------------------------------- reprs
REPR_BOUND = 200


def _engine_objects() -> dict[str, Any]:
    from calibo.engine import EngineConfig, Optimizer, SearchSpace, StudyState
    from calibo.engine.prediction import Prediction

    space = {**SPACE, "k": {"type": "categorical", "choices": [f"choice-{i}" for i in range(40)]},
             **{f"p{i}": {"type": "int", "low": 0, "high": 10} for i in range(12)}}
    opt = Optimizer(SearchSpace.from_dict(space), seed=0, n_warmup=4, n_candidates=200)
    for _ in range(7):
        (s,) = opt.ask(1)
        opt.tell(s.params, (s.params["x"] - 1.0) ** 2 + s.params["y"], s.prediction)
    (s,) = opt.ask(1)
    prediction = Prediction.from_dict(s.prediction)
    state, record = StudyState.from_dict(opt.state.to_dict()).adapt(prediction, 1.0)
    dtaci = StudyState.initial(EngineConfig(adapter="dtaci"), 0)
    return {"Suggestion": s, "Prediction": prediction, "OutcomePrediction": prediction.outcomes[0],
            "Interval": prediction.outcomes[0].intervals[0], "Optimizer": opt, "SearchSpace": opt.space,
            "Param": opt.space.params[2], "EngineConfig": opt.config, "Snapshot": opt.snapshot,
            "StudyState": state, "ACIState": state.states[0], "DtACIState": dtaci.states[0],
            "CalibrationRecord": record, "OutcomeRecord": record.outcomes[0]}


def test_every_user_facing_object_has_a_short_repr(client: Client, live_server: LiveServer) -> None:
    objects = _engine_objects()
    study = client.create_study(unique("repr-" + "n" * 150), SPACE, seed=0, settings={"n_warmup": 4})
    study.optimize(quadratic, n_trials=6)
    study.enqueue({"x": 1.0})
    trial = study.ask()
    asked = study.ask()  # chosen on a prediction
    assert asked.prediction is not None
    record = study.tell(asked, 1.0)
    two = client.create_study(unique("repr"), SPACE, directions=["minimize", "maximize"], settings=QUICK)
    two.optimize(lambda t: (quadratic(t), -quadratic(t)), n_trials=3)
    try:
        client.get_study("no such study " + "x" * 240)
    except calibo.CaliboError as e:
        error = e

    async def async_objects() -> dict[str, Any]:
        async with AsyncClient(live_server.url) as c:
            return {"AsyncClient": c, "AsyncStudy": await c.load_study(study.id)}

    seen: dict[str, Any] = {}

    def objective(t: Any) -> float:
        seen["SuggestTrial"] = t
        return quadratic(t)

    study.optimize(objective, n_trials=1)
    objects.update({"Client": client, "Study": study, "Trial": asked, "Trial (enqueued)": trial,
                    "TrialRecord": record, "ParetoFront": two.pareto(), "CaliboError": error,
                    **asyncio.run(async_objects())})
    # SuggestTrial is the params dict an objective gets, and shows as that dict (its own tests hold it)
    assert repr(seen["SuggestTrial"]) == repr(dict(seen["SuggestTrial"]))
    too_long = {name: len(repr(obj)) for name, obj in objects.items() if len(repr(obj)) > REPR_BOUND}
    assert not too_long, too_long
    # what identifies each one is shown
    assert f"id={record.id}" in repr(record) and "state='complete'" in repr(record)
    assert f"id={study.id}" in repr(study) and live_server.url in repr(client)
    assert "mean=" in repr(objects["Suggestion"]) and "'x'" in repr(objects["Suggestion"])
    assert re.fullmatch(r"Snapshot\(n_obs=7, method='cv\+', surrogate='qgp', candidates=\(\d+, 15\), .*\)",
                        repr(objects["Snapshot"]))


# ----------------------------------------------------------------------------- CaliboSampler
def test_the_sampler_takes_optunas_n_startup_trials() -> None:
    from calibo.optuna import CaliboSampler

    for n in (0, 1):  # Optuna's samplers take any count; the engine's surrogate needs 4 results at least
        optuna.samplers.TPESampler(n_startup_trials=n)
        sampler = CaliboSampler(seed=0, n_startup_trials=n)
        study = optuna.create_study(sampler=sampler)
        study.optimize(quadratic, n_trials=6)
        assert len(study.trials) == 6 and sampler.config.warmup_least == 4
    assert CaliboSampler(n_startup_trials=7).config.n_warmup == 7
    assert CaliboSampler(n_startup_trials=7, settings={"n_warmup": 7}).config.n_warmup == 7
    with pytest.raises(ValueError, match="n_startup_trials"):
        CaliboSampler(n_startup_trials=-1)
    with pytest.raises(ValueError, match="n_startup_trials"):
        CaliboSampler(n_startup_trials=5000)
    with pytest.raises(ValueError, match=r"n_startup_trials.*n_warmup"):
        CaliboSampler(n_startup_trials=5, settings={"n_warmup": 8})


def test_the_data_frame_of_a_sampler_study_shows_no_sampler_state() -> None:
    from calibo.optuna import CaliboSampler
    from calibo.optuna._space import Encoding

    sampler = CaliboSampler(seed=0, n_startup_trials=4)
    study = optuna.create_study(sampler=sampler)
    study.optimize(quadratic, n_trials=10)
    df = study.trials_dataframe()
    assert not [c for c in df.columns if "calibo" in c], list(df.columns)
    widths = {c: max(len(str(v)) for v in df[c]) for c in df.columns}
    assert max(widths.values()) <= 100, widths
    # the sampler still modelled the study on the predictions it kept, and a fresh one (another
    # process on the same storage, say) reads them back to the same calibration state
    (key, (numbers, state)), = sampler._adapted.items()
    assert any(s.steps for s in state.states)
    space = {"x": optuna.distributions.FloatDistribution(-5.0, 10.0),
             "y": optuna.distributions.FloatDistribution(0.0, 15.0)}
    complete = [t for t in study.trials if t.number in numbers]
    assert CaliboSampler(seed=0, n_startup_trials=4)._states(study, key[:2], Encoding(space), complete) == state
