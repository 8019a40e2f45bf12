"""The HTTP server around the app: uvicorn, with deadlines for slow clients.

uvicorn closes idle keep-alive connections, but a client that sends its
request headers or body a byte at a time holds a connection (and, with the
body, a request task) for as long as it likes. ``GuardedHttpToolsProtocol``
gives every request a deadline for its headers (from its first byte, or from
the connection's opening) and one for its body (from the end of its
headers); a request past either is cut off by closing the connection. Apps
that read the body get a 408 a moment earlier from ``api.middleware``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .config import Settings

# request line plus headers; llhttp itself accepts far more
MAX_HEADER_BYTES = 64 * 1024


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body deadlines and a header size bound."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._in_headers = True
        self._header_bytes = 0

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

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout)  # a connection that never sends a request

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            if self._deadline is None:  # the first byte of a request on a kept-alive connection
                self._arm(self.header_timeout)
            # counted before this chunk, which may also carry the start of the body
            if self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
                self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                                     b"content-length: 0\r\nconnection: close\r\n\r\n")
                self.transport.close()
                return
            self._header_bytes += len(data)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._header_bytes = 0
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
    """uvicorn settings for calibo: guarded protocol, keep-alive and connection bounds."""
    return uvicorn.Config(
        app, host=host, port=port, http=protocol_for(settings), lifespan="on",
        timeout_keep_alive=settings.keep_alive_seconds, limit_concurrency=settings.max_connections,
        **kwargs,
    )
