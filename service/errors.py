"""Errors the service answers with: each carries its HTTP status, a code and the field at fault.

Raised by storage and by the study logic, turned into the wire contract's error
body by ``calibo.server.api.errors``; nothing here knows about HTTP frameworks.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status = 400
    code = "invalid_request"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details  # more keys of the error body (a name_conflict's ``differences``)
        if code is not None:
            self.code = code


class InvalidRequest(ServiceError):
    status = 422
    code = "invalid_request"


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class Unavailable(ServiceError):
    status = 503
    code = "unavailable"
