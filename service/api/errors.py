"""Every error leaves as ``{"error": {"code", "message", "field"}}`` with the right status.

Bad input is the caller's mistake (4xx naming the field); an unexpected
exception is logged with its traceback and answered 500 without internals.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..engine.errors import FieldError
from ..errors import ServiceError

log = logging.getLogger("calibo.api")

_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
               422: "invalid_request", 429: "too_many_requests", 503: "unavailable"}


def error_response(status: int, code: str, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "field": field}}, status_code=status,
                        headers=headers)


def _field(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or None


def install(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_: Request, e: ServiceError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        return error_response(e.status, e.code, e.message, e.field, headers)

    @app.exception_handler(FieldError)
    async def _engine(_: Request, e: FieldError) -> JSONResponse:
        return error_response(422, "invalid_request", e.message, e.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
        errs = e.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid request", "type": ""}
        if first.get("type") == "json_invalid":
            return error_response(400, "malformed_json", f"the body is not valid JSON: {first.get('msg')}",
                                  "body")
        field = _field(tuple(first.get("loc", ())))
        msg = str(first.get("msg", "invalid request"))
        if len(errs) > 1:
            msg += f" (and {len(errs) - 1} more)"
        if first.get("type") == "missing" and field is None:
            return error_response(422, "invalid_request", "a JSON body is required", "body")
        return error_response(422, "invalid_request", msg, field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(e.status_code, "error")
        return error_response(e.status_code, code, str(e.detail), None, getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, e: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal", "internal server error; the server log has the details")
