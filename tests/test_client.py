"""The HTTP client against httpx.MockTransport: no server, no network.

A small thread-safe in-memory server (``FakeServer``) speaks the v1 wire
contract for the optimize loops; single-purpose handlers script failures.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random
import re
import threading
import time
import types
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from calibo import (
    AsyncClient,
    CaliboError,
    Client,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerError,
    Trial,
    Unauthorized,
)
from calibo._core import RetryPolicy, parse_retry_after

URL = "http://calibo.test"
SPACE = {"x": {"type": "float", "low": -5.0, "high": 10.0}}
FAST = {"retries": 3, "backoff": 0.001}

Handler = Callable[[httpx.Request], httpx.Response]


def error(status: int, code: str, message: str, field: str | None = None) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"code": code, "message": message, "field": field}}
    )


def sync_client(handler: Handler, **kwargs: Any) -> Client:
    options = {**FAST, **kwargs}
    return Client(URL, transport=httpx.MockTransport(handler), **options)


def async_client(handler: Handler, **kwargs: Any) -> AsyncClient:
    options = {**FAST, **kwargs}
    return AsyncClient(URL, transport=httpx.MockTransport(handler), **options)


class Script:
    """A handler that answers (or raises) the given outcomes in turn, recording requests."""

    def __init__(self, *outcomes: httpx.Response | Exception) -> None:
        self.outcomes = list(outcomes)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    @property
    def calls(self) -> int:
        return len(self.requests)

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]


def trial_view(tid: int, **extra: Any) -> dict[str, Any]:
    view = {
        "id": tid,
        "study_id": 1,
        "number": tid - 1,
        "state": "complete",
        "params": {"x": 1.0},
        "value": 2.0,
        "prediction": None,
        "worker_id": None,
        "asked_at": "2025-01-01T00:00:00Z",
        "finished_at": "2025-01-01T00:00:01Z",
    }
    view.update(extra)
    return view


ASKED = {"trials": [{"id": 7, "number": 6, "params": {"x": 0.5}, "prediction": {"mean": 1.0}}]}


class FakeServer:
    """The v1 contract in memory, enough for the optimize loops. Thread-safe.

    An ask repeated with the same ``Idempotency-Key`` answers the first one's
    trials; heartbeats of the trials in ``expired`` answer 409 ``trial_expired``
    (their tells are still recorded, as the real server does).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.studies: dict[int, dict[str, Any]] = {}
        self.trials: dict[int, dict[str, Any]] = {}
        self.asks = 0
        self.tells: list[dict[str, Any]] = []
        self.heartbeats: Counter[int] = Counter()
        self.workers: set[str] = set()
        self.answered_asks: dict[tuple[int, str], httpx.Response] = {}
        self.replays = 0
        self.expired: set[int] = set()
        self.refused: Counter[int] = Counter()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            return self.route(request)

    def route(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.strip("/").split("/")
        body = json.loads(request.content) if request.content else {}
        if parts == ["v1", "studies"] and request.method == "POST":
            for study in self.studies.values():
                if study["name"] == body["name"]:
                    return httpx.Response(200, json=study)
            sid = len(self.studies) + 1
            self.studies[sid] = {"id": sid, **body}
            return httpx.Response(201, json=self.studies[sid])
        if len(parts) < 3 or parts[:2] != ["v1", "studies"] or int(parts[2]) not in self.studies:
            return error(404, "not_found", "no such study")
        sid = int(parts[2])
        if parts[3:] == ["ask"]:
            key = request.headers.get("Idempotency-Key")
            if (sid, key) in self.answered_asks:
                self.replays += 1
                return httpx.Response(200, json=json.loads(self.answered_asks[sid, key].content))
            self.asks += 1
            self.workers.add(body["worker_id"])
            made = []
            for _ in range(body["count"]):
                tid = len(self.trials) + 1
                self.trials[tid] = trial_view(
                    tid,
                    study_id=sid,
                    state="running",
                    params={"x": float(tid)},
                    value=None,
                    worker_id=body["worker_id"],
                    finished_at=None,
                )
                made.append({k: self.trials[tid][k] for k in ("id", "number", "params")})
                made[-1]["prediction"] = None
            answer = httpx.Response(200, json={"trials": made})
            if key is not None:
                self.answered_asks[sid, key] = answer
            return answer
        if parts[3:4] == ["trials"] and len(parts) == 6:
            trial = self.trials[int(parts[4])]
            if parts[5] == "heartbeat":
                if trial["id"] in self.expired:
                    self.refused[trial["id"]] += 1
                    return error(409, "trial_expired", "no heartbeat for too long")
                if trial["state"] != "running":
                    return error(409, "trial_finished", "already finished")
                self.heartbeats[trial["id"]] += 1
                return httpx.Response(204)
            self.tells.append({"trial": trial["id"], **body})
            state = body.get("state", "complete")
            if trial["state"] != "running":
                if trial["state"] == state and trial["value"] == body.get("value"):
                    return httpx.Response(200, json=trial)
                return error(409, "trial_finished", "told differently before")
            trial.update(state=state, value=body.get("value"), finished_at="now")
            return httpx.Response(200, json=trial)
        if parts[3:] == ["trials"] and request.method == "GET":
            limit = int(request.url.params["limit"])
            offset = int(request.url.params["offset"])
            rows = list(self.trials.values())
            page = rows[offset : offset + limit]
            return httpx.Response(
                200, json={"trials": page, "total": len(rows), "limit": limit, "offset": offset}
            )
        return error(404, "not_found", "no route")


# --------------------------------------------------------------------------- errors
ERROR_CASES = [
    (400, "invalid_request", InvalidRequest),
    (422, "invalid_request", InvalidRequest),
    (401, "unauthorized", Unauthorized),
    (403, "forbidden", Forbidden),
    (404, "not_found", NotFound),
    (409, "name_conflict", Conflict),
    (409, "trial_finished", Conflict),
    (500, "internal", ServerError),
]


@pytest.mark.parametrize(("status", "code", "cls"), ERROR_CASES)
def test_error_status_maps_to_typed_exception(status: int, code: str, cls: type) -> None:
    handler = Script(error(status, code, "something is off", "space.x.low"))
    with sync_client(handler) as calibo, pytest.raises(cls) as info:
        calibo.get_study(1)
    err = info.value
    assert isinstance(err, CaliboError)
    assert (err.status, err.code, err.message, err.field) == (
        status,
        code,
        "something is off",
        "space.x.low",
    )
    assert str(err) == f"{status} {code}: something is off (field: space.x.low)"
    assert handler.calls == 1  # none of these is retried


def test_forbidden_is_an_unauthorized() -> None:
    assert issubclass(Forbidden, Unauthorized)
    with sync_client(Script(error(403, "forbidden", "read token"))) as calibo:
        with pytest.raises(Unauthorized):
            calibo.delete_study(3)


def test_error_without_field_reads_cleanly() -> None:
    with sync_client(Script(error(404, "not_found", "study 9 not found"))) as calibo:
        with pytest.raises(NotFound) as info:
            calibo.get_study(9)
    assert info.value.field is None
    assert str(info.value) == "404 not_found: study 9 not found"


def test_non_json_error_body_maps_by_status() -> None:
    page = httpx.Response(500, text="<html><body>Internal   Server\nError</body></html>")
    with sync_client(Script(page)) as calibo, pytest.raises(ServerError) as info:
        calibo.list_studies()
    err = info.value
    assert (err.status, err.code, err.field) == (500, "internal", None)
    assert "Internal Server Error" in err.message


def test_empty_and_foreign_error_bodies() -> None:
    with sync_client(Script(httpx.Response(418))) as calibo, pytest.raises(CaliboError) as info:
        calibo.health()
    assert (info.value.status, info.value.code) == (418, "http_418")
    assert info.value.message  # the reason phrase, never empty
    detail = httpx.Response(422, json={"detail": [{"loc": ["body", "count"], "msg": "bad"}]})
    with sync_client(Script(detail)) as calibo, pytest.raises(InvalidRequest) as info:
        calibo.ask(1)
    assert info.value.code == "invalid_request"
    assert "count" in info.value.message


def test_success_that_is_not_json_raises() -> None:
    with sync_client(Script(httpx.Response(200, text="hello"))) as calibo:
        with pytest.raises(CaliboError) as info:
            calibo.health()
    assert info.value.code == "invalid_response"


# --------------------------------------------------------------------------- retries
def test_tell_retried_on_503_then_succeeds() -> None:
    unavailable = error(503, "unavailable", "database busy")
    handler = Script(unavailable, unavailable, httpx.Response(200, json=trial_view(4)))
    with sync_client(handler) as calibo:
        view = calibo.tell(1, 4, 2.0)
    assert view["id"] == 4
    assert handler.calls == 3
    assert {r.content for r in handler.requests} == {b'{"value":2.0}'}


@pytest.mark.parametrize(
    "exc",
    [httpx.ConnectError("refused"), httpx.ReadError("reset"), httpx.ReadTimeout("slow")],
)
def test_get_retried_on_connection_error(exc: Exception) -> None:
    handler = Script(exc, exc, httpx.Response(200, json={"studies": [{"id": 1}], "total": 1}))
    with sync_client(handler) as calibo:
        assert calibo.list_studies() == [{"id": 1}]
    assert handler.calls == 3


def test_tell_and_heartbeat_retried_on_read_errors() -> None:
    handler = Script(httpx.RemoteProtocolError("hung up"), httpx.Response(200, json=trial_view(4)))
    with sync_client(handler) as calibo:
        calibo.tell(1, 4, state="pruned")
    assert handler.calls == 2
    handler = Script(httpx.ReadError("reset"), httpx.Response(204))
    with sync_client(handler) as calibo:
        assert calibo.heartbeat(1, 4) is None
    assert handler.calls == 2


def unavailable() -> httpx.Response:
    """The server's answer while its database is unreachable."""
    return httpx.Response(
        503, headers={"Retry-After": "0"}, json={"error": {"code": "unavailable", "message": "db"}}
    )


@pytest.mark.parametrize("method", ["tell", "ask"])
def test_503_three_times_then_200_succeeds(method: str) -> None:
    answer = httpx.Response(200, json=trial_view(4) if method == "tell" else ASKED)
    handler = Script(unavailable(), unavailable(), unavailable(), answer)
    with sync_client(handler, retries=None) as calibo:
        if method == "tell":
            assert calibo.tell(1, 4, 2.0)["id"] == 4
        else:
            assert [t.id for t in calibo.ask(1)] == [7]
    assert handler.calls == 4


def test_ask_sends_one_idempotency_key_per_call() -> None:
    handler = Script(unavailable(), httpx.ReadError("reset"), httpx.Response(200, json=ASKED))
    with sync_client(handler) as calibo:
        calibo.ask(1)
        calibo.ask(1)
        calibo.ask(1, idempotency_key="worker-3_trial-17")
    keys = [r.headers["Idempotency-Key"] for r in handler.requests]
    assert len(keys) == 5
    first, second, mine = keys[0], keys[3], keys[4]
    assert keys[:3] == [first] * 3  # every try of the first call
    assert re.fullmatch(r"[0-9a-f]{32}", first) and second != first
    assert mine == "worker-3_trial-17"


@pytest.mark.parametrize(
    "exc",
    [
        httpx.RemoteProtocolError("server closed"),
        httpx.ReadError("reset"),
        httpx.ReadTimeout("slow"),
    ],
)
def test_ask_retried_when_the_request_may_have_arrived(exc: Exception) -> None:
    handler = Script(exc, httpx.Response(200, json=ASKED))
    with sync_client(handler) as calibo:
        assert [t.id for t in calibo.ask(1)] == [7]
    assert handler.calls == 2
    assert len({r.headers["Idempotency-Key"] for r in handler.requests}) == 1


def test_ask_rejects_a_bad_idempotency_key_without_a_request() -> None:
    handler = Script(httpx.Response(200, json=ASKED))
    with sync_client(handler) as calibo:
        for key in ("", "x" * 65, "a b", "é", 7):
            with pytest.raises(ValueError):
                calibo.ask(1, idempotency_key=key)  # type: ignore[arg-type]
        calibo.ask(1, idempotency_key="x" * 64)
    assert handler.calls == 1


class FakeClock:
    """A monotonic clock that moves only when something sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


def on_clock(calibo: Client | AsyncClient, clock: FakeClock) -> None:
    calibo._policy = dataclasses.replace(calibo._policy, clock=clock, rng=random.Random(0))


@pytest.mark.parametrize(
    ("outcome", "raised"),
    [
        (error(503, "unavailable", "db down"), ServerError),
        (httpx.ConnectError("refused"), ConnectionFailed),
    ],
)
def test_deadline_ends_the_retries_at_the_deadline_not_before(
    monkeypatch: pytest.MonkeyPatch, outcome: httpx.Response | Exception, raised: type
) -> None:
    clock = FakeClock()
    monkeypatch.setattr("calibo._sync.time", types.SimpleNamespace(sleep=clock.sleep))
    handler = Script(httpx.Response(200, json={"id": 1}), outcome)  # answered once: then an outage
    with sync_client(
        handler, retries=None, retry_deadline=20.0, backoff=1.0, max_backoff=4.0
    ) as calibo:
        on_clock(calibo, clock)
        calibo.get_study(1)
        with pytest.raises(raised) as info:
            calibo.get_study(1)
    # jittered backoff 0.5-1, 1-2, 2-4, then 2-4 each; the last wait cut to end on the deadline
    assert sum(clock.sleeps) == pytest.approx(20.0)
    assert sum(clock.sleeps[:-1]) < 20.0
    assert all(2.0 <= s <= 4.0 for s in clock.sleeps[2:-1])
    tries = handler.calls - 1
    assert tries == len(clock.sleeps) + 1
    assert f"gave up after {tries} attempts in 20.0 s" in str(info.value)
    if raised is ConnectionFailed:
        assert info.value.attempts == tries


def test_deadline_with_retry_after_and_a_count_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr("calibo._sync.time", types.SimpleNamespace(sleep=clock.sleep))
    busy = httpx.Response(503, headers={"Retry-After": "3"})
    handler = Script(busy)
    with sync_client(handler, retries=None, retry_deadline=10.0) as calibo:
        on_clock(calibo, clock)
        with pytest.raises(ServerError):
            calibo.tell(1, 2, 1.0)
    assert clock.sleeps == [3.0, 3.0, 3.0, 1.0]  # Retry-After clipped to the time left
    assert handler.calls == 5
    # Retry-After beyond the deadline: one wait to the deadline, then give up
    clock.sleeps.clear()
    handler = Script(httpx.Response(503, headers={"Retry-After": "30"}))
    with sync_client(handler, retries=None, retry_deadline=10.0) as calibo:
        on_clock(calibo, clock)
        with pytest.raises(ServerError):
            calibo.health()
    assert (clock.sleeps, handler.calls) == ([10.0], 2)
    # with retries given too, whichever bound comes first
    clock.sleeps.clear()
    handler = Script(busy)
    with sync_client(handler, retries=2, retry_deadline=60.0) as calibo:
        on_clock(calibo, clock)
        with pytest.raises(ServerError):
            calibo.health()
    assert (clock.sleeps, handler.calls) == ([3.0, 3.0], 3)
    # no time at all: one try, no wait
    handler = Script(busy)
    with sync_client(handler, retry_deadline=0.0) as calibo, pytest.raises(ServerError):
        calibo.health()
    assert handler.calls == 1


def test_async_deadline_and_503_then_200(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr("calibo._async._sleep", clock.asleep)

    async def main() -> None:
        handler = Script(httpx.Response(503, headers={"Retry-After": "4"}))
        async with async_client(handler, retries=None, retry_deadline=10.0) as calibo:
            on_clock(calibo, clock)
            with pytest.raises(ServerError) as info:
                await calibo.ask(1)
        assert clock.sleeps == [4.0, 4.0, 2.0]
        assert handler.calls == 4
        assert len({r.headers["Idempotency-Key"] for r in handler.requests}) == 1
        assert "gave up after 4 attempts in 10.0 s" in str(info.value)

        for method in ("tell", "ask"):
            answer = httpx.Response(200, json=trial_view(4) if method == "tell" else ASKED)
            handler = Script(unavailable(), unavailable(), unavailable(), answer)
            async with async_client(handler, retries=None) as calibo:
                if method == "tell":
                    assert (await calibo.tell(1, 4, 2.0))["id"] == 4
                else:
                    assert [t.id for t in await calibo.ask(1, idempotency_key="k")] == [7]
            assert handler.calls == 4
            if method == "ask":
                assert {r.headers["Idempotency-Key"] for r in handler.requests} == {"k"}

    asyncio.run(main())


@pytest.mark.parametrize("exc", [httpx.ConnectError("refused"), httpx.ConnectTimeout("slow")])
def test_ask_retried_when_the_request_never_left(exc: Exception) -> None:
    handler = Script(exc, httpx.Response(200, json=ASKED))
    with sync_client(handler) as calibo:
        trials = calibo.ask(1, count=1, worker_id="w")
    assert handler.calls == 2
    assert trials == [
        Trial(id=7, number=6, params={"x": 0.5}, prediction={"mean": 1.0}, study_id=1)
    ]
    assert json.loads(handler.requests[0].content) == {"count": 1, "worker_id": "w"}


def test_retries_exhausted_on_503_raise_server_error() -> None:
    handler = Script(error(503, "unavailable", "down for maintenance"))
    with sync_client(handler, retries=2) as calibo, pytest.raises(ServerError) as info:
        calibo.get_study(1)
    assert handler.calls == 3
    assert (info.value.status, info.value.code) == (503, "unavailable")


def test_retries_exhausted_on_connection_errors_raise_connection_failed() -> None:
    handler = Script(httpx.Response(200, json={"status": "ok"}), httpx.ConnectError("refused"))
    with sync_client(handler, retries=4) as calibo, pytest.raises(ConnectionFailed) as info:
        calibo.health()  # answered: the refusals that follow are an outage, retried in full
        calibo.health()
    assert handler.calls == 6
    err = info.value
    assert (err.status, err.code, err.attempts) == (None, "connection_failed", 5)
    assert "refused" in str(err) and "GET http://calibo.test/healthz" in str(err)


def test_500_is_not_retried() -> None:
    handler = Script(error(500, "internal", "bug"), httpx.Response(200, json={"status": "ok"}))
    with sync_client(handler) as calibo, pytest.raises(ServerError):
        calibo.health()
    assert handler.calls == 1


def test_zero_retries_means_one_attempt() -> None:
    handler = Script(httpx.ConnectError("refused"))
    with sync_client(handler, retries=0) as calibo, pytest.raises(ConnectionFailed):
        calibo.health()
    assert handler.calls == 1


def test_retry_after_is_honoured() -> None:
    busy = httpx.Response(503, headers={"Retry-After": "0.25"}, json={"error": {}})
    handler = Script(busy, httpx.Response(200, json={"id": 1}))
    with sync_client(handler, backoff=0.001) as calibo:
        start = time.monotonic()
        assert calibo.get_study(1) == {"id": 1}
        elapsed = time.monotonic() - start
    assert handler.calls == 2
    assert 0.25 <= elapsed < 2.0


def test_health_reports_a_database_outage_at_once() -> None:
    down = httpx.Response(503, headers={"Retry-After": "1"}, json={"status": "unavailable", "database": "down"})
    handler = Script(down)
    with sync_client(handler) as calibo:
        start = time.monotonic()
        assert calibo.health() == {"status": "unavailable", "database": "down"}
        assert time.monotonic() - start < 0.5
    assert handler.calls == 1


def test_retry_after_parsing() -> None:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    assert parse_retry_after(None) is None
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert parse_retry_after(later, now=now) == pytest.approx(7.0)


def test_backoff_is_exponential_jittered_and_capped() -> None:
    policy = RetryPolicy(retries=10, backoff=0.1, max_backoff=1.0)
    for retry, ceiling in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (9, 1.0)]:
        delays = [policy.delay(retry) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert policy.delay(0, retry_after=5.0) == 5.0
    assert policy.delay(0, retry_after=600.0) == policy.max_retry_after
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)


def test_delete_answered_404_after_an_ambiguous_try_is_done() -> None:
    handler = Script(httpx.ReadError("reset"), error(404, "not_found", "gone"))
    with sync_client(handler) as calibo:
        assert calibo.delete_study(3) is None
    assert handler.calls == 2
    # ...but a plain 404 is still NotFound, and so is one after a refused connection
    for first in (error(404, "not_found", "gone"), httpx.ConnectError("refused")):
        handler = Script(first, error(404, "not_found", "gone"))
        with sync_client(handler) as calibo, pytest.raises(NotFound):
            calibo.delete_study(3)


# --------------------------------------------------------------------------- requests
def test_token_header_sent() -> None:
    handler = Script(httpx.Response(200, json={"status": "ok"}))
    with sync_client(handler, token="s3cret") as calibo:
        calibo.health()
    assert handler.requests[0].headers["Authorization"] == "Bearer s3cret"


def test_token_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALIBO_TOKEN", "from-env")
    handler = Script(httpx.Response(200, json={"studies": []}))
    with sync_client(handler) as calibo:
        calibo.list_studies()
    with sync_client(handler, token="explicit") as calibo:
        calibo.list_studies()
    monkeypatch.delenv("CALIBO_TOKEN")
    with sync_client(handler) as calibo:
        calibo.list_studies()
    auth = [r.headers.get("Authorization") for r in handler.requests]
    assert auth == ["Bearer from-env", "Bearer explicit", None]


def test_create_study_omits_unset_optionals() -> None:
    handler = Script(httpx.Response(201, json={"id": 1}), httpx.Response(200, json={"id": 1}))
    with sync_client(handler) as calibo:
        assert calibo.create_study("s", SPACE).view == {"id": 1}
        assert calibo.create_study("s", SPACE, "maximize", seed=0, settings={"n_warmup": 5}).id == 1
    first, second = (json.loads(r.content) for r in handler.requests)
    assert first == {"name": "s", "space": SPACE, "direction": "minimize"}
    assert second == {
        "name": "s",
        "space": SPACE,
        "direction": "maximize",
        "seed": 0,
        "settings": {"n_warmup": 5},
    }
    assert [(r.method, r.url.path) for r in handler.requests] == [("POST", "/v1/studies")] * 2


def test_create_study_retried_and_conflict_raised() -> None:
    handler = Script(httpx.ReadError("reset"), httpx.Response(200, json={"id": 2}))
    with sync_client(handler) as calibo:
        assert calibo.create_study("s", SPACE).id == 2
    assert handler.calls == 2
    handler = Script(error(409, "name_conflict", "different definition", "name"))
    with sync_client(handler) as calibo, pytest.raises(Conflict) as info:
        calibo.create_study("s", SPACE)
    assert (info.value.code, info.value.field) == ("name_conflict", "name")


def test_paths_methods_and_bodies() -> None:
    handler = Script(httpx.Response(200, json={"ok": True}))
    study = {"id": 5, "name": "s"}
    with sync_client(handler) as calibo:
        calibo.get_study(study)
        calibo.calibration(5)
        calibo.trials(5, state="complete", limit=10, offset=20)
        calibo.tell(5, 8, state="failed")
        calibo.tell(
            5, Trial(id=9, number=0, params={}, prediction=None, study_id=5), 1, state="pruned"
        )
    seen = [(r.method, r.url.path, r.url.query.decode(), r.content) for r in handler.requests]
    assert seen == [
        ("GET", "/v1/studies/5", "", b""),
        ("GET", "/v1/studies/5/calibration", "", b""),
        ("GET", "/v1/studies/5/trials", "limit=10&offset=20&state=complete", b""),
        ("POST", "/v1/studies/5/trials/8/tell", "", b'{"state":"failed"}'),
        ("POST", "/v1/studies/5/trials/9/tell", "", b'{"value":1.0,"state":"pruned"}'),
    ]


def test_base_url_with_a_path_prefix() -> None:
    handler = Script(httpx.Response(200, json={"status": "ok"}))
    with Client(f"{URL}/calibo/", transport=httpx.MockTransport(handler)) as calibo:
        calibo.health()
        calibo.get_study(1)
    assert [r.url.path for r in handler.requests] == ["/calibo/healthz", "/calibo/v1/studies/1"]


def test_tell_rejects_bad_arguments_without_a_request() -> None:
    handler = Script(httpx.Response(200, json={}))
    with sync_client(handler) as calibo:
        with pytest.raises(ValueError):
            calibo.tell(1, 2)
        with pytest.raises(ValueError):
            calibo.tell(1, 2, math.nan)
        with pytest.raises(ValueError):
            calibo.tell(1, 2, state="complete")
        with pytest.raises(TypeError):
            calibo.get_study(1.5)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            calibo.get_study("")  # a name, but an empty one
    assert handler.calls == 0


def test_a_study_is_named_by_id_or_by_name_in_the_path() -> None:
    handler = Script(*[httpx.Response(200, json={"id": 7, "name": "x"})] * 5)
    with sync_client(handler) as calibo:
        calibo.get_study(7)
        calibo.get_study("7")
        calibo.get_study("a/b c%")
        calibo.load_study("123", by="name")
        calibo.load_study("svc")
    raw = [(r.url.raw_path.decode(), r.url.params.get("by")) for r in handler.requests]
    assert raw == [("/v1/studies/7", None), ("/v1/studies/7", None), ("/v1/studies/a%2Fb%20c%25", None),
                   ("/v1/studies/123?by=name", "name"), ("/v1/studies/svc", None)]


def test_iter_trials_walks_every_page() -> None:
    server = FakeServer()
    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        calibo.ask(study, count=7, worker_id="w")
        ids = [t["id"] for t in calibo.iter_trials(study, page_size=3)]
        page = calibo.trials(study, limit=3, offset=6)
    assert ids == list(range(1, 8))
    assert (len(page["trials"]), page["total"]) == (1, 7)


# --------------------------------------------------------------------------- optimize
def test_optimize_runs_exactly_n_trials_with_several_workers() -> None:
    server = FakeServer()
    seen: list[int] = []

    def objective(params: dict[str, Any]) -> float:
        time.sleep(0.002)
        return (params["x"] - 3.0) ** 2

    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        results = calibo.optimize(
            study, objective, n_trials=40, n_workers=4, callback=lambda v: seen.append(v["id"])
        )
    assert server.asks == 40
    assert len(server.tells) == 40
    assert sorted(t["trial"] for t in server.tells) == list(range(1, 41))
    assert len(results) == 40 and {r["state"] for r in results} == {"complete"}
    assert sorted(seen) == sorted(r["id"] for r in results)
    assert all(r["value"] == (r["params"]["x"] - 3.0) ** 2 for r in results)
    assert len(server.workers) == 4
    assert all(w.rsplit("-", 1)[1] in {"0", "1", "2", "3"} for w in server.workers)


def test_optimize_tells_failed_on_a_caught_exception_and_goes_on() -> None:
    server = FakeServer()

    def objective(params: dict[str, Any]) -> float:
        if params["x"] % 3 == 0:
            raise ArithmeticError("diverged")
        if params["x"] == 4:
            return math.inf
        return params["x"]

    with sync_client(server) as calibo:
        results = calibo.optimize(
            {"id": calibo.create_study("s", SPACE).id},
            objective,
            n_trials=10,
            n_workers=3,
            catch=(ArithmeticError,),
        )
    by_id = {r["id"]: r for r in results}
    assert len(by_id) == 10 and server.asks == 10
    failed = sorted(t for t, r in by_id.items() if r["state"] == "failed")
    assert failed == [3, 4, 6, 9]
    assert all(r["value"] is None for r in by_id.values() if r["state"] == "failed")


def test_optimize_uncaught_exception_tells_failed_stops_and_reraises() -> None:
    server = FakeServer()

    def objective(params: dict[str, Any]) -> float:
        if params["x"] == 3:
            raise KeyError("broken objective")
        time.sleep(0.001)
        return 1.0

    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        with pytest.raises(KeyError, match="broken objective"):
            calibo.optimize(study, objective, n_trials=50, n_workers=2, catch=(ValueError,))
    reason = {"fail_reason": "KeyError: 'broken objective'"}
    assert {"trial": 3, "state": "failed", "user_attrs": reason} in server.tells
    assert server.asks < 50  # stopped early
    # every asked trial was told: the other worker finished its current trial
    assert sorted(t["trial"] for t in server.tells) == list(range(1, server.asks + 1))


def test_optimize_non_numeric_result_is_an_error() -> None:
    server = FakeServer()
    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        with pytest.raises(TypeError):
            calibo.optimize(study, lambda p: "oops", n_trials=3)  # type: ignore[arg-type,return-value]
    reason = "TypeError: the objective must return a number, got 'oops'"
    assert server.tells == [{"trial": 1, "state": "failed", "user_attrs": {"fail_reason": reason}}]


def test_optimize_sends_heartbeats_while_the_objective_runs() -> None:
    server = FakeServer()
    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        calibo.optimize(
            study, lambda p: time.sleep(0.25) or 1.0, n_trials=2, heartbeat_interval=0.05
        )
    assert set(server.heartbeats) == {1, 2}
    assert all(n >= 2 for n in server.heartbeats.values())


def test_optimize_with_no_trials_and_bad_arguments() -> None:
    server = FakeServer()
    with sync_client(server) as calibo:
        assert calibo.optimize(1, lambda p: 0.0, n_trials=0) == []
        with pytest.raises(ValueError):
            calibo.optimize(1, lambda p: 0.0, n_trials=1, n_workers=0)
    assert server.asks == 0


def test_optimize_ask_error_is_raised() -> None:
    server = FakeServer()
    with sync_client(server) as calibo, pytest.raises(NotFound):
        calibo.optimize(99, lambda p: 0.0, n_trials=5, n_workers=2)


class Outage:
    """A FakeServer behind a flaky network: a window of requests answered 503 while
    the database is away, and a few answers to asks and tells lost after the
    server applied them (the server closed the keep-alive connection)."""

    def __init__(self, server: FakeServer, down: range = range(6, 30), lose: int = 3) -> None:
        self.server = server
        self.down = down
        self.lose = {"ask": lose, "tell": lose}
        self.lost: Counter[str] = Counter()
        self.seen = 0
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.seen += 1
            if self.seen in self.down:
                return unavailable()
            kind = request.url.path.rsplit("/", 1)[1]
            lose = self.lost[kind] < self.lose.get(kind, 0)
            if lose:
                self.lost[kind] += 1
        response = self.server(request)
        if lose:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return response


def check_outage_ridden_out(
    server: FakeServer, outage: Outage, results: list[dict[str, Any]]
) -> None:
    assert outage.seen > outage.down.stop  # the loop went on after the outage
    assert outage.lost == {"ask": 3, "tell": 3}
    assert server.replays >= 3  # lost asks were answered from their key...
    assert len(server.trials) == len(results) == 12  # ...so no trial was made twice
    assert {r["state"] for r in results} == {"complete"}
    assert sorted(r["id"] for r in results) == list(range(1, 13))


def test_optimize_rides_out_an_outage() -> None:
    server = FakeServer()
    outage = Outage(server)
    with sync_client(outage, retries=None) as calibo:
        study = calibo.create_study("s", SPACE)
        results = calibo.optimize(study, lambda p: p["x"], n_trials=12, n_workers=3)
    check_outage_ridden_out(server, outage, results)


def test_optimize_keeps_evaluating_a_trial_whose_heartbeat_expired() -> None:
    server = FakeServer()
    server.expired.add(1)
    with sync_client(server) as calibo:
        study = calibo.create_study("s", SPACE)
        results = calibo.optimize(
            study, lambda p: time.sleep(0.2) or p["x"], n_trials=2, heartbeat_interval=0.03
        )
    assert [(r["id"], r["state"], r["value"]) for r in results] == [
        (1, "complete", 1.0),
        (2, "complete", 2.0),
    ]
    assert server.refused == {1: 1}  # told once that it expired, never beaten again
    assert server.heartbeats[1] == 0 and server.heartbeats[2] >= 2  # the beating went on


# --------------------------------------------------------------------------- async
def test_async_optimize_rides_out_an_outage_and_an_expired_heartbeat() -> None:
    async def main() -> None:
        server = FakeServer()
        outage = Outage(server)
        async with async_client(outage, retries=None) as calibo:
            study = await calibo.create_study("s", SPACE)
            results = await calibo.optimize(study, lambda p: p["x"], n_trials=12, n_workers=3)
        check_outage_ridden_out(server, outage, results)

        server = FakeServer()
        server.expired.add(1)

        async def slow(params: dict[str, Any]) -> float:
            await asyncio.sleep(0.2)
            return params["x"]

        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            results = await calibo.optimize(study, slow, n_trials=2, heartbeat_interval=0.03)
        assert [(r["id"], r["state"]) for r in results] == [(1, "complete"), (2, "complete")]
        assert server.refused == {1: 1}
        assert server.heartbeats[2] >= 2

    asyncio.run(main())


def test_async_error_mapping() -> None:
    async def main() -> None:
        for status, code, cls in ERROR_CASES:
            async with async_client(Script(error(status, code, "msg", "f"))) as calibo:
                with pytest.raises(cls) as info:
                    await calibo.get_study(1)
                assert (info.value.status, info.value.code, info.value.field) == (
                    status,
                    code,
                    "f",
                )
        async with async_client(Script(httpx.Response(502, text="Bad Gateway"))) as calibo:
            with pytest.raises(ServerError) as info:
                await calibo.ask(1)
            assert info.value.code == "http_502"

    asyncio.run(main())


def test_async_retries() -> None:
    async def main() -> None:
        busy = error(503, "unavailable", "busy")
        tell = Script(busy, httpx.ReadError("reset"), httpx.Response(200, json=trial_view(4)))
        async with async_client(tell) as calibo:
            assert (await calibo.tell(1, 4, 2.0))["id"] == 4
        assert tell.calls == 3

        get = Script(httpx.ConnectError("refused"), httpx.Response(200, json={"id": 1}))
        async with async_client(get) as calibo:
            assert await calibo.get_study(1) == {"id": 1}
        assert get.calls == 2

        for first in (busy, httpx.ReadError("reset"), httpx.RemoteProtocolError("closed")):
            ask = Script(first, httpx.Response(200, json=ASKED))
            async with async_client(ask) as calibo:
                assert [t.id for t in await calibo.ask(1)] == [7]
            assert ask.calls == 2
            assert len({r.headers["Idempotency-Key"] for r in ask.requests}) == 1

        ask = Script(httpx.ConnectError("refused"), httpx.Response(200, json=ASKED))
        async with async_client(ask) as calibo:
            assert [t.id for t in await calibo.ask(1)] == [7]
        assert ask.calls == 2

        down = Script(httpx.ConnectError("refused"))
        async with async_client(down, retries=2) as calibo:
            with pytest.raises(ConnectionFailed):
                await calibo.health()
        assert down.calls == 3

        always_busy = Script(busy)
        async with async_client(always_busy, retries=2) as calibo:
            with pytest.raises(ServerError):
                await calibo.list_studies()
        assert always_busy.calls == 3

        late = Script(
            httpx.Response(503, headers={"Retry-After": "0.2"}),
            httpx.Response(200, json={"status": "ok"}),
        )
        async with async_client(late) as calibo:
            start = time.monotonic()
            await calibo.health()
            assert time.monotonic() - start >= 0.2

    asyncio.run(main())


def test_async_token_create_and_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CALIBO_TOKEN", raising=False)

    async def main() -> None:
        server = FakeServer()
        seen: list[httpx.Request] = []

        def spy(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return server(request)

        async with async_client(spy, token="t0k") as calibo:
            study = await calibo.create_study("s", SPACE, seed=3)
            await calibo.ask(study, count=5)
            ids = [t["id"] async for t in calibo.iter_trials(study.id, page_size=2)]
        assert ids == [1, 2, 3, 4, 5]
        assert json.loads(seen[0].content) == {
            "name": "s",
            "space": SPACE,
            "direction": "minimize",
            "seed": 3,
        }
        assert {r.headers["Authorization"] for r in seen} == {"Bearer t0k"}

    asyncio.run(main())


def test_async_optimize_plain_and_coroutine_objectives() -> None:
    async def main() -> None:
        server = FakeServer()
        threads: set[str] = set()

        def plain(params: dict[str, Any]) -> float:
            threads.add(threading.current_thread().name)
            time.sleep(0.002)
            return params["x"] * 2

        async def coroutine(params: dict[str, Any]) -> float:
            await asyncio.sleep(0.002)
            if params["x"] == 30:
                raise ArithmeticError("nope")
            return params["x"] * 2

        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            first = await calibo.optimize(study, plain, n_trials=20, n_workers=4)
            second = await calibo.optimize(
                study.id, coroutine, n_trials=15, n_workers=5, catch=(ArithmeticError,)
            )
        assert len(first) == 20 and len(second) == 15
        assert server.asks == 35 and len(server.tells) == 35
        assert threading.main_thread().name not in threads  # ran via asyncio.to_thread
        assert all(r["value"] == r["params"]["x"] * 2 for r in first)
        failed = [r["id"] for r in second if r["state"] == "failed"]
        assert failed == [30]
        assert len(server.workers) == 5

    asyncio.run(main())


def test_async_optimize_uncaught_exception_stops_and_reraises() -> None:
    async def main() -> None:
        server = FakeServer()

        async def objective(params: dict[str, Any]) -> float:
            await asyncio.sleep(0.001)
            if params["x"] == 4:
                raise LookupError("broken")
            return 0.0

        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            with pytest.raises(LookupError, match="broken"):
                await calibo.optimize(study, objective, n_trials=100, n_workers=3)
        reason = {"fail_reason": "LookupError: broken"}
        assert {"trial": 4, "state": "failed", "user_attrs": reason} in server.tells
        assert server.asks < 100
        assert sorted(t["trial"] for t in server.tells) == list(range(1, server.asks + 1))

    asyncio.run(main())


def test_async_optimize_cancelled_tells_running_trials_failed() -> None:
    async def main() -> None:
        server = FakeServer()
        started = asyncio.Event()

        async def objective(params: dict[str, Any]) -> float:
            started.set()
            await asyncio.sleep(10)
            return 0.0

        async with async_client(server) as calibo:
            study = await calibo.create_study("s", SPACE)
            task = asyncio.create_task(calibo.optimize(study, objective, 10, n_workers=2))
            await started.wait()
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert server.asks == 2
        cancelled = {"fail_reason": "CancelledError"}
        assert sorted(server.tells, key=lambda t: t["trial"]) == [
            {"trial": 1, "state": "failed", "user_attrs": cancelled, "interrupted": True},  # not learned
            {"trial": 2, "state": "failed", "user_attrs": cancelled, "interrupted": True},
        ]

    asyncio.run(main())


def test_list_studies_walks_every_page_and_filters_by_name() -> None:
    handler = Script(httpx.Response(200, json={"studies": [{"id": 1}, {"id": 2}], "total": 3}),
                     httpx.Response(200, json={"studies": [{"id": 3}], "total": 3}))
    with sync_client(handler) as calibo:
        assert [s["id"] for s in calibo.list_studies()] == [1, 2, 3]
    assert [dict(r.url.params) for r in handler.requests] == [{"limit": "1000", "offset": "0"},
                                                               {"limit": "1000", "offset": "2"}]
    named = Script(httpx.Response(200, json={"studies": [{"id": 7}], "total": 1}))
    with sync_client(named) as calibo:
        assert calibo.list_studies(name="svc-digits") == [{"id": 7}]
    assert named.requests[0].url.params["name"] == "svc-digits"


def test_a_rate_limited_call_waits_retry_after_then_goes_on_even_an_ask() -> None:
    """A 429 of the per-token limit: nothing was done, so any call (an ask without its key too) is
    sent again after Retry-After; the failed-authentication throttle's 429 is raised at once."""
    limited = httpx.Response(429, headers={"Retry-After": "0"},
                             json={"error": {"code": "too_many_requests", "message": "slow down", "field": None}})
    handler = Script(limited, limited, httpx.Response(200, json=trial_view(4)))
    with sync_client(handler) as calibo:
        assert calibo.tell(1, 4, 2.0)["id"] == 4
    assert handler.calls == 3
    asked = {"trials": [{"id": 7, "number": 0, "study_id": 1, "params": {"x": 1.0}, "prediction": None}]}
    handler = Script(limited, httpx.Response(200, json=asked))
    with sync_client(handler) as calibo:
        calibo.ask(1)
    assert handler.calls == 2
    blocked = httpx.Response(429, headers={"Retry-After": "60"}, json={"error": {
        "code": "too_many_requests", "message": "too many failed authentications", "field": "authorization"}})
    handler = Script(blocked, httpx.Response(200, json=trial_view(4)))
    with sync_client(handler) as calibo, pytest.raises(CaliboError) as e:
        calibo.tell(1, 4, 2.0)
    assert e.value.status == 429 and handler.calls == 1
