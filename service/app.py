"""``create_app(settings)``: the FastAPI application with its storage, fit pool, reaper and routes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from calibo import __version__

from .api import AUTH_DOC, errors, router
from .api.headers import HeadAsGet, SecurityHeaders
from .api.middleware import BearerAuth, BodyLimit, CatchAll, RequestContext, StudyPath
from .api.ratelimit import ForwardedFor, RateLimit, throttles
from .api.schemas import Health
from .config import Settings
from .dashboard import install as install_dashboard
from .errors import Unavailable
from .logs import Throttled, one_line
from .metrics import Metrics
from .storage import Storage
from .studies import StudyService
from .studies.calibration import objective_records
from .studies.reaper import reap_once
from .workers import FitPool, Fits

log = logging.getLogger("calibo")

# Handlers are sync and run on anyio's thread pool; an ask of a sequential user
# may sit there waiting for a fit, so leave room for many concurrent clients.
THREADS = 128
HEALTH_TTL = 1.0  # seconds a database check answers /healthz for


class Readiness:
    """Whether the database answers, checked at most once per ``HEALTH_TTL`` however often asked."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._at = -HEALTH_TTL
        self._ok = False
        self._lock = asyncio.Lock()

    async def ok(self) -> bool:
        async with self._lock:  # concurrent probes share one check
            if time.monotonic() - self._at >= HEALTH_TTL:
                try:
                    await anyio.to_thread.run_sync(self.storage.ping)
                    self._ok = True
                except Unavailable:
                    self._ok = False
                self._at = time.monotonic()
            return self._ok


def _fits(settings: Settings, storage: Storage, metrics: Metrics) -> Fits:
    """Where this replica's refits go: its own process pool (its fits observed in ``metrics``), or
    the cluster's queue (the workers have their own metrics)."""
    if settings.worker_mode == "queue":
        from .workers.queue import QueueFits  # procrastinate: only imported where it is used

        return QueueFits(storage, settings.database_url, connect_timeout=settings.db_timeout_seconds)
    return FitPool(storage, settings.database_url, workers=settings.workers, retries=settings.fit_retries,
                   device=settings.device, observer=metrics)


