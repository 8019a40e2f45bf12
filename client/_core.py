"""The part of a call that does not depend on sync or async I/O.

A :class:`Call` describes one request (method, path, body, query, headers), how
safe it is to send twice, and how to read its answer. :class:`Attempts` follows
one call through its tries: after a transport error or a response it says
whether to try again and after how long (logging a warning on the
``calibo.client`` logger for each retry), or raises the typed error. ``Client``
and ``AsyncClient`` only add the sending and the sleeping.
"""

from __future__ import annotations

import email.utils
import enum
import logging
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import httpx

from .errors import CaliboError, ConnectionFailed, error_from_response

__all__ = [
    "Attempts",
    "Call",
    "RetryPolicy",
    "Safety",
    "client_options",
    "parse_retry_after",
]

T = TypeVar("T")

log = logging.getLogger("calibo.client")

# Errors after which the request provably never reached the server.
UNSENT_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
# Errors that say no server answers at the address: refused, unknown host, unreachable network.
# Before the client has had any answer they more likely mean a wrong URL than an outage.
UNREACHED_ERRORS: tuple[type[httpx.TransportError], ...] = (httpx.ConnectError, httpx.ConnectTimeout)
# Errors worth another try for a call that is safe to repeat: timeouts, broken
# connections and a server that hung up mid-answer.
TRANSIENT_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)
# Statuses that say "not now" rather than "no": the service's own 503 and a
# proxy's 502 / 504 in front of a restarting replica.
RETRY_STATUSES = frozenset({502, 503, 504})


def throttled(response: httpx.Response) -> bool:
    """A 429 of the server's rate limit: the request was refused before anything was done, so any
    call may be sent again after ``Retry-After``. The failed-authentication throttle's 429 (field
    ``authorization``) is not: the token is wrong, and retrying only keeps the address blocked."""
    if response.status_code != 429:
        return False
    try:
        field = response.json()["error"]["field"]
    except (ValueError, KeyError, TypeError):
        return True  # a proxy's 429: it did not pass the request on either
    return field != "authorization"


class Safety(enum.Enum):
    """How safe a request is to send again when its outcome is unknown."""

    IDEMPOTENT = "idempotent"  # repeat on any transient error or a 502/503/504
    UNSENT_ONLY = "unsent_only"  # repeat only when it cannot have reached the server


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API request and how to read its successful answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None  # sent on every try, on top of the client's
    safety: Safety = Safety.IDEMPOTENT
    # A 404 after a try whose outcome is unknown means that try already did it
    # (DELETE): answer success instead of NotFound.
    gone_means_done: bool = False
    # An error response that is nonetheless the answer, read without retrying (/healthz's 503
    # saying the database is down; a proxy's 503 in front of a restarting server is no answer).
    answer_if: Callable[[httpx.Response], bool] | None = None


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date)."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """When to try a call again: until a time budget is spent, with capped backoff.

    The tries of one call go on until ``deadline`` seconds have passed since its
    first try (measured with ``clock``, monotonic) and, when ``retries`` is not
    None, for at most ``retries`` retries as well. The n-th retry (n = 0, 1, ...)
    waits a uniform draw from ``[d/2, d]`` with ``d = min(max_backoff,
    backoff * 2**n)``; a ``Retry-After`` header replaces that draw, up to
    ``max_retry_after`` seconds. A wait that would end past the deadline is cut
    to end on it, so the last try starts at the deadline; once no time is left
    the call gives up at once.

    Until the client has had an answer from the server, a connection that
    cannot be made (refused, unknown host: a wrong URL or a server not
    started) is retried at most ``unreached_retries`` times within
    ``unreached_deadline`` seconds, so that a wrong address fails in seconds
    rather than after the whole deadline.
    """

    retries: int | None = None
    backoff: float = 0.2
    max_backoff: float = 10.0
    max_retry_after: float = 60.0
    deadline: float = 60.0
    unreached_retries: int = 2
    unreached_deadline: float = 2.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)

    def __post_init__(self) -> None:
        if (self.retries is not None and self.retries < 0) or self.unreached_retries < 0:
            raise ValueError("retries must be >= 0 or None")
        if self.backoff < 0 or self.max_backoff < 0 or self.max_retry_after < 0:
            raise ValueError("backoff times must be >= 0")
        if not self.deadline >= 0 or not self.unreached_deadline >= 0:
            raise ValueError("deadline must be >= 0")

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """The wait before retry number ``retry``, ignoring the deadline."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        ceiling = min(self.max_backoff, self.backoff * 2.0 ** min(retry, 62))
        return ceiling / 2.0 + self.rng.uniform(0.0, ceiling / 2.0)


