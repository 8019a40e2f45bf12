"""ASGI middleware that runs before any route: request ids, metrics and access lines, the
last-resort 500, auth, and body bounds.

All are plain ASGI (no BaseHTTPMiddleware), so they cost a function call
per request and see the request before its body is read:

* ``CatchAll``: an unexpected exception answers a JSON 500 and the connection
  stays usable (Starlette's own handler re-raises after answering, so the
  server closed the keep-alive connection without a ``Connection: close``);
  the traceback is logged once per kind of failure per interval.
* ``BearerAuth``: ``/v1`` needs a known token before anything else happens, so
  an unauthenticated client cannot make the server read or parse a body.
  Tokens are compared in constant time (digests, over every configured token). Failed
  attempts are counted per client address (``ratelimit``): past the limit, a wrong or missing
  token from that address is answered 429, a valid one is still served.
* ``BodyLimit``: a declared ``Content-Length`` over the limit answers 413 at
  once; a streamed body is counted as it arrives (413 once over) and must
  arrive within the body deadline (408). Both close the connection, whose
  unread rest would otherwise be parsed as the next request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import time
import uuid
from typing import Any

from fastapi import HTTPException

from ..logs import Throttled, one_line, request_id
from .asgi import ASGIApp, Message, Receive, Scope, Send
from .errors import error_response
from .ratelimit import IDENTITY, Throttle, client_address, too_many

log = logging.getLogger("calibo.api")

CLOSE = {"Connection": "close"}
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for k, v in scope["headers"]:
        if k == name:
            return v
    return None


class CatchAll:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.errors = Throttled(log, 10.0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as e:
            where = e.__traceback__
            while where is not None and where.tb_next is not None:
                where = where.tb_next
            kind = f"{type(e).__name__}@{where.tb_frame.f_code.co_filename}:{where.tb_lineno}" if where else ""
            self.errors.log(logging.ERROR, kind, "unhandled error on %s %s: %s", scope.get("method"),
                            scope.get("path"), one_line(e), exc_info=e)
            if started:
                raise  # half an answer is out: only closing the connection can end it
            await error_response(500, "internal", "internal server error; the server log has the details")(
                scope, receive, send)


class BearerAuth:
    """``/v1`` and ``/metrics`` need a known token; a ``read`` token may only read.

    With a ``failures`` throttle (``CALIBO_AUTH_FAILURE_LIMIT``), each 401 counts against the
    client's address. Past the limit, until the window allows again, the throttle limits the
    failures, not the address:

    * a valid token is served as ever (under its own ``CALIBO_RATE_LIMIT``): its path is the same
      constant-time check, with no look at the throttle and no storage round trip, so workers behind
      one ingress address keep working while one of them sends a rotated token or someone guesses;
    * a missing or malformed ``Authorization`` is answered 429 with ``Retry-After`` without any
      token check;
    * a wrong token is answered 429 with ``Retry-After`` (never 401) after the same check (a valid one
      must be told apart), from this process's memory: no count, no storage round trip.

    A guesser at a throttled address gets a 429 for every wrong token, answered from memory and
    logged once a minute, and learns nothing a 401 would not have said. A correct guess is served like
    any valid token (nothing else tells a guesser from a worker), so against guessing itself the
    defence is the tokens' length: 32 random bytes cannot be guessed at any rate.

    An authenticated request carries its token's identity (a digest prefix, never the token) in
    ``scope[ratelimit.IDENTITY]`` for the per-token limit.
    """

    def __init__(self, app: ASGIApp, tokens: dict[str, str], prefixes: tuple[str, ...] = ("/v1", "/metrics"),
                 failures: Throttle | None = None) -> None:
        self.app = app
        self.prefixes = prefixes
        self.failures = failures
        self.tokens: list[tuple[bytes, str, str]] = []  # digest, role, identity
        for t, role in tokens.items():
            digest = hashlib.sha256(t.encode()).digest()
            self.tokens.append((digest, role, "token:" + digest.hex()[:16]))
        self._refused = Throttled(log, 60.0)

    def lookup(self, token: str) -> tuple[str, str] | None:
        """The token's role and identity, or None; the time taken does not depend on which token
        matched."""
        given = hashlib.sha256(token.encode()).digest()
        found = None
        for digest, role, identity in self.tokens:
            if hmac.compare_digest(digest, given) and found is None:
                found = (role, identity)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.tokens or not any(
                path == p or path.startswith(p + "/") for p in self.prefixes):
            await self.app(scope, receive, send)
            return
        header = (_header(scope, b"authorization") or b"").decode("latin-1")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token:
            found = self.lookup(token)  # every given token, throttled address or not: constant time
            if found is not None:
                if scope["method"] not in ("GET", "HEAD", "OPTIONS") and found[0] != "write":
                    await error_response(403, "forbidden", "this token may only read", "authorization")(
                        scope, receive, send)
                    return
                scope[IDENTITY] = found[1]
                await self.app(scope, receive, send)
                return
            message = "invalid token"
        else:
            message = "an Authorization: Bearer <token> header is required"
        # a failure: 429 from memory for an address over the limit, else a 401 that counts against it
        failures = self.failures
        if failures is not None:
            address = client_address(scope)
            if wait := failures.blocked(address) or await failures.hit(address):
                await self._too_many(address, wait)(scope, receive, send)
                return
        await error_response(401, "unauthorized", message, "authorization", {"WWW-Authenticate": "Bearer"})(
            scope, receive, send)

    def _too_many(self, address: str, wait: int) -> Any:
        self._refused.log(logging.WARNING, "auth", "too many failed authentications from %s: a wrong or "
                          "missing token is answered 429 (valid tokens are served), retry after %d s", address, wait)
        return too_many(wait, "too many failed authentications from this address", "authorization")


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.too_large = f"the request body is larger than {max_bytes} bytes"

    def _too_large(self) -> HTTPException:
        return HTTPException(413, self.too_large, headers=CLOSE)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                size = -1
            if size < 0:
                await error_response(400, "invalid_request", "Content-Length is not a number", "content-length",
                                     CLOSE)(scope, receive, send)
                return
            if size > self.max_bytes:
                await error_response(413, "too_large", self.too_large, "body", CLOSE)(scope, receive, send)
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        seen = 0
        complete = False

        async def bounded() -> Message:
            nonlocal seen, complete
            if complete:
                return await receive()  # after the body: only a disconnect can come
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise HTTPException(408, f"the request body did not arrive within {self.timeout:g} s",
                                    headers=CLOSE) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise self._too_large()
                complete = not message.get("more_body", False)
            return message

        await self.app(scope, bounded, send)


_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
access = logging.getLogger("calibo.access")


class RequestContext:
    """Every HTTP request gets an id (the caller's ``X-Request-ID`` when it is a plain token of up to
    128 characters, else a new one), echoed in the ``X-Request-ID`` response header and put on
    every log line written while the request is served; its latency is observed in the
    ``calibo_http_request_duration_seconds`` histogram, labelled with the route's template (so
    ``/v1/studies/{study}/ask``, not one label per study; ``unmatched`` for a 404 path); with
    ``access_log``, one ``calibo.access`` line per request (method, path, status, duration)."""

    def __init__(self, app: ASGIApp, metrics: Any, access_log: bool = False) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        rid = given.decode() if given is not None and _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        header = (b"x-request-id", rid.encode())
        status = 500
        t0 = time.perf_counter()

        async def with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            await self.app(scope, receive, with_id)
        finally:
            took = time.perf_counter() - t0
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(scope["method"], template, str(status)).observe(took)
            if self.access_log:
                access.info("%s %s %d %.1f ms", scope["method"], scope["path"], status, 1000 * took,
                            extra={"method": scope["method"], "path": scope["path"], "status": status,
                                   "duration_ms": round(1000 * took, 3), "client": (scope.get("client") or ("-",))[0]})
            request_id.reset(token)


STUDIES = b"/v1/studies/"


class StudyPath:
    """Keeps a study name's encoded slashes (``%2F``) inside its path segment.

    The server decodes the path before routing, so a study named ``a/b``, sent as
    ``/v1/studies/a%2Fb/ask``, would route as ``/v1/studies/a/b/ask``. This puts the raw, still
    percent-encoded segment after ``/v1/studies/`` back into the routed path; the route decodes it
    exactly once (``api.routes.study_ref``), so any name that create accepts is reachable.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and raw.startswith(STUDIES) and b"%" in raw[len(STUDIES):].partition(b"/")[0]:
            from urllib.parse import unquote

            head, slash, rest = raw[len(STUDIES):].partition(b"/")
            path = "/v1/studies/" + head.decode("latin-1")
            if slash:
                path += "/" + unquote(rest.decode("latin-1"), encoding="utf-8", errors="replace")
            scope = {**scope, "path": path}
        await self.app(scope, receive, send)
