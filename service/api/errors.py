"""Every error leaves as ``{"error": {"code", "message", "field"}}`` with the right status.

Bad input is the caller's mistake (4xx naming the field); an unreachable
database answers 503 with Retry-After; an unexpected exception is answered
500 without internals by ``middleware.CatchAll``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from calibo.engine.errors import FieldError

from ..errors import ServiceError
from ..studies.attrs import AttrError
from .schemas import UNION_TAGS

_HTTP_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 408: "timeout", 409: "conflict", 413: "too_large",
               415: "unsupported_media_type", 422: "invalid_request", 429: "too_many_requests", 503: "unavailable"}


def error_response(status: int, code: str, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None, details: dict[str, Any] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "field": field, **(details or {})}},
                        status_code=status, headers=headers)


_PARAM_TAGS = frozenset({"float", "int", "categorical", "ordinal"})


def _field(loc: tuple[Any, ...], kind: str = "") -> str | None:
    """The dotted field of a validation error, as the engine would name it.

    ``space.x.categorical.choices`` (pydantic names the union member it tried)
    becomes ``space.x.choices``; an unknown or missing ``type`` tag is ``space.x.type``.
    """
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    if parts and parts[0] in UNION_TAGS:  # the shape of a body that takes one of two
        parts = parts[1:]
    if len(parts) >= 3 and parts[0] == "space" and parts[2] in _PARAM_TAGS:
        del parts[2]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("type")
    return ".".join(parts) or None


def install(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(request: Request, e: ServiceError) -> JSONResponse:
        headers = None
        if e.status == 503:
            headers = {"Retry-After": str(request.app.state.settings.retry_after_seconds)}
        return error_response(e.status, e.code, e.message, e.field, headers, e.details)

    @app.exception_handler(FieldError)
    async def _engine(_: Request, e: FieldError) -> JSONResponse:
        return error_response(422, "invalid_request", e.message, e.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
        errs = e.errors()
        first: dict[str, Any] = errs[0] if errs else {"loc": (), "msg": "invalid request", "type": ""}
        if first.get("type") == "json_invalid":
            return error_response(400, "malformed_json", f"the body is not valid JSON: {first.get('msg')}",
                                  "body")
        field = _field(tuple(first.get("loc", ())), str(first.get("type", "")))
        msg = str(first.get("msg", "invalid request"))
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, AttrError):  # a user attribute: name the part inside it
            msg = cause.reason
            if cause.path:
                field = f"{field}.{cause.path}" if field else cause.path
        if len(errs) > 1:
            msg += f" (and {len(errs) - 1} more)"
        if first.get("type") == "missing" and field is None:
            return error_response(422, "invalid_request", "a JSON body is required", "body")
        return error_response(422, "invalid_request", msg, field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(e.status_code, "error")
        headers = dict(getattr(e, "headers", None) or {})
        if e.status_code == 405:  # the router names one route's methods; a path may have several routes
            headers["Allow"] = ", ".join(allowed_methods(request))
        field = {408: "body", 413: "body"}.get(e.status_code)
        return error_response(e.status_code, code, str(e.detail), field, headers or None)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route answers on the request's path (asked of the routes themselves, so
    routers included with a prefix count too); HEAD wherever GET is (``api.headers.HeadAsGet``)."""
    methods = set()
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            methods.add(method)
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)
