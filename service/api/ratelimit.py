"""Rate limits, counted by the ``limits`` library: per-token request limits and the throttle of
failed authentication.

* ``CALIBO_RATE_LIMIT`` (off by default) bounds the ``/v1`` requests of each token, or of each
  client address when auth is off: ``RateLimit`` answers 429 past it.
* ``CALIBO_AUTH_FAILURE_LIMIT`` (on by default) bounds the failed authentications (401) of each
  client address: past it, until the window allows again, ``middleware.BearerAuth`` answers 429 to
  a request from that address whose token is missing or wrong, while a valid token is still served
  (it limits the failures, not the address: workers behind one ingress address keep working while
  one of them, or a guesser, sends wrong tokens).

The client's address is the connection's, or, when the connection comes from one of
``CALIBO_TRUSTED_PROXIES``, the one its ``X-Forwarded-For`` names (``ForwardedFor``, put around the
app by ``server.uvicorn_config``; uvicorn's own proxy handling is off).

Counts live in ``CALIBO_RATE_LIMIT_STORAGE``: this process's memory (``memory://``) or a Redis
that API replicas share (``redis://host:6379``). Windows are fixed (``limits``' fixed window: it
starts at the first request and lasts the limit's period), the cheapest strategy, with an exact
``Retry-After``: one storage operation per counted request.

A refusal is remembered in this process until its window ends, so a client over a limit is
answered from a dictionary, without a storage round trip (and, for the auth throttle, a request
without a token without any check). With shared storage, a replica that has not refused the client yet learns
of the exceeded count at the client's next counted request there.

Unreachable storage never fails a request: the limiter lets requests through (fail-open), logs
one line a minute while it lasts, and tries the storage again every ``DOWN_SECONDS``.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import math
import time
from typing import Any

from limits import RateLimitItem, parse_many
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import FixedWindowRateLimiter
from limits.errors import ConfigurationError
from limits.storage import storage_from_string

from ..logs import Throttled, one_line
from .asgi import ASGIApp, Receive, Scope, Send
from .errors import error_response

log = logging.getLogger("calibo.api")

# scope key under which BearerAuth puts the authenticated token's identity (a digest prefix)
IDENTITY = "calibo.identity"
STORAGE_TIMEOUT = 0.5  # seconds a Redis connect or command may take before the request goes on unlimited
DOWN_SECONDS = 2.0  # after a storage failure, requests go unlimited this long before it is tried again
MAX_REMEMBERED = 100_000  # refusals remembered per throttle; beyond, the expired ones are dropped
LIMITED_PREFIX = "/v1"


def parse_limits(value: str) -> tuple[RateLimitItem, ...]:
    """``"20/second;1000/minute"`` as ``limits`` items; empty is none (``config.Settings`` has
    checked the notation)."""
    value = value.strip()
    return tuple(parse_many(value)) if value else ()


def async_uri(uri: str) -> str:
    """The ``limits`` URI of its asyncio storage: ``redis://h:6379`` -> ``async+redis://h:6379``."""
    uri = uri.strip()
    return uri if uri.startswith("async+") else "async+" + uri


def shown(uri: str) -> str:
    """``uri`` without its password, for logs and messages."""
    scheme, sep, rest = uri.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return uri
    return f"{scheme}{sep}{userinfo.partition(':')[0]}:***@{host}"


def open_storage(uri: str) -> Any:
    """``limits``' asyncio storage for ``uri``; Redis through redis-py, with short timeouts and no
    retries (the limiter fails open instead). ``ValueError`` for an unknown or unusable URI."""
    target = async_uri(uri)
    options: dict[str, Any] = {}
    scheme = target.partition("://")[0]
    if scheme.startswith("async+redis"):
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        options = {"implementation": "redispy", "socket_connect_timeout": STORAGE_TIMEOUT,
                   "socket_timeout": STORAGE_TIMEOUT, "retry": Retry(NoBackoff(), 0)}
    try:
        return storage_from_string(target, **options)
    except ConfigurationError as e:
        raise ValueError(f"CALIBO_RATE_LIMIT_STORAGE={shown(uri)!r}: {e}; use memory:// or redis://host:port"
                         ) from None


