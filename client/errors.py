"""Typed errors raised by the calibo client.

Every error the server answers carries ``{"error": {"code", "message", "field"}}``;
the client turns it into one of the classes below by HTTP status, keeping the
server's code, message and field. Bodies that are not in that shape (a proxy's
HTML page, FastAPI's ``{"detail": ...}``) still map by status, with a code
derived from the status and the body's text as the message.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from . import _reprs

__all__ = [
    "CaliboError",
    "ConnectionFailed",
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "ServerError",
    "Terminated",
    "TrialPruned",
    "Unauthorized",
    "error_from_response",
]

# The code the server would send for a status, used when the body carries none.
_DEFAULT_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    422: "invalid_request",
    500: "internal",
    503: "unavailable",
}
_SNIPPET = 300


class CaliboError(Exception):
    """Base of every error the client raises for a failed call.

    ``status`` is the HTTP status (None when no response came back), ``code`` the
    server's machine-readable code, ``message`` its explanation and ``field`` the
    request field it is about (or None).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "error",
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        # add_trials: rows of the call stored before the failing request, and their views
        self.stored: int | None = None
        self.added: list[dict[str, Any]] | None = None

    def __str__(self) -> str:
        head = f"{self.status} {self.code}" if self.status is not None else self.code
        text = f"{head}: {self.message}"
        if self.field:
            text += f" (field: {self.field})"
        return text

    def __repr__(self) -> str:
        message = self.message if len(self.message) <= 80 else self.message[:77] + "..."
        return (
            f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, "
            f"message={message!r}, field={_reprs.value(self.field)})"
        )


class InvalidRequest(CaliboError):
    """400 / 422: the request was malformed or failed validation."""


class Unauthorized(CaliboError):
    """401: no token, or a token the server does not know."""


class Forbidden(Unauthorized):
    """403: a valid token without the right to do this (a ``read`` token writing)."""


class NotFound(CaliboError):
    """404: no such study or trial."""


class Conflict(CaliboError):
    """409: ``name_conflict``, ``trial_finished`` or another ``conflict``."""


class ServerError(CaliboError):
    """5xx: the server failed (``internal``) or is not available (``unavailable``)."""


class ConnectionFailed(CaliboError):
    """No usable response: connection errors after the retries, or one not safe to retry."""

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message, status=None, code="connection_failed", field=None)
        self.attempts = attempts


class TrialPruned(Exception):
    """Raised by an objective to stop its trial early (like ``optuna.TrialPruned``).

    Not a :class:`CaliboError`: no call failed. ``optimize`` tells the trial
    ``state="pruned"``, with the last value its reporter sent if any, and goes on
    with the next trial, whatever ``catch`` says.
    """


class Terminated(SystemExit):
    """Raised by ``optimize`` when the process got SIGTERM while it ran (in the main thread).

    ``optimize`` turns SIGTERM into an orderly stop, as it does Ctrl-C: no more
    asks, every trial still running told ``state="failed"`` with
    ``{"fail_reason": "Terminated: SIGTERM"}``, the tells in flight waited for;
    then it raises this. A :class:`SystemExit` (``except Exception`` does not
    catch it): uncaught, the process exits with status 143 (128 + SIGTERM)
    and no traceback, as a process ended by SIGTERM does.
    """

    def __init__(self) -> None:
        super().__init__(143)

    def __str__(self) -> str:
        return "SIGTERM"


def _class_for(status: int) -> type[CaliboError]:
    if status in (400, 422):
        return InvalidRequest
    if status == 401:
        return Unauthorized
    if status == 403:
        return Forbidden
    if status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status >= 500:
        return ServerError
    return CaliboError


def _default_code(status: int) -> str:
    return _DEFAULT_CODES.get(status, f"http_{status}")


def _text_snippet(response: httpx.Response) -> str:
    try:
        text = response.text.strip()
    except (UnicodeDecodeError, LookupError):
        text = ""
    text = " ".join(text.split())
    if len(text) > _SNIPPET:
        text = text[:_SNIPPET] + "..."
    return text or response.reason_phrase or f"HTTP {response.status_code}"


def _parts(response: httpx.Response) -> tuple[str, str, str | None]:
    """(code, message, field) from an error response, whatever its body."""
    status = response.status_code
    try:
        body: Any = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = error.get("code")
        message = error.get("message")
        field = error.get("field")
        return (
            code if isinstance(code, str) and code else _default_code(status),
            message if isinstance(message, str) and message else _text_snippet(response),
            field if isinstance(field, str) and field else None,
        )
    if isinstance(body, dict) and "detail" in body:  # FastAPI's own shape
        detail = body["detail"]
        message = detail if isinstance(detail, str) else json.dumps(detail)[:_SNIPPET]
        return _default_code(status), message, None
    return _default_code(status), _text_snippet(response), None


def error_from_response(response: httpx.Response) -> CaliboError:
    """The typed error for a 4xx / 5xx response."""
    code, message, field = _parts(response)
    cls = _class_for(response.status_code)
    return cls(message, status=response.status_code, code=code, field=field)