async def _housekeeping(svc: StudyService, fits: Fits, interval: float) -> None:
    """Every ``interval`` seconds: fail orphaned running trials (see ``studies.reaper``) and resume
    fits that gave up while the database was unreachable."""
    trouble = Throttled(log, 60.0)
    while True:
        await asyncio.sleep(interval)
        try:
            await anyio.to_thread.run_sync(reap_once, svc)
            fits.resume_stalled()
        except Unavailable:
            pass  # storage has said so, once per interval
        except Exception as e:  # noqa: BLE001 - the loop must outlive any one pass
            trouble.log(logging.ERROR, type(e).__name__, "housekeeping pass failed: %s", one_line(e), exc_info=e)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    tokens = settings.tokens()  # a bad CALIBO_API_TOKENS fails at start, not at the first request
    per_token, auth_failures = throttles(settings.rate_limit, settings.auth_failure_limit,
                                         settings.rate_limit_storage, auth=bool(tokens))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
        storage = await anyio.to_thread.run_sync(lambda: Storage(
            settings.database_url, migrate=settings.migrate, connect_timeout=settings.db_timeout_seconds))
        fits = await anyio.to_thread.run_sync(_fits, settings, storage, metrics)
        app.state.storage = storage
        app.state.fits = fits
        metrics.watch(storage, fits.depth, objective_records)
        app.state.studies = StudyService(settings, storage, fits, metrics)
        app.state.readiness = Readiness(storage)
        lagging = await anyio.to_thread.run_sync(storage.studies_needing_fit)
        for study_id in lagging:  # tells that landed after the last fit before a restart
            fits.request(study_id)
        housekeeping = asyncio.create_task(
            _housekeeping(app.state.studies, fits, settings.reaper_interval_seconds))
        where = ("fits on the job queue (`calibo worker` processes)" if settings.worker_mode == "queue" else
                 f"{settings.workers} fit worker(s)"
                 + (" warming up (/healthz says ready once they are warm)" if settings.workers else ""))
        log.info("calibo %s started: %s, %s, %d studies queued for a refit",
                 __version__, storage.engine.url.render_as_string(hide_password=True), where, len(lagging))
        try:
            yield
        finally:
            housekeeping.cancel()
            with suppress(asyncio.CancelledError):
                await housekeeping
            await anyio.to_thread.run_sync(fits.close)
            storage.close()

    docs = settings.docs
    app = FastAPI(
        title="calibo",
        version=__version__,
        summary="Ask/tell hyperparameter optimization from conformally calibrated surrogates",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.settings = settings
    metrics = app.state.metrics = Metrics()
    errors.install(app)
    _middleware(app, settings, tokens, per_token, auth_failures, metrics)
    _service_routes(app, settings, metrics, bool(tokens))
    app.include_router(router, dependencies=[AUTH_DOC] if tokens else None)
    install_dashboard(app)
    return app


def _middleware(app: FastAPI, settings: Settings, tokens: Any, per_token: Any, auth_failures: Any,
                metrics: Metrics) -> None:
    """The middleware stack, innermost first."""
    # outermost last: CatchAll sees everything, auth runs before any body is read
    app.add_middleware(HeadAsGet)  # innermost: HEAD routes as GET (logged and authorised as HEAD)
    app.add_middleware(StudyPath)  # before routing, a study name's %2F stays in its segment
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout_seconds)
    if per_token is not None:  # inside auth: counts per token, before any body is read
        app.add_middleware(RateLimit, throttle=per_token)
    app.add_middleware(BearerAuth, tokens=tokens, failures=auth_failures)
    app.add_middleware(CatchAll)
    app.add_middleware(RequestContext, metrics=metrics, access_log=settings.access_log)
    # outermost: on every answer, errors included; /docs and /redoc load their CDN scripts
    app.add_middleware(SecurityHeaders, docs=("/docs", "/redoc") if settings.docs else ())
    if settings.trusted_proxies:  # before all of them: every layer sees the client behind the proxies
        app.add_middleware(ForwardedFor, trusted=settings.trusted_proxies)


def _service_routes(app: FastAPI, settings: Settings, metrics: Metrics, auth: bool) -> None:
    """The service's own routes: readiness, liveness and the Prometheus metrics."""
    @app.get("/healthz", response_model=Health, tags=["service"], summary="Readiness",
             description="200 while the database answers (checked at most once a second) and every fit "
             "process is alive and warmed up; 503 with Retry-After while the database does not answer, the "
             "fit processes warm up (at start, or after one died and was replaced) or none is alive. No auth.",
             responses={503: {"model": Health, "description": "the database is unreachable, or the fit pool "
                              "is starting or down"}})
    async def healthz() -> Any:
        db = await app.state.readiness.ok()
        pool = app.state.fits.readiness()
        body = {"status": "ok" if db and pool == "ok" else "unavailable", "database": "ok" if db else "down",
                "fit_pool": pool}
        if body["status"] == "ok":
            return body
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(settings.retry_after_seconds)})

    @app.get("/livez", response_model=Health, response_model_exclude_none=True, tags=["service"],
             summary="Liveness",
             description="200 while the process serves requests, whatever the database does. No auth.")
    async def livez() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", tags=["service"], summary="Prometheus metrics",
             description="Prometheus text format: request latency per route, asks, tells, reports, fit "
             "durations of this process's pool, the fit queue's depth, and per study (the newest 200) trial "
             "counts, snapshot lag, coverage and breach rate per interval pair over its last 100 predicted "
             "trials (read from the database at most every 10 s). Needs a token (any) when auth is on.",
             response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
             dependencies=[AUTH_DOC] if auth else None)
    async def metrics_page() -> Response:
        body = await anyio.to_thread.run_sync(metrics.render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)
