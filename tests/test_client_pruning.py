"""Pruning in the HTTP client: ``report``, ``TrialPruned`` and the reporters that
``optimize`` hands two-parameter objectives, against httpx.MockTransport.

``PruningServer`` speaks the wire contract of ``POST .../trials/{tid}/report``
(``{"step", "value"}`` -> ``{"should_prune"}``, idempotent per step, 409 for
another value at a reported step or a finished trial) in memory.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from test_client import Script, async_client, error, sync_client, unavailable

from calibo import (
    AsyncReporter,
    CaliboError,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    Reporter,
    Trial,
    TrialPruned,
)
from calibo._optimize import is_coroutine_callable, wants_reporter

SPACE = {"x": {"type": "float", "low": 0.0, "high": 100.0}}


class PruningServer:
    """Studies, ask, report, tell and heartbeat in memory. Thread-safe.

    ``prune(trial_id, step, value)`` decides each first report of a step; a step
    reported again with the same value answers the recorded decision.
    """

    def __init__(self, prune: Callable[[int, int, float], bool] = lambda t, s, v: False) -> None:
        self.prune = prune
        self.lock = threading.Lock()
        self.studies: dict[int, dict[str, Any]] = {}
        self.trials: dict[int, dict[str, Any]] = {}
        self.reports: list[dict[str, Any]] = []  # every report request, in order
        self.decisions: dict[tuple[int, int], tuple[float, bool]] = {}
        self.tells: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            return self.route(request)

    def route(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.strip("/").split("/")
        body = json.loads(request.content) if request.content else {}
        if parts == ["v1", "studies"]:
            sid = len(self.studies) + 1
            self.studies[sid] = {"id": sid, **body}
            return httpx.Response(201, json=self.studies[sid])
        sid = int(parts[2])
        if parts[3:] == ["ask"]:
            tid = len(self.trials) + 1
            self.trials[tid] = {
                "id": tid,
                "study_id": sid,
                "number": tid - 1,
                "state": "running",
                "params": {"x": float(tid)},
                "value": None,
            }
            made = {"id": tid, "number": tid - 1, "params": {"x": float(tid)}, "prediction": None}
            return httpx.Response(200, json={"trials": [made]})
        trial = self.trials[int(parts[4])]
        action = parts[5]
        if action == "heartbeat":
            return httpx.Response(204)
        if action == "report":
            self.reports.append({"trial": trial["id"], **body})
            if trial["state"] != "running":
                return error(409, "trial_finished", "the trial is finished")
            key = (trial["id"], body["step"])
            if key in self.decisions:
                value, decision = self.decisions[key]
                if value != body["value"]:
                    return error(409, "conflict", "step reported with another value", "value")
            else:
                decision = self.prune(trial["id"], body["step"], body["value"])
                self.decisions[key] = (body["value"], decision)
            return httpx.Response(200, json={"should_prune": decision})
        assert action == "tell"
        self.tells.append({"trial": trial["id"], **body})
        trial.update(state=body.get("state", "complete"), value=body.get("value"))
        return httpx.Response(200, json=dict(trial))

    def reports_of(self, trial_id: int) -> list[tuple[int, float]]:
        return [(r["step"], r["value"]) for r in self.reports if r["trial"] == trial_id]


def curve(x: float, epoch: int) -> float:
    """A learning curve: falls with the epochs, higher for larger x."""
    return x / 10 + 1 / (epoch + 1)


def prune_even_trials_from_step_2(trial_id: int, step: int, value: float) -> bool:
    return trial_id % 2 == 0 and step >= 2


# --------------------------------------------------------------------------- report
def test_report_sends_step_and_value_and_returns_should_prune() -> None:
    handler = Script(
        httpx.Response(200, json={"should_prune": True}),
        httpx.Response(200, json={"should_prune": False}),
    )
    trial = Trial(id=8, number=0, params={}, prediction=None, study_id=5)
    with sync_client(handler) as calibo:
        assert calibo.report(5, 8, 3, 0.25) is True
        assert calibo.report({"id": 5}, trial, 0, 2) is False
    seen = [(r.method, r.url.path, r.content) for r in handler.requests]
    assert seen == [
        ("POST", "/v1/studies/5/trials/8/report", b'{"step":3,"value":0.25}'),
        ("POST", "/v1/studies/5/trials/8/report", b'{"step":0,"value":2.0}'),
    ]


@pytest.mark.parametrize(
    ("status", "code", "field", "cls"),
    [
        (409, "conflict", "value", Conflict),
        (409, "trial_finished", None, Conflict),
        (422, "invalid_request", "value", InvalidRequest),
        (422, "invalid_request", "step", InvalidRequest),
    ],
)
def test_report_errors_are_typed_with_their_field(
    status: int, code: str, field: str | None, cls: type[CaliboError]
) -> None:
    handler = Script(error(status, code, "refused", field))
    with sync_client(handler) as calibo, pytest.raises(cls) as info:
        calibo.report(1, 2, 4, 0.5)
    assert (info.value.status, info.value.code, info.value.field) == (status, code, field)
    assert handler.calls == 1  # an answer, not retried


def test_report_rejects_bad_arguments_without_a_request() -> None:
    handler = Script(httpx.Response(200, json={"should_prune": False}))
    with sync_client(handler) as calibo:
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(ValueError, match="finite"):
                calibo.report(1, 2, 0, value)
        with pytest.raises(ValueError, match=">= 0"):
            calibo.report(1, 2, -1, 0.5)
        for step in (True, 1.5, "3", None):
            with pytest.raises(TypeError):
                calibo.report(1, 2, step, 0.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            calibo.report(1, 2, 0, False)
    assert handler.calls == 0


def test_report_is_retried_like_any_idempotent_call() -> None:
    handler = Script(
        unavailable(),
        httpx.ReadError("reset"),
        httpx.RemoteProtocolError("hung up"),
        httpx.Response(200, json={"should_prune": True}),
    )
    with sync_client(handler) as calibo:
        assert calibo.report(1, 2, 7, 0.125) is True
    assert handler.calls == 4
    assert handler.bodies() == [{"step": 7, "value": 0.125}] * 4
    down = Script(httpx.Response(200, json={"should_prune": False}), httpx.ConnectError("refused"))
    with sync_client(down) as calibo, pytest.raises(ConnectionFailed):
        calibo.report(1, 2, 6, 0.125)  # an answer first: what follows is an outage, not a wrong URL
        calibo.report(1, 2, 7, 0.125)
    assert down.calls == 5


def test_report_answer_without_a_bool_is_an_invalid_response() -> None:
    for answer in ({}, {"should_prune": "yes"}, {"should_prune": 1}):
        with sync_client(Script(httpx.Response(200, json=answer))) as calibo:
            with pytest.raises(CaliboError) as info:
                calibo.report(1, 2, 0, 1.0)
        assert info.value.code == "invalid_response"


def test_create_study_sends_pruner_only_when_given() -> None:
    handler = Script(httpx.Response(201, json={"id": 1}))
    options = {"name": "sh+", "min_resource": 1, "max_resource": 27, "reduction_factor": 3}
    with sync_client(handler) as calibo:
        calibo.create_study("a", SPACE)
        calibo.create_study("b", SPACE, pruner="median")
        calibo.create_study("c", SPACE, pruner=options)
        with pytest.raises(TypeError):
            calibo.create_study("d", SPACE, pruner=3)  # type: ignore[arg-type]
    bodies = handler.bodies()
    assert "pruner" not in bodies[0]
    assert bodies[1]["pruner"] == "median"
    assert bodies[2]["pruner"] == options
    assert handler.calls == 3


# --------------------------------------------------------------------------- reporters
def test_reporter_remembers_the_last_report_it_got_an_answer_for() -> None:
    trial = Trial(id=1, number=0, params={}, prediction=None, study_id=1)
    answers = iter([False, True])

    def send(step: int, value: float) -> bool:
        if step == 9:
            raise Conflict("another value", status=409, code="conflict", field="value")
        return next(answers)

    reporter = Reporter(trial, send)
    assert (reporter.last, reporter.should_prune) == (None, False)
    assert reporter.report(0, 3) is False
    assert reporter.last == (0, 3.0)
    assert reporter.report(1, 2.5) is True
    with pytest.raises(Conflict):
        reporter.report(9, 1.0)
    assert (reporter.last, reporter.should_prune) == ((1, 2.5), True)
    assert reporter.trial is trial
    assert "should_prune=True" in repr(reporter)


def test_wants_reporter_reads_the_signature() -> None:
    def one(params: dict[str, Any]) -> float:
        return 0.0

    def two(params: dict[str, Any], reporter: Reporter) -> float:
        return 0.0

    def defaulted(params: dict[str, Any], scale: float = 2.0) -> float:
        return 0.0

    def star(params: dict[str, Any], *rest: Any) -> float:
        return 0.0

    class Objective:
        def __call__(self, params: dict[str, Any], reporter: Reporter) -> float:
            return 0.0

        def method(self, params: dict[str, Any]) -> float:
            return 0.0

    def three(params: dict[str, Any], reporter: Reporter, extra: int) -> float:
        return 0.0

    assert not wants_reporter(one)
    assert not wants_reporter(lambda p: 0.0)
    assert not wants_reporter(defaulted)
    assert not wants_reporter(star)
    assert not wants_reporter(Objective().method)
    assert not wants_reporter(functools.partial(two, reporter=None))
    assert not wants_reporter(abs)
    assert wants_reporter(two)
    assert wants_reporter(lambda p, r: 0.0)
    assert wants_reporter(Objective())
    assert wants_reporter(functools.partial(three, extra=1))


# --------------------------------------------------------------------------- optimize
def test_optimize_tells_pruned_with_the_last_reported_value() -> None:
    server = PruningServer(prune_even_trials_from_step_2)
    seen: list[dict[str, Any]] = []
    reporters: dict[int, Reporter] = {}

    def objective(params: dict[str, Any], reporter: Reporter) -> float:
        reporters[int(params["x"])] = reporter
        assert reporter.trial.params == params
        for epoch in range(5):
            loss = curve(params["x"], epoch)
            if reporter.report(epoch, loss):
                assert reporter.should_prune
                raise TrialPruned(f"pruned at epoch {epoch}")
        return loss

    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE, pruner="sh+")
        results = calibo.optimize(
            study,
            objective,
            n_trials=6,
            n_workers=2,
            callback=seen.append,
            heartbeat_interval=None,
        )
    assert server.studies[1]["pruner"] == "sh+"
    states = {r["id"]: r["state"] for r in results}
    assert states == {t: "pruned" if t % 2 == 0 else "complete" for t in range(1, 7)}
    assert sorted(v["id"] for v in seen if v["state"] == "pruned") == [2, 4, 6]
    for tid in range(1, 7):
        x = float(tid)
        if tid % 2 == 0:
            assert server.reports_of(tid) == [(e, curve(x, e)) for e in range(3)]
            tell = {"trial": tid, "state": "pruned", "value": curve(x, 2)}
            assert reporters[tid].last == (2, curve(x, 2))
        else:
            assert server.reports_of(tid) == [(e, curve(x, e)) for e in range(5)]
            tell = {"trial": tid, "value": curve(x, 4)}
            assert not reporters[tid].should_prune
        assert tell in server.tells
    assert len(server.tells) == 6


def test_optimize_trial_pruned_before_any_report_and_whatever_catch_says() -> None:
    server = PruningServer()

    def objective(params: dict[str, Any], reporter: Reporter) -> float:
        if params["x"] == 2:
            raise TrialPruned()
        if params["x"] == 3:
            raise ArithmeticError("diverged")
        return params["x"]

    def plain(params: dict[str, Any]) -> float:
        raise TrialPruned()  # a one-parameter objective may prune too

    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        results = calibo.optimize(
            study, objective, n_trials=4, catch=(Exception,), heartbeat_interval=None
        )
        more = calibo.optimize(study, plain, n_trials=1, heartbeat_interval=None)
    assert [r["state"] for r in results] == ["complete", "pruned", "failed", "complete"]
    assert [r["state"] for r in more] == ["pruned"]
    assert server.tells == [
        {"trial": 1, "value": 1.0},
        {"trial": 2, "state": "pruned"},
        {"trial": 3, "state": "failed", "user_attrs": {"fail_reason": "ArithmeticError: diverged"}},
        {"trial": 4, "value": 4.0},
        {"trial": 5, "state": "pruned"},
    ]
    assert server.reports == []


def test_optimize_tells_the_value_of_an_objective_that_returns_despite_should_prune() -> None:
    server = PruningServer(lambda t, s, v: True)

    def stubborn(params: dict[str, Any], reporter: Reporter) -> float:
        assert reporter.report(0, 5.0) is True
        return 4.0

    with sync_client(server) as calibo:
        results = calibo.optimize(
            calibo.create_study("s", SPACE), stubborn, n_trials=1, heartbeat_interval=None
        )
    assert results[0]["state"] == "complete"
    assert server.tells == [{"trial": 1, "value": 4.0}]


def test_optimize_one_parameter_objectives_unchanged() -> None:
    server = PruningServer(lambda t, s, v: True)

    def objective(params: dict[str, Any], scale: float = 2.0) -> float:
        return params["x"] * scale

    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        results = calibo.optimize(study, objective, n_trials=3, n_workers=2)
        results += calibo.optimize(study, lambda p: math.nan, n_trials=1)
    assert sorted(r["value"] for r in results[:3]) == [2.0, 4.0, 6.0]
    assert results[3]["state"] == "failed"
    assert server.reports == []
    assert {r["state"] for r in results[:3]} == {"complete"}


def test_optimize_report_error_in_the_objective_fails_the_trial() -> None:
    server = PruningServer()

    def objective(params: dict[str, Any], reporter: Reporter) -> float:
        reporter.report(0, 1.0)
        reporter.report(0, 2.0)  # another value at a reported step: 409
        return 0.0

    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        with pytest.raises(Conflict) as info:
            calibo.optimize(study, objective, n_trials=3, heartbeat_interval=None)
        assert info.value.field == "value"
        results = calibo.optimize(
            study, objective, n_trials=2, catch=(Conflict,), heartbeat_interval=None
        )
    assert server.tells[0]["state"] == "failed"
    assert server.tells[0]["user_attrs"]["fail_reason"].startswith("Conflict: 409 conflict: ")
    assert [r["state"] for r in results] == ["failed", "failed"]


# --------------------------------------------------------------------------- async
def test_async_report_and_create_study_with_pruner() -> None:
    async def main() -> None:
        handler = Script(
            httpx.Response(201, json={"id": 3}),
            unavailable(),
            httpx.Response(200, json={"should_prune": True}),
            error(409, "trial_finished", "finished"),
            error(422, "invalid_request", "not finite", "value"),
        )
        async with async_client(handler) as calibo:
            study = await calibo.create_study("s", SPACE, pruner={"name": "hb+", "window": 10})
            assert await calibo.report(study, 4, 2, 0.5) is True
            with pytest.raises(Conflict) as finished:
                await calibo.report(study, 4, 3, 0.5)
            with pytest.raises(InvalidRequest) as invalid:
                await calibo.report(study, 4, 4, 0.5)
            with pytest.raises(ValueError):
                await calibo.report(study, 4, 5, math.nan)
        assert finished.value.code == "trial_finished"
        assert invalid.value.field == "value"
        assert handler.bodies() == [
            {
                "name": "s",
                "space": SPACE,
                "direction": "minimize",
                "pruner": {"name": "hb+", "window": 10},
            },
            {"step": 2, "value": 0.5},
            {"step": 2, "value": 0.5},
            {"step": 3, "value": 0.5},
            {"step": 4, "value": 0.5},
        ]
        assert {r.url.path for r in handler.requests[1:]} == {"/v1/studies/3/trials/4/report"}

    asyncio.run(main())


def test_async_optimize_coroutine_objective_gets_an_async_reporter() -> None:
    async def main() -> None:
        server = PruningServer(prune_even_trials_from_step_2)
        kinds: set[type] = set()

        async def objective(params: dict[str, Any], reporter: AsyncReporter) -> float:
            kinds.add(type(reporter))
            for epoch in range(4):
                loss = curve(params["x"], epoch)
                await asyncio.sleep(0)
                if await reporter.report(epoch, loss):
                    raise TrialPruned()
            return loss

        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            results = await calibo.optimize(
                study, objective, n_trials=6, n_workers=3, heartbeat_interval=None
            )
        assert kinds == {AsyncReporter}
        states = {r["id"]: r["state"] for r in results}
        assert states == {t: "pruned" if t % 2 == 0 else "complete" for t in range(1, 7)}
        for tid in (2, 4, 6):
            assert {"trial": tid, "state": "pruned", "value": curve(tid, 2)} in server.tells
            assert len(server.reports_of(tid)) == 3
        for tid in (1, 3, 5):
            assert {"trial": tid, "value": curve(tid, 3)} in server.tells

    asyncio.run(main())


def test_async_optimize_plain_objective_gets_a_blocking_reporter_in_its_thread() -> None:
    async def main() -> None:
        server = PruningServer(prune_even_trials_from_step_2)
        threads: set[str] = set()

        def objective(params: dict[str, Any], reporter: Reporter) -> float:
            threads.add(threading.current_thread().name)
            assert type(reporter) is Reporter
            for epoch in range(4):
                time.sleep(0.001)
                if reporter.report(epoch, curve(params["x"], epoch)):
                    raise TrialPruned()
            return curve(params["x"], 3)

        class Callable2:
            async def __call__(self, params: dict[str, Any], reporter: AsyncReporter) -> float:
                assert type(reporter) is AsyncReporter
                if await reporter.report(0, 9.0):
                    raise TrialPruned()
                return 1.0

        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            results = await calibo.optimize(
                study, objective, n_trials=4, n_workers=2, heartbeat_interval=None
            )
            results += await calibo.optimize(study, Callable2(), 2, heartbeat_interval=None)
        assert threading.main_thread().name not in threads
        assert [r["state"] for r in sorted(results, key=lambda r: r["id"])] == [
            "complete",
            "pruned",
            "complete",
            "pruned",
            "complete",
            "complete",
        ]
        assert {"trial": 4, "state": "pruned", "value": curve(4, 2)} in server.tells
        assert server.reports_of(5) == [(0, 9.0)]

    asyncio.run(main())


def test_async_optimize_one_parameter_objectives_unchanged() -> None:
    async def main() -> None:
        server = PruningServer(lambda t, s, v: True)

        def plain(params: dict[str, Any]) -> float:
            return params["x"]

        async def coroutine(params: dict[str, Any]) -> float:
            if params["x"] == 4:
                raise TrialPruned()
            return params["x"] * 2

        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            first = await calibo.optimize(study, plain, n_trials=2, heartbeat_interval=None)
            second = await calibo.optimize(study, coroutine, n_trials=2, heartbeat_interval=None)
        assert [r["value"] for r in first] == [1.0, 2.0]
        assert [(r["state"], r["value"]) for r in second] == [("complete", 6.0), ("pruned", None)]
        assert server.reports == []

    asyncio.run(main())


def test_async_blocking_reporter_on_the_loop_thread_raises_instead_of_hanging() -> None:
    async def main() -> None:
        server = PruningServer()

        def objective(params: dict[str, Any], reporter: Reporter) -> Any:
            async def later() -> float:  # awaited on the event loop by optimize
                reporter.report(0, 1.0)
                return 1.0

            return later()

        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            with pytest.raises(RuntimeError, match="AsyncReporter"):
                await asyncio.wait_for(
                    calibo.optimize(study, objective, n_trials=1, heartbeat_interval=None), 10
                )
        assert [(t["trial"], t["state"]) for t in server.tells] == [(1, "failed")]
        assert server.tells[0]["user_attrs"]["fail_reason"].startswith("RuntimeError: a blocking Reporter")
        assert server.reports == []

    asyncio.run(main())


def test_is_coroutine_callable() -> None:
    async def coroutine(params: dict[str, Any]) -> float:
        return 0.0

    class AsyncCall:
        async def __call__(self, params: dict[str, Any]) -> float:
            return 0.0

    assert is_coroutine_callable(coroutine)
    assert is_coroutine_callable(functools.partial(coroutine))
    assert is_coroutine_callable(AsyncCall())
    assert not is_coroutine_callable(lambda p: 0.0)
    assert not is_coroutine_callable(AsyncCall)
