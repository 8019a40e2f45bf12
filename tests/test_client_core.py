"""The client's retry decisions (``calibo._core``) driven directly, on a fake clock."""

from __future__ import annotations

import math
import random

import httpx
import pytest

from calibo import ConnectionFailed, NotFound, ServerError
from calibo import _endpoints as api
from calibo._core import Attempts, RetryPolicy
from calibo._optimize import Running, ends_heartbeats
from calibo.errors import Conflict


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def busy(retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    request = httpx.Request("GET", "http://calibo.test/v1/studies/1")
    return httpx.Response(503, headers=headers, request=request, json={"error": {}})


def drive(
    attempts: Attempts, clock: Clock, answer: httpx.Response, took: float = 0.0
) -> list[float]:
    """Try until Attempts stops retrying, each try taking ``took`` s; the waits, in order."""
    waits = []
    while True:
        clock.now += took
        wait = attempts.after_response(answer)
        if wait is None:
            return waits
        waits.append(wait)
        clock.now += wait


def test_the_deadline_counts_from_the_first_try_including_the_tries() -> None:
    clock = Clock()
    policy = RetryPolicy(deadline=10.0, clock=clock)
    attempts = Attempts(api.get_study(1), policy)
    waits = drive(attempts, clock, busy("1"), took=1.5)
    # tries start at 0, 2.5, 5, 7.5; the fourth answers at 9, leaving 1 s; the fifth at 10
    assert waits == [1.0, 1.0, 1.0, 1.0]
    assert attempts.tries == 5 and attempts.gave_up
    with pytest.raises(ServerError, match=r"gave up after 5 attempts in 11\.5 s"):
        attempts.finish(busy("1"))


def test_backoff_draws_sum_to_the_deadline_and_no_further() -> None:
    clock = Clock()
    policy = RetryPolicy(
        deadline=30.0, backoff=0.5, max_backoff=8.0, clock=clock, rng=random.Random(1)
    )
    waits = drive(Attempts(api.health(), policy), clock, busy())
    assert sum(waits) == pytest.approx(30.0)
    assert all(4.0 <= w <= 8.0 for w in waits[4:-1])  # capped, jittered
    assert 0 < waits[-1] <= 8.0  # the one cut to end on the deadline


def test_nothing_left_gives_up_at_once_and_a_count_limit_still_applies() -> None:
    clock = Clock()
    slow = drive(
        Attempts(api.health(), RetryPolicy(deadline=5.0, clock=clock)), clock, busy("0"), took=6.0
    )
    assert slow == []  # the first try outlasted the deadline: no retry
    counted = Attempts(api.health(), RetryPolicy(retries=2, deadline=math.inf, clock=clock))
    assert drive(counted, clock, busy("0")) == [0.0, 0.0]
    assert counted.tries == 3


def test_retry_after_capped_by_max_retry_after_then_by_the_time_left() -> None:
    clock = Clock()
    policy = RetryPolicy(deadline=100.0, max_retry_after=7.0, clock=clock)
    assert drive(Attempts(api.health(), policy), clock, busy("3600")) == [7.0] * 14 + [2.0]


def test_connection_errors_give_up_with_attempts_and_time() -> None:
    clock = Clock()
    attempts = Attempts(
        api.tell(1, 2, 3.0, None),
        RetryPolicy(deadline=2.0, clock=clock, backoff=1.0, max_backoff=1.0),
    )
    error = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    with pytest.raises(ConnectionFailed) as info:
        while True:
            clock.now += attempts.after_error(error)
    assert info.value.attempts == attempts.tries >= 3
    assert f"gave up after {attempts.tries} attempts in 2.0 s" in str(info.value)


def test_policy_validation() -> None:
    assert RetryPolicy().retries is None and RetryPolicy().deadline == 60.0
    for bad in ({"retries": -1}, {"deadline": -1.0}, {"deadline": math.nan}, {"backoff": -1}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


def test_ask_call_carries_its_key_on_every_try() -> None:
    call = api.ask(3, 2, "w", None)
    key = call.headers["Idempotency-Key"]
    assert len(key) == 32 and call.headers == {"Idempotency-Key": key}
    assert api.ask(3, 2, "w", None).headers != call.headers
    assert api.ask(3, 2, "w", "mine").headers == {"Idempotency-Key": "mine"}
    clock = Clock()
    attempts = Attempts(call, RetryPolicy(clock=clock))
    assert attempts.after_error(httpx.ReadTimeout("slow")) >= 0  # idempotent now


def test_heartbeats_stop_for_a_trial_the_server_gave_up() -> None:
    assert ends_heartbeats(Conflict("expired", status=409, code="trial_expired"))
    assert ends_heartbeats(NotFound("gone", status=404))
    assert not ends_heartbeats(ServerError("down", status=503, code="unavailable"))
    running = Running()
    for tid in (1, 2):
        running.add(tid)
    running.stop_beating(1)
    running.stop_beating(9)  # not running: nothing to remember
    assert running.snapshot() == [2]
    running.discard(1)
    running.add(1)
    assert running.snapshot() == [1, 2]
