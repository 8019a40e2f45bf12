"""The cluster's fit queue (``CALIBO_WORKER_MODE=queue``): procrastinate on the studies' PostgreSQL.

API replicas defer a fit job per study; ``calibo worker`` processes (see
``worker``) take them. The queue does what the local pool does in memory:

- **coalescing**: every fit job of a study carries the queueing lock
  ``calibo-fit-<id>``, and procrastinate keeps at most one such job waiting
  (``todo``); deferring another while one waits is a no-op (``AlreadyEnqueued``).
  A job deferred while one *runs* waits behind it: one more fit on everything
  told meanwhile, as the pool's dirty flag does.
- **one fit per study at a time**: the same string is the job's ``lock``, so
  a worker only takes a study's job when none of that study runs.
- **retries**: a failed fit defers itself again with backoff (see ``worker``),
  and a job whose worker died or stalled (no heartbeat) is set back to waiting
  by the surviving workers.

This module is the API's side (``QueueFits``, the same interface as ``FitPool``)
and what both sides share (task name, queue, locks, connection string).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from procrastinate import App, SyncPsycopgConnector
from procrastinate.exceptions import AlreadyEnqueued
from sqlalchemy.engine import make_url

from ..errors import Unavailable
from ..logs import Throttled, one_line
from ..storage import Storage

log = logging.getLogger("calibo.workers")
_outage = Throttled(log, 10.0)

FIT_TASK = "calibo.fit"
QUEUE = "fits"
FLUSH_SECONDS = 0.02  # tells of this long are coalesced into one defer per study
WAIT_POLL_SECONDS = 0.025  # how often a sequential user's ask looks for its fit


def fit_lock(study_id: int) -> str:
    """The queueing lock and the lock of ``study_id``'s fit jobs."""
    return f"calibo-fit-{study_id}"