class Limiter:
    """One storage and strategy for every limit of an app; fails open when the storage fails."""

    def __init__(self, storage_uri: str) -> None:
        self.storage = open_storage(storage_uri)
        self.strategy = FixedWindowRateLimiter(self.storage)
        self.where = shown(storage_uri)
        # Redis tells a window's end to the nearest second: wait half a second more, never too little
        self.slack = 0.0 if isinstance(self.storage, MemoryStorage) else 0.5
        self._down_until = 0.0
        self._trouble = Throttled(log, 60.0)

    async def hit(self, items: tuple[RateLimitItem, ...], *identifiers: str) -> float:
        """Count one request against each of ``items``: 0.0 when every one allows it, else the
        seconds until the refusing one's window ends (> 0). Storage failures count as allowed."""
        if self._down_until and time.monotonic() < self._down_until:
            return 0.0
        try:
            for item in items:
                if not await self.strategy.hit(item, *identifiers):
                    stats = await self.strategy.get_window_stats(item, *identifiers)
                    wait = max(stats.reset_time - time.time(), 0.0) + self.slack
                    return wait or 0.001  # refused: never 0.0, which means allowed
        except Exception as e:  # noqa: BLE001 - any storage failure: fail open, never a 5xx
            self._down_until = time.monotonic() + DOWN_SECONDS
            self._trouble.log(logging.WARNING, "storage", "rate-limit storage %s failed (%s): requests are "
                              "not rate limited until it answers", self.where, one_line(e))
            return 0.0
        if self._down_until:
            self._down_until = 0.0
            self._trouble.reset("storage")
            log.info("rate-limit storage %s answers again", self.where)
        return 0.0


class Throttle:
    """One setting's limits (each must allow a request) per identity; refusals remembered here
    until their window ends."""

    def __init__(self, limiter: Limiter, kind: str, items: tuple[RateLimitItem, ...]) -> None:
        self.limiter = limiter
        self.kind = kind
        self.items = items
        self.text = " and ".join(str(item) for item in items)  # "100 per 1 minute and 1000 per 1 hour"
        self._until: dict[str, float] = {}  # identity -> time.monotonic() at which its refusal ends

    def blocked(self, identity: str) -> int:
        """Seconds (>= 1) until ``identity`` may try again, or 0 when it is not refused here."""
        until = self._until.get(identity)
        if until is None:
            return 0
        left = until - time.monotonic()
        if left > 0:
            return math.ceil(left)
        del self._until[identity]
        return 0

    async def hit(self, identity: str) -> int:
        """Count one request of ``identity``: 0 when allowed, else its ``Retry-After`` (>= 1)."""
        wait = await self.limiter.hit(self.items, "calibo", self.kind, identity)
        if not wait:
            return 0
        now = time.monotonic()
        if len(self._until) >= MAX_REMEMBERED:
            self._until = {k: t for k, t in self._until.items() if t > now}
            if len(self._until) >= MAX_REMEMBERED:
                self._until.clear()  # the storage still holds the counts: refusals come back at once
        self._until[identity] = now + wait
        return max(1, math.ceil(wait))


def client_address(scope: Scope) -> str:
    """The client's address (``ForwardedFor`` puts a trusted proxy's ``X-Forwarded-For`` there)."""
    client = scope.get("client")
    return client[0] if client else "-"


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_FORWARDED_HOPS = 32  # X-Forwarded-For entries looked at, from the right; a longer chain is cut there
_SCHEMES = frozenset({"http", "https", "ws", "wss"})  # X-Forwarded-Proto values taken


