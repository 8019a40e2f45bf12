"""HTTP at the edge of the app: security headers on every answer, and HEAD answered as GET.

Both are plain ASGI (no BaseHTTPMiddleware), like ``api.middleware``:

* ``SecurityHeaders`` adds to every response, errors and 404s included,
  ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``,
  ``X-Frame-Options: DENY`` and a ``Content-Security-Policy`` chosen by path:
  the dashboard's strict policy (``DASHBOARD_CSP``: scripts, styles and
  requests from the server itself only, no inline script or style, no
  framing), the API's (``API_CSP``: JSON and text load nothing), and for
  the interactive API docs (``/docs``, ``/redoc``), whose pages load Swagger
  UI and ReDoc from a CDN and start them with an inline script, a policy that
  only forbids framing (``DOCS_CSP``). A header the route set itself is kept.
* ``HeadAsGet`` answers ``HEAD`` on every path as ``GET`` would (same status
  and headers, ``Content-Length`` included) without the body, so every GET
  route, the static files and the 404/401/405 answers serve HEAD with no
  per-route code. The OpenAPI document lists the GET operations only.
"""

from __future__ import annotations

from .asgi import ASGIApp, Message, Receive, Scope, Send

# the page, its script and styles from the server itself; data: for the page's empty favicon
DASHBOARD_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                 "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
API_CSP = "default-src 'none'; frame-ancestors 'none'"
# Swagger UI and ReDoc: scripts and styles from their CDN and an inline start script; framing still refused
DOCS_CSP = "base-uri 'none'; object-src 'none'; frame-ancestors 'none'"

# on every response, whatever its path
ALWAYS: tuple[tuple[str, str], ...] = (
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


class SecurityHeaders:
    def __init__(self, app: ASGIApp, dashboard: str = "/dashboard", docs: tuple[str, ...] = ("/docs", "/redoc")
                 ) -> None:
        self.app = app
        self.dashboard = dashboard
        self.docs = docs
        self.headers = {csp: [(k.encode(), v.encode()) for k, v in (*ALWAYS, ("content-security-policy", csp))]
                        for csp in (DASHBOARD_CSP, API_CSP, DOCS_CSP)}

    def policy(self, path: str) -> str:
        """The Content-Security-Policy for a response to ``path``."""
        if _under(path, self.dashboard):
            return DASHBOARD_CSP
        if any(_under(path, p) for p in self.docs):
            return DOCS_CSP
        return API_CSP

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = self.headers[self.policy(scope.get("path", ""))]

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {k.lower() for k, _ in headers}
                headers.extend(h for h in extra if h[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        # a copy: the server reads the method of its own scope to leave the body out as well
        inner = {**scope, "method": "GET"}

        async def without_body(message: Message) -> None:
            if message["type"] in ("http.response.body", "http.response.pathsend"):
                message = {"type": "http.response.body", "body": b"", "more_body": message.get("more_body", False)}
            await send(message)

        try:
            await self.app(inner, receive, without_body)
        finally:
            if "route" in inner:  # for the request metrics, labelled by route (api.middleware.RequestContext)
                scope["route"] = inner["route"]