def conninfo(database_url: str, connect_timeout: float = 5.0) -> str:
    """A libpq connection string for procrastinate from calibo's SQLAlchemy URL."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError("the fit queue needs PostgreSQL (CALIBO_DATABASE_URL=postgresql://...)")
    url = url.set(drivername="postgresql").update_query_dict({"connect_timeout": str(max(1, round(connect_timeout)))})
    return url.render_as_string(hide_password=False)


def deferrer(app: App, study_id: int, attempt: int = 0, delay: float = 0.0) -> Any:
    """The configured job deferrer of a fit of ``study_id`` (``defer`` or ``defer_async`` it)."""
    lock = fit_lock(study_id)
    return app.configure_task(FIT_TASK, queue=QUEUE, lock=lock, queueing_lock=lock,
                              schedule_in={"seconds": delay} if delay > 0 else None)


def job_kwargs(study_id: int, attempt: int = 0) -> dict[str, int]:
    return {"study_id": study_id, "attempt": attempt}


class QueueFits:
    """The API's fit scheduler in queue mode: same interface as ``FitPool``.

    ``request`` is on the tell path, so it only marks the study: a flusher thread
    defers one job per marked study every ``FLUSH_SECONDS`` (a burst of tells
    costs one insert, and none when a job already waits). The queue's state is
    read back from procrastinate's job table (status, the sequential user's wait).
    """

    def __init__(self, storage: Storage, database_url: str, *, connect_timeout: float = 5.0,
                 pool_size: int = 4) -> None:
        self.storage = storage
        self.app = App(connector=SyncPsycopgConnector(conninfo=conninfo(database_url, connect_timeout),
                                                      min_size=1, max_size=pool_size))
        self.app.open()
        self._cond = threading.Condition()
        self._dirty: set[int] = set()
        self._closed = False
        self.deferred = 0
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True, name="calibo-fit-defer")
        self._flusher.start()

    # --------------------------------------------------------------- public
    def request(self, study_id: int) -> None:
        """Queue a fit of ``study_id`` (coalesced: see the module)."""
        with self._cond:
            if self._closed:
                return
            self._dirty.add(study_id)
            self._cond.notify_all()

    def depth(self) -> int:
        """Fit jobs waiting or running on the queue (every API replica sees the same)."""
        try:
            return sum(len(self._jobs(status=status)) for status in ("todo", "doing"))
        except Unavailable:
            return 0

    def busy(self, study_id: int) -> bool:
        s = self.status(study_id)
        return s["fitting"] or s["queued"]

    def status(self, study_id: int) -> dict[str, Any]:
        """``fitting``: a worker runs a fit of it; ``queued``: one waits (or is about to be deferred)."""
        with self._cond:
            pending = study_id in self._dirty
        try:
            states = self._job_states(study_id)
        except Unavailable:
            states = set()
        return {"fitting": "doing" in states, "queued": pending or "todo" in states}

    def wait(self, study_id: int, n_obs: int, timeout: float, n_failed: int = 0) -> bool:
        """Wait until a snapshot on at least ``n_obs`` observations (and ``n_failed`` failures) is
        stored, no fit of the study is queued or running, or ``timeout``; polls the database, so it
        holds across replicas."""
        def landed() -> bool:
            p = self.storage.progress(study_id)
            return p.fitted_on >= n_obs and p.fitted_failures >= n_failed

        deadline = time.monotonic() + timeout
        while True:
            if landed():
                return True
            with self._cond:
                pending = study_id in self._dirty
            if not pending and not self._job_states(study_id) & {"todo", "doing"}:
                return landed()  # it may have landed just now
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(WAIT_POLL_SECONDS, left))

    def resume_stalled(self) -> int:
        """Queue a fit of every study whose snapshot lags its tells with no fit queued or running (a
        replica that died between a tell and its defer, a queue that was unreachable); how many."""
        try:
            lagging = set(self.storage.studies_needing_fit(skip_failed=True))
            if not lagging:
                return 0
            active = {j.task_kwargs["study_id"] for status in ("todo", "doing") for j in self._jobs(status=status)}
        except Unavailable:
            return 0
        for sid in lagging - active:
            self.request(sid)
        return len(lagging - active)

    def restart(self, study_id: int) -> None:
        """The study's space grew. Nothing to reset here: the growth zeroed the study's snapshot
        counts in the database (``StudyTx.grow``), which ``wait`` reads, so it waits for a fit of
        the new space; a fit job of the old space that still runs stores nothing (its revision)."""

    def forget(self, study_id: int) -> None:
        with self._cond:
            self._dirty.discard(study_id)

    def readiness(self) -> str:
        """The queue lives in the database that ``/healthz`` checks: ready when the flusher runs."""
        with self._cond:
            if self._closed:
                return "down"
        return "ok" if self._flusher.is_alive() else "down"

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._flusher.join(timeout=5)
        self._flush()  # what was told before the shutdown is still fitted
        self.app.close()

    # ------------------------------------------------------------- internal
    def _jobs(self, **filters: Any) -> list[Any]:
        try:
            return list(self.app.job_manager.list_jobs(queue=QUEUE, **filters))
        except Exception as e:  # noqa: BLE001 - procrastinate wraps the driver's errors
            raise Unavailable("the fit queue is unreachable") from e

    def _job_states(self, study_id: int) -> set[str]:
        return {str(j.status) for j in self._jobs(queueing_lock=fit_lock(study_id))}

    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._dirty or self._closed)
                if self._closed:
                    return
            time.sleep(FLUSH_SECONDS)  # let the burst of tells this one belongs to land
            self._flush()

    def _flush(self) -> None:
        with self._cond:
            todo, self._dirty = self._dirty, set()
        failed: set[int] = set()
        for sid in sorted(todo):
            try:
                deferrer(self.app, sid).defer(**job_kwargs(sid))
                self.deferred += 1
            except AlreadyEnqueued:
                pass  # one waits already: it will fit everything told so far
            except Exception as e:  # noqa: BLE001 - the database is down: keep it marked, try again
                failed.add(sid)
                _outage.log(logging.WARNING, "defer", "could not queue a fit of study %s: %s", sid, one_line(e))
        if failed:
            with self._cond:
                self._dirty |= failed
                closed = self._closed
            if not closed:
                time.sleep(1.0)
