"""``calibo worker``: a cluster fit worker on the procrastinate queue (see ``queue``).

Each worker process takes fit jobs (``concurrency`` at a time), runs
``jobs.fit_study`` on a thread (the engine's fit; CUDA when this node has a GPU
and the study's surrogate is a torch one) and stores the snapshot itself.

Besides its jobs, every worker keeps the queue healthy:

- a failed fit is recorded on the study and deferred again with exponential
  backoff, up to ``fit_retries`` attempts (then it waits for the next tell, as
  in the local pool); a fit that failed because the database is unreachable is
  retried without counting against them;
- every ``heartbeat`` seconds it looks for jobs whose worker has sent no
  heartbeat for ``stalled`` seconds (killed, frozen, cut off) and sets them
  back to waiting, so a surviving worker fits the study again;
- it touches ``alive_file`` on each pass, which the container's healthcheck
  (``calibo worker --check``) reads;
- with ``metrics_port``, it serves its fit durations and failures to Prometheus
  (``calibo_fit_duration_seconds``, ``calibo_fit_failures_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from procrastinate import App, PsycopgConnector
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.jobs import Status
from prometheus_client import start_http_server

from ..errors import Unavailable
from ..logs import Throttled, one_line
from ..metrics import Metrics
from ..storage import Storage
from .jobs import fit_study, set_device
from .queue import FIT_TASK, QUEUE, conninfo, deferrer, job_kwargs

log = logging.getLogger("calibo.worker")
_outage = Throttled(log, 10.0)


class FitWorker:
    """One ``calibo worker`` process: its procrastinate worker and the stalled-job watch."""

    def __init__(self, database_url: str, *, concurrency: int = 1, retries: int = 3, backoff: float = 0.5,
                 heartbeat: float = 10.0, stalled: float = 30.0, device: str | None = None,
                 alive_file: str | None = None, connect_timeout: float = 5.0, migrate: bool = True,
                 metrics_port: int | None = None) -> None:
        if stalled <= heartbeat:
            raise ValueError("a worker is stalled after more than one heartbeat interval: stalled > heartbeat")
        self.database_url = database_url
        self.concurrency = concurrency
        self.retries = retries
        self.backoff = backoff
        self.heartbeat = heartbeat
        self.stalled = stalled
        self.alive_file = Path(alive_file) if alive_file else None
        self.connect_timeout = connect_timeout
        self.migrate = migrate
        set_device(device)
        self.storage: Storage | None = None
        self.app = App(connector=PsycopgConnector(conninfo=conninfo(database_url, connect_timeout),
                                                  min_size=1, max_size=concurrency + 3))
        self.app.task(name=FIT_TASK, queue=QUEUE, pass_context=False)(self._fit)
        self.fits_done = 0
        self.recovered = 0
        self.metrics_port = metrics_port
        self.metrics = Metrics()  # fit durations and failures, served on metrics_port (Prometheus)

    # ----------------------------------------------------------------- run
    def run(self) -> None:
        asyncio.run(self.run_async())

    async def run_async(self) -> None:
        if self.metrics_port:
            start_http_server(self.metrics_port, registry=self.metrics.registry)
            log.info("calibo worker %d: Prometheus metrics on :%d/metrics", os.getpid(), self.metrics_port)
        self.storage = await asyncio.to_thread(self._connect)
        async with self.app.open_async():
            watch = asyncio.create_task(self._watch(), name="calibo-stalled-watch")
            try:
                log.info("calibo worker %d ready: %d fit(s) at a time, queue %r", os.getpid(), self.concurrency,
                         QUEUE)
                await self.app.run_worker_async(
                    queues=[QUEUE], concurrency=self.concurrency, delete_jobs="successful",
                    update_heartbeat_interval=self.heartbeat, stalled_worker_timeout=self.stalled,
                    install_signal_handlers=True, shutdown_graceful_timeout=30.0)
            finally:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
                self.storage.close()
        log.info("calibo worker %d stopped after %d fit(s)", os.getpid(), self.fits_done)

    def _connect(self) -> Storage:
        """The study storage, waiting for the database (a worker may start before it, or before the
        API has migrated it: with ``migrate`` it brings the schema to head itself, serialised with
        the replicas doing the same)."""
        pause = 0.5
        while True:
            try:
                return Storage(self.database_url, migrate=self.migrate, connect_timeout=self.connect_timeout)
            except Unavailable as e:
                log.warning("worker waits for the database (%s); retry in %.1f s", one_line(e), pause)
            time.sleep(pause)
            pause = min(10.0, pause * 2)

    # ----------------------------------------------------------------- job
    async def _fit(self, study_id: int, attempt: int = 0) -> dict[str, Any]:
        """The fit job of ``study_id``; ``attempt`` counts earlier failures of this fit."""
        assert self.storage is not None
        try:
            result = await asyncio.to_thread(fit_study, study_id, self.storage)
        except Unavailable as e:  # the database's fault, not the fit's: try again, without counting
            _outage.log(logging.WARNING, "fit", "fit of study %s waits for the database: %s", study_id, one_line(e))
            await self._again(study_id, attempt, self.backoff * 4)
            return {"study_id": study_id, "status": "deferred"}
        except Exception as e:  # noqa: BLE001 - recorded on the study and retried with backoff
            message = f"{type(e).__name__}: {e}"
            retry = attempt < self.retries
            delay = self.backoff * 2 ** attempt
            log.error("fit of study %s failed (%s)%s", study_id, message,
                      f"; retry in {delay:.1f} s" if retry else "; giving up until the next tell", exc_info=e)
            self.metrics.fit_failures.inc()
            with contextlib.suppress(Unavailable):
                await asyncio.to_thread(self.storage.record_fit_error, study_id, message)
            if retry:
                await self._again(study_id, attempt + 1, delay)
            return {"study_id": study_id, "status": "failed"}
        self.fits_done += result.get("status") == "fitted"
        self.metrics.observe_fit(result)
        if result.get("device_fallback"):
            log.warning("study %s: %s", study_id, result["device_fallback"])
        if result.get("status") == "fitted":
            log.info("study %s: fitted on %d observations in %.3f s on %s (version %s)", study_id,
                     result["n_obs"], result["fit_seconds"], result.get("device", "cpu"), result.get("version"))
        return result

    async def _again(self, study_id: int, attempt: int, delay: float) -> None:
        try:
            await deferrer(self.app, study_id, attempt, delay).defer_async(**job_kwargs(study_id, attempt))
        except AlreadyEnqueued:
            pass  # a fit of it waits already (deferred by a tell): it covers this one

    # --------------------------------------------------------------- watch
    async def _watch(self) -> None:
        """Every heartbeat: touch the alive file and set stalled jobs back to waiting."""
        trouble = Throttled(log, 60.0)
        while True:
            self._touch()
            try:
                self.recovered += await self.recover_stalled()
            except Exception as e:  # noqa: BLE001 - the watch must outlive any one pass (database down...)
                trouble.log(logging.WARNING, type(e).__name__, "stalled-job watch: %s", one_line(e))
            await asyncio.sleep(self.heartbeat)

    async def recover_stalled(self) -> int:
        """Jobs running on a worker without a heartbeat for ``stalled`` seconds go back to the queue;
        how many. When a fit of the same study already waits, the stalled job is marked failed
        instead (the waiting one fits everything, and the queue keeps one waiting job per study)."""
        n = 0
        jm = self.app.job_manager
        for job in await jm.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=self.stalled):
            try:
                await jm.retry_job(job)
                log.warning("fit job %s (study %s) stalled on worker %s: queued again", job.id,
                            job.task_kwargs.get("study_id"), job.worker_id)
            except Exception:  # noqa: BLE001 - the queueing lock: a fit of that study waits already
                await jm.finish_job(job, Status.FAILED, delete_job=False)
                log.warning("fit job %s (study %s) stalled on worker %s: a queued fit replaces it", job.id,
                            job.task_kwargs.get("study_id"), job.worker_id)
            n += 1
        return n

    def _touch(self) -> None:
        if self.alive_file is not None:
            with contextlib.suppress(OSError):
                self.alive_file.parent.mkdir(parents=True, exist_ok=True)
                self.alive_file.touch()


def check_alive(alive_file: str, max_age: float) -> bool:
    """Whether a worker touched ``alive_file`` within ``max_age`` seconds (the healthcheck)."""
    try:
        return time.time() - os.stat(alive_file).st_mtime <= max_age
    except OSError:
        return False