def _ip(text: str) -> IPAddress | None:
    """``text`` as an address (IPv4-mapped IPv6 as IPv4), with a port (``1.2.3.4:5``, ``[::1]:5``) or
    without; None when it is no address."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class ForwardedFor:
    """The client behind trusted proxies (``CALIBO_TRUSTED_PROXIES``: IPs and CIDR networks, checked
    by ``config.Settings``).

    A request whose connection comes from a trusted proxy gets, as ``scope["client"]``, the first
    address of its ``X-Forwarded-For`` read from the right that is not itself a trusted proxy (each
    proxy appends the address it was reached from, so what a client writes further left is never
    reached), or the leftmost when every one is trusted; and ``X-Forwarded-Proto``'s scheme. From
    any other peer both headers are ignored: a client cannot choose the address it is counted as.
    """

    def __init__(self, app: ASGIApp, trusted: str) -> None:
        self.app = app
        self.networks = tuple(ipaddress.ip_network(item.strip(), strict=False)
                              for item in trusted.split(",") if item.strip())
        self._trusted = functools.lru_cache(maxsize=4096)(self._check)

    def _check(self, ip: IPAddress) -> bool:
        return any(ip in net for net in self.networks)

    def trusts(self, ip: IPAddress | None) -> bool:
        return ip is not None and self._trusted(ip)

    def client(self, forwarded: list[bytes]) -> str | None:
        """The client's address from the ``X-Forwarded-For`` values of a trusted proxy's request, or
        None when they name none (the proxy is then the client)."""
        hops = [h.strip() for h in b",".join(forwarded).decode("latin-1").split(",")][-MAX_FORWARDED_HOPS:]
        for hop in reversed(hops):
            ip = _ip(hop)
            if ip is None:  # not an address ("unknown", a proxy's obfuscated name): the client as written
                return hop[:64] or None
            if not self.trusts(ip):
                return str(ip)
        return str(_ip(hops[0])) if hops else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        peer = scope.get("client")
        if scope["type"] in ("http", "websocket") and peer and self.trusts(_ip(peer[0])):
            forwarded = [v for k, v in scope["headers"] if k == b"x-forwarded-for"]
            proto = next((v for k, v in scope["headers"] if k == b"x-forwarded-proto"), None)
            if forwarded and (client := self.client(forwarded)):
                scope["client"] = (client, 0)
            scheme = proto.decode("latin-1").strip().lower() if proto is not None else ""
            if scheme in _SCHEMES:
                scope["scheme"] = scheme.replace("http", "ws") if scope["type"] == "websocket" else scheme
        await self.app(scope, receive, send)


def too_many(wait: int, message: str, field: str | None = None) -> Any:
    """The 429 answer: the JSON error and ``Retry-After``."""
    return error_response(429, "too_many_requests", f"{message}; retry after {wait} s", field,
                          {"Retry-After": str(wait)})


class RateLimit:
    """``CALIBO_RATE_LIMIT`` on ``/v1`` requests: per token (``IDENTITY``, set by ``BearerAuth``), or
    per client address when auth is off. Over the limit: 429 with ``Retry-After``, before the body is
    read. Other paths (health probes, metrics, the dashboard page, the API docs) are not limited."""

    def __init__(self, app: ASGIApp, throttle: Throttle) -> None:
        self.app = app
        self.throttle = throttle
        self.per_token = f"too many requests for this token (the limit is {throttle.text})"
        self.per_address = f"too many requests from this address (the limit is {throttle.text})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if not (path.startswith(LIMITED_PREFIX + "/") or path == LIMITED_PREFIX):
            await self.app(scope, receive, send)
            return
        identity = scope.get(IDENTITY)
        if identity is None:
            identity = "address:" + client_address(scope)
        wait = self.throttle.blocked(identity) or await self.throttle.hit(identity)
        if wait:
            message = self.per_address if identity.startswith("address:") else self.per_token
            await too_many(wait, message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def throttles(rate_limit: str, auth_failure_limit: str, storage_uri: str, auth: bool
              ) -> tuple[Throttle | None, Throttle | None]:
    """The per-token throttle and the failed-auth one (None where off) on one storage; a bad limit
    or storage URI raises ``ValueError`` here, when the app is made."""
    per_token = parse_limits(rate_limit)
    failures = parse_limits(auth_failure_limit) if auth else ()
    if not per_token and not failures:
        return None, None
    limiter = Limiter(storage_uri)
    return (Throttle(limiter, "rate", per_token) if per_token else None,
            Throttle(limiter, "auth", failures) if failures else None)
