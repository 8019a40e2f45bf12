"""The dashboard: ``GET /dashboard`` and its static assets, shipped in the package (no CDN).

A plain page (``static/index.html``, ``app.js``, ``style.css``; charts by the vendored uPlot in
``static/vendor/``, see ``VENDORED.md`` there) that polls the JSON API under ``/v1``. The page and its
assets are public; the data needs the token the user enters once (kept in the tab's sessionStorage,
never in localStorage). The page runs under a strict Content-Security-Policy (``api.headers``): no
inline script, style or event handler, everything from the server itself, no framing.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Serve the page at ``/dashboard`` and its assets under ``/dashboard/static`` (outside /v1: no auth;
    the page reads /v1 with the token the user gives it)."""

    @app.get("/dashboard", include_in_schema=False)
    def dashboard() -> FileResponse:
        # no-cache: a new release's page (and the asset names it references) shows without a hard reload
        return FileResponse(STATIC / "index.html", media_type="text/html",
                            headers={"Cache-Control": "no-cache"})

    @app.get("/dashboard/", include_in_schema=False)
    def dashboard_slash(request: Request) -> RedirectResponse:
        # the page links its assets relatively (dashboard/static/...), which resolve from /dashboard only;
        # a relative Location keeps working behind a reverse proxy that serves calibo under a prefix
        query = request.url.query
        return RedirectResponse("../dashboard" + (f"?{query}" if query else ""), status_code=307)

    app.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")
