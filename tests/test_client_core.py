"""The client's retry decisions (``calibo._core``) driven directly, on a fake clock, and the
pieces of ``optimize`` that need no server: outcomes, fail reasons, the run's trials."""

from __future__ import annotations

import logging
import math
import random

import httpx
import pytest

from calibo import ConnectionFailed, NotFound, ServerError, Terminated
from calibo import _endpoints as api
from calibo._core import Attempts, RetryPolicy
from calibo._optimize import Running, ends_heartbeats, failed_attrs, outcome
from calibo._signals import MAX_REASON, fail_reason
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
    assert running.finish(1)
    running.end_call()
    running.add(1)
    assert running.snapshot() == [1, 2]


# ----------------------------------------------------------------- first contact and warnings
REFUSED = httpx.ConnectError("[Errno 111] Connection refused")


def fail_all(attempts: Attempts, clock: Clock, error: Exception) -> ConnectionFailed:
    """Feed ``error`` to every try until Attempts gives up; the ConnectionFailed."""
    with pytest.raises(ConnectionFailed) as info:
        while True:
            clock.now += attempts.after_error(error)
    return info.value


def test_a_refused_first_contact_gives_up_after_two_quick_retries_naming_the_url() -> None:
    clock = Clock()
    policy = RetryPolicy(deadline=60.0, clock=clock, rng=random.Random(0))
    attempts = Attempts(api.get_study(3), policy, base_url="http://calibo.test:9/", reached=False)
    err = fail_all(attempts, clock, REFUSED)
    assert err.attempts == 3 and clock.now - 50.0 < 2.0
    assert str(err).startswith("connection_failed: GET http://calibo.test:9/v1/studies/3: ConnectError")
    assert "no answer from http://calibo.test:9 yet" in str(err)
    # the same after an answer: an outage, retried until the deadline
    clock = Clock()
    policy = RetryPolicy(deadline=60.0, clock=clock, rng=random.Random(0))
    attempts = Attempts(api.get_study(3), policy, base_url="http://calibo.test:9", reached=True)
    err = fail_all(attempts, clock, REFUSED)
    assert clock.now - 50.0 == pytest.approx(60.0) and err.attempts > 10
    assert "no answer" not in str(err)


def test_first_contact_limits_never_lengthen_a_shorter_policy() -> None:
    clock = Clock()
    policy = RetryPolicy(retries=0, clock=clock)
    assert fail_all(Attempts(api.health(), policy, reached=False), clock, REFUSED).attempts == 1
    clock = Clock()
    policy = RetryPolicy(deadline=0.05, backoff=1.0, clock=clock)
    fail_all(Attempts(api.health(), policy, reached=False), clock, REFUSED)
    assert clock.now - 50.0 == pytest.approx(0.05)


def test_an_answer_within_the_call_makes_later_refusals_an_outage() -> None:
    clock = Clock()
    policy = RetryPolicy(deadline=30.0, clock=clock, rng=random.Random(0))
    attempts = Attempts(api.get_study(1), policy, reached=False)
    clock.now += attempts.after_response(busy("1"))  # a 503: someone answers at that address
    err = fail_all(attempts, clock, REFUSED)
    assert clock.now - 50.0 == pytest.approx(30.0) and err.attempts > 3


def test_a_read_error_on_first_contact_is_not_cut_short() -> None:
    # the connection was made: something listens there, so the usual deadline applies
    clock = Clock()
    attempts = Attempts(api.health(), RetryPolicy(deadline=20.0, clock=clock), reached=False)
    fail_all(attempts, clock, httpx.ReadError("reset"))
    assert clock.now - 50.0 == pytest.approx(20.0)


def test_each_retry_logs_a_warning_naming_the_call_the_error_and_the_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    policy = RetryPolicy(deadline=10.0, clock=clock, rng=random.Random(0))
    attempts = Attempts(api.tell(1, 2, 3.0, None), policy, base_url="http://calibo.test")
    with caplog.at_level(logging.WARNING, logger="calibo.client"):
        waits = [attempts.after_response(busy("2")), attempts.after_response(busy())]
        waits.append(attempts.after_error(REFUSED))
    records = [r for r in caplog.records if r.name == "calibo.client"]
    assert len(records) == 3 and all(r.levelno == logging.WARNING for r in records)
    messages = [r.getMessage() for r in records]
    for n, (message, wait) in enumerate(zip(messages, waits, strict=True), start=1):
        assert message.startswith("POST http://calibo.test/v1/studies/1/trials/2/tell: ")
        assert f"; retry {n} in {wait:.1f} s" in message
    assert "503 Service Unavailable" in messages[0] and "ConnectError" in messages[2]


def test_no_warning_without_a_retry(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    attempts = Attempts(api.health(), RetryPolicy(retries=0, clock=clock))
    with caplog.at_level(logging.WARNING, logger="calibo.client"):
        assert attempts.after_response(busy("1")) is None
        with pytest.raises(ConnectionFailed):
            Attempts(api.health(), RetryPolicy(retries=0, clock=clock)).after_error(REFUSED)
    assert not [r for r in caplog.records if r.name == "calibo.client"]


# ----------------------------------------------------------------- outcomes and the run's trials
def test_outcome_and_its_fail_reason() -> None:
    assert outcome(2) == (2.0, None, None)
    assert outcome((1, 2.5)) == ([1.0, 2.5], None, None)
    assert outcome(math.nan) == (None, "failed", "the objective returned nan")
    assert outcome([1.0, math.inf]) == (None, "failed", "the objective returned [1.0, inf]")
    for bad in ("oops", None, True, [1.0, "x"], {"a": 1}):
        with pytest.raises(TypeError):
            outcome(bad)
    assert failed_attrs(None) is None and failed_attrs("why") == {"fail_reason": "why"}


def test_fail_reason_is_the_type_and_message_bounded() -> None:
    assert fail_reason(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert fail_reason(Terminated()) == "Terminated: SIGTERM"
    assert fail_reason(ValueError("bad lr")) == "ValueError: bad lr"
    long = fail_reason(RuntimeError("x" * 10_000))
    assert len(long) == MAX_REASON and long.startswith("RuntimeError: xxx") and long.endswith("...")


def test_running_hands_each_trial_to_one_teller() -> None:
    running = Running()
    assert running.begin_call() and running.add(1) and running.add(2)
    running.end_call()
    assert running.finish(1)  # worker 1 tells trial 1...
    assert running.close("KeyboardInterrupt") == [2]  # ...the stopping code trial 2
    assert running.reason == "KeyboardInterrupt" and running.snapshot() == []
    assert not running.finish(2)  # its worker, done later, tells nothing
    assert not running.begin_call() and not running.add(3)  # no call starts once closed
    assert not running.wait_calls(timeout=0.01)  # trial 1's tell is still in flight
    running.end_call()
    assert running.wait_calls(timeout=0.01)
    assert running.close("again") == [] and running.reason == "KeyboardInterrupt"
