"""``create_app(settings)``: the FastAPI application with its storage, fit pool and routes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from . import __version__
from .api import errors, router
from .api.schemas import Health
from .config import Settings
from .storage import Storage
from .studies import StudyService
from .workers import FitPool

log = logging.getLogger("calibo")

# Handlers are sync and run on anyio's thread pool; an ask of a sequential user
# may sit there waiting for a fit, so leave room for many concurrent clients.
THREADS = 128


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    tokens = settings.tokens()  # a bad CALIBO_API_TOKENS fails at start, not at the first request

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
        storage = await anyio.to_thread.run_sync(lambda: Storage(settings.database_url, migrate=settings.migrate))
        fits = FitPool(storage, settings.database_url, workers=settings.workers, retries=settings.fit_retries)
        app.state.storage = storage
        app.state.fits = fits
        app.state.studies = StudyService(settings, storage, fits)
        lagging = await anyio.to_thread.run_sync(storage.studies_needing_fit)
        for study_id in lagging:  # tells that landed after the last fit before a restart
            fits.request(study_id)
        log.info("calibo %s ready: %s, %d fit worker(s), %d studies queued for a refit",
                 __version__, storage.engine.url.render_as_string(hide_password=True), settings.workers,
                 len(lagging))
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(fits.close)
            storage.close()

    app = FastAPI(
        title="calibo",
        version=__version__,
        summary="Ask/tell hyperparameter optimization from conformally calibrated surrogates",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.tokens = tokens
    errors.install(app)

    @app.get("/healthz", response_model=Health, tags=["service"], summary="Liveness")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(router)
    return app