class Attempts(Generic[T]):
    """The tries of one call: decides, after each, between answer, retry and error.

    Create it just before the first try: the deadline counts from then.
    ``base_url`` names the server in messages and warnings; ``reached`` says
    whether the client has had an answer from it before this call.
    """

    def __init__(self, call: Call[T], policy: RetryPolicy, *, base_url: str = "",
                 reached: bool = True) -> None:
        self.call = call
        self.policy = policy
        self.base_url = base_url.rstrip("/")
        self.reached = reached  # some answer came from the server, in this call or before
        self.tries = 0
        self.maybe_applied = False  # an earlier try may have reached the server
        self.gave_up = False  # the final response is a retryable one we stopped retrying
        self.answered = False  # the final response is an error status the call reads as its answer
        self.started = policy.clock()

    def _label(self) -> str:
        return f"{self.call.method} {self.base_url}{self.call.path}"

    def _limits(self, unreached: bool) -> tuple[int | None, float]:
        """(retries, deadline) in force: the policy's, or its first-contact ones when tighter."""
        policy = self.policy
        if not unreached:
            return policy.retries, policy.deadline
        retries = policy.unreached_retries
        if policy.retries is not None:
            retries = min(retries, policy.retries)
        return retries, min(policy.deadline, policy.unreached_deadline)

    def _next_wait(self, retry_after: float | None = None, *, unreached: bool = False) -> float | None:
        """The wait before the next try, or None when the count or the time is spent."""
        retries, deadline = self._limits(unreached)
        if retries is not None and self.tries > retries:
            return None
        left = deadline - (self.policy.clock() - self.started)
        if left <= 1e-6:  # the waits' float sum may fall a hair short of the deadline: that is none left
            return None
        return min(self.policy.delay(self.tries - 1, retry_after), left)

    def _warn(self, what: str, wait: float, *, unreached: bool = False) -> None:
        elapsed = self.policy.clock() - self.started
        log.warning("%s: %s; retry %d in %.1f s (%.1f s since the first try, deadline %.0f s)",
                    self._label(), what, self.tries, wait, elapsed, self._limits(unreached)[1])

    def _gave_up(self) -> str:
        elapsed = self.policy.clock() - self.started
        plural = "s" if self.tries != 1 else ""
        return f"gave up after {self.tries} attempt{plural} in {elapsed:.1f} s"

    def after_error(self, exc: httpx.TransportError) -> float:
        """The wait before the next try, or raise :class:`ConnectionFailed`."""
        self.tries += 1
        unsent = isinstance(exc, UNSENT_ERRORS)
        if self.call.safety is Safety.IDEMPOTENT:
            retryable = unsent or isinstance(exc, TRANSIENT_ERRORS)
        else:
            retryable = unsent
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if not retryable:
            if self.call.safety is Safety.UNSENT_ONLY and isinstance(exc, TRANSIENT_ERRORS):
                reason = "not retried: the call is not idempotent and may have reached the server"
            else:
                reason = "not retried"
            raise ConnectionFailed(
                f"{self._label()}: {detail} ({reason})", attempts=self.tries
            ) from exc
        if not unsent:
            self.maybe_applied = True
        unreached = not self.reached and isinstance(exc, UNREACHED_ERRORS)
        wait = self._next_wait(unreached=unreached)
        if wait is None:
            why = self._gave_up()
            if unreached:
                why += f"; no answer from {self.base_url or 'the server'} yet: is a calibo server running there?"
            raise ConnectionFailed(f"{self._label()}: {detail} ({why})", attempts=self.tries) from exc
        self._warn(detail, wait, unreached=unreached)
        return wait

    def after_response(self, response: httpx.Response) -> float | None:
        """None when ``response`` is the answer to read; else the wait before the next try."""
        self.tries += 1
        self.reached = True
        self.answered = self.call.answer_if is not None and self.call.answer_if(response)
        if self.answered:
            return None
        if (response.status_code in RETRY_STATUSES and self.call.safety is Safety.IDEMPOTENT) \
                or throttled(response):
            wait = self._next_wait(parse_retry_after(response.headers.get("Retry-After")))
            if wait is not None:
                self._warn(f"{response.status_code} {response.reason_phrase}".rstrip(), wait)
                return wait
            self.gave_up = True
        return None

    def finish(self, response: httpx.Response) -> T:
        """The call's result from its final response, or the typed error."""
        status = response.status_code
        if status == 404 and self.call.gone_means_done and self.maybe_applied:
            return self.call.parse(httpx.Response(204, request=response.request))
        if status >= 400 and not self.answered:
            error = error_from_response(response)
            if self.gave_up:
                error.message = f"{error.message} ({self._label()}: {self._gave_up()})"
            raise error
        return self.call.parse(response)


def invalid_response(response: httpx.Response, expected: str) -> CaliboError:
    """The error for a successful status whose body is not what the contract promises."""
    return CaliboError(f"expected {expected} from {response.request.method} {response.request.url.path}",
                       status=response.status_code, code="invalid_response")


def json_body(response: httpx.Response) -> Any:
    """The decoded JSON of a successful response."""
    try:
        return response.json()
    except ValueError as exc:
        content_type = response.headers.get("content-type", "no content type")
        raise invalid_response(response, f"JSON (got {content_type})") from exc


def json_object(response: httpx.Response) -> dict[str, Any]:
    body = json_body(response)
    if not isinstance(body, dict):
        raise invalid_response(response, "a JSON object")
    return body


def no_content(response: httpx.Response) -> None:
    return None


DEFAULT_URL = "http://127.0.0.1:8000"
USER_AGENT = "calibo-client/0.1"


def client_options(
    base_url: str | None, token: str | None, timeout: float | httpx.Timeout | None
) -> dict[str, Any]:
    """Keyword arguments for ``httpx.Client`` / ``httpx.AsyncClient``.

    ``base_url`` falls back to ``$CALIBO_URL``, then ``http://127.0.0.1:8000``;
    ``token`` to ``$CALIBO_TOKEN``. An empty token means none.
    """
    url = base_url or os.environ.get("CALIBO_URL") or DEFAULT_URL
    if token is None:
        token = os.environ.get("CALIBO_TOKEN")
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return {
        "base_url": url.rstrip("/"),
        "headers": headers,
        "timeout": timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
    }
