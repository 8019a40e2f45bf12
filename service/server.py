"""The HTTP server around the app: uvicorn, with deadlines for slow clients.

uvicorn closes idle keep-alive connections, but a client that sends its
request headers or body a byte at a time holds a connection (and, with the
body, a request task) for as long as it likes. ``GuardedHttpToolsProtocol``
gives every request a deadline for its headers (from its first byte, or from
the connection's opening) and one for its body (from the end of its
headers); a request past either is cut off by closing the connection. Apps
that read the body get a 408 a moment earlier from ``api.middleware``.

It also bounds a request's head (request line, headers and the blank line
that ends them) at ``MAX_HEADER_BYTES``, exactly, however the head is cut
into reads: the bytes of a read up to the end of the head are counted and
given to the parser first, so a body after them is not counted, and the head
of a request pipelined after them is counted from its own first byte. A head
over the bound answers 431 (after the responses to the requests before it on
the connection); the connection then reads no more requests, sends its end
of the stream and discards what the client still sends until it closes (or
``LINGER_SECONDS`` pass), so the client reads the 431 rather than a reset
connection. Bytes of a pipelined request that arrive in the same read as the
end of the previous request's body reach the parser before they are counted,
so such a head may exceed the bound by at most that one read.

``X-Forwarded-For`` is believed only from ``CALIBO_TRUSTED_PROXIES`` (``api.ratelimit.ForwardedFor``,
the app's outermost middleware); uvicorn's own proxy handling, which trusts 127.0.0.1 by default, is off.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .api.headers import ALWAYS
from .config import Settings

# request line plus headers; llhttp itself accepts far more
MAX_HEADER_BYTES = 64 * 1024
END_OF_HEAD = b"\r\n\r\n"  # llhttp requires CRLF line ends
LINGER_SECONDS = 2.0  # after a 431: how long the rest of what the client sends is read and dropped
TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n"
             + b"".join(f"{k}: {v}\r\n".encode() for k, v in ALWAYS) + b"\r\n")


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body deadlines and a header size bound."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._in_headers = True
        self._header_bytes = 0  # of the current request's head, fed to the parser
        self._tail = b""  # its last bytes (up to 3), where an END_OF_HEAD may begin
        self._refused = False  # a head over the bound: the rest of the connection is dropped
        self._answered = False  # ...after its 431

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's own
        super().connection_made(transport)
        self._arm(self.header_timeout)  # a connection that never sends a request

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        while data and self._in_headers and not self._refused and not self.transport.is_closing():
            if self._deadline is None:  # the first byte of a request on a kept-alive connection
                self._arm(self.header_timeout)
            room = MAX_HEADER_BYTES - self._header_bytes
            end = (self._tail + data[:room]).find(END_OF_HEAD)
            if end < 0 and len(data) > room:
                self._refuse()
                return
            # up to the head's end: a body or a pipelined request after it is not header bytes
            cut = end + len(END_OF_HEAD) - len(self._tail) if end >= 0 else len(data)
            piece, data = data[:cut], data[cut:]
            self._header_bytes += len(piece)
            self._tail = (self._tail + piece)[-(len(END_OF_HEAD) - 1):]
            super().data_received(piece)  # on_headers_complete resets the count when this ends the head
            if self.parser.should_upgrade() or self.transport.get_protocol() is not self:
                break  # the rest is for the protocol it switched to (uvicorn's own handling)
        if data and not self._refused and not self.transport.is_closing():
            super().data_received(data)

    def _refuse(self) -> None:
        """A head over the bound: no more requests are read from this connection, and it answers 431
        once the responses to the requests before it are out."""
        self._refused = True
        self._disarm()
        if self.cycle is None or self.cycle.response_complete:
            self._answer_too_large()

    def _answer_too_large(self) -> None:
        self._answered = True
        if self.transport.is_closing():
            return
        self.transport.write(TOO_LARGE)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._disarm()
        self._deadline = self.loop.call_later(LINGER_SECONDS, self._too_slow)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refused and not self._answered and self.cycle.response_complete:
            self._answer_too_large()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._header_bytes = 0
        self._tail = b""
        # a moment after the app's own 408 (api.middleware), for requests no app reads
        self._arm(self.body_timeout + 1.0)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._in_headers = True
        super().on_message_complete()


def protocol_for(settings: Settings) -> type[GuardedHttpToolsProtocol]:
    """The protocol class with this server's deadlines."""
    return type("CaliboHttpProtocol", (GuardedHttpToolsProtocol,),
                {"header_timeout": settings.header_timeout_seconds,
                 "body_timeout": settings.body_timeout_seconds})


def uvicorn_config(app: Any, settings: Settings, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
    """uvicorn settings for calibo: guarded protocol, keep-alive and connection bounds.

    Whose ``X-Forwarded-For`` is believed is ``CALIBO_TRUSTED_PROXIES`` alone: uvicorn's own proxy
    handling (on by default, trusting 127.0.0.1 or ``FORWARDED_ALLOW_IPS``, IP networks only in
    recent versions) is off; the app's ``api.ratelimit.ForwardedFor`` does it when the setting names
    any proxy; empty, the connection's address is the client's.
    """
    return uvicorn.Config(
        app, host=host, port=port, http=protocol_for(settings), lifespan="on",
        timeout_keep_alive=settings.keep_alive_seconds,  # type: ignore[arg-type]  # uvicorn says int; float works
        limit_concurrency=settings.max_connections,
        proxy_headers=False, **kwargs,
    )
