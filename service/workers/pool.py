"""The local fit pool inside ``calibo serve``: fits off the request path, coalesced per study.

``request(study)`` after a tell queues a fit unless one is queued or running
for that study, in which case it only marks the study dirty: when the running
fit lands, one more fit runs on everything told meanwhile. So a burst of tells
costs at most two fits, and fits of one study never run concurrently.

A fit that raises is logged, recorded on the study (``fit_error``) and retried
with backoff up to ``retries`` times; a worker process that dies (the pool
breaks) is replaced. Neither reaches the API: asks keep serving the newest
stored snapshot. A fit that fails because the database is unreachable logs
one line (per 10 s), records nothing, and once its retries are spent waits
for ``resume_stalled`` (the app's housekeeping calls it) rather than for the
next tell, which may never come.

The fit processes start with the pool and each warms up (imports and a tiny
fit, see ``warmup``) before it takes a fit; ``readiness()`` says whether all
are alive and warm, and a process that dies is replaced (and warmed) at once.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import wait
from typing import Any, cast

from ..errors import Unavailable
from ..logs import Throttled
from ..storage import Storage
from .jobs import fit_study, set_device, store
from .warmup import FitProcesses

log = logging.getLogger("calibo.workers")
_outage = Throttled(log, 10.0)


@dataclass
class _StudyFits:
    running: bool = False
    dirty: bool = False
    attempts: int = 0
    fitted_n_obs: int = 0
    fitted_n_failed: int = 0
    last_error: str | None = None
    stalled: bool = False  # gave up while the database was unreachable: resumed by resume_stalled()


class FitPool:
    """Coalescing fit scheduler over a process pool (or a thread, with ``workers=0``)."""

    def __init__(self, storage: Storage, database_url: str, workers: int = 1, retries: int = 3,
                 backoff: float = 0.5, job: Callable[..., dict[str, Any]] = fit_study,
                 device: str | None = None, observer: Any = None) -> None:
        """``job(study_id[, storage=...])`` is the fit (a module-level function, for pickling).

        ``device`` (``auto | cpu | cuda``) is where the fit processes train torch surrogates;
        ``observer`` (the app's ``Metrics``) sees each fit's result and failure.
        """
        self.storage = storage
        self.device = device
        self.job = job
        self.database_url = database_url
        self.workers = workers
        self.retries = retries
        self.backoff = backoff
        self._cond = threading.Condition()
        self._studies: dict[int, _StudyFits] = {}
        self._closed = False
        self._swap = threading.Lock()
        self._procs: FitProcesses | None = None
        if workers:  # the fit processes report their warm-up on this pipe, to the watcher
            self._ready_r, self._ready_w = multiprocessing.get_context("spawn").Pipe(duplex=False)
        self._executor = self._make_executor()
        self.fits_done = 0
        self.fits_failed = 0
        self.observer = observer
        if workers:
            threading.Thread(target=self._watch, daemon=True, name="calibo-fit-watch").start()

    def _make_executor(self) -> Executor:
        if self.workers == 0:
            set_device(self.device)
            return ThreadPoolExecutor(1, thread_name_prefix="calibo-fit")
        # spawn: the API process runs threads (uvicorn, SQLAlchemy pools) that fork would copy mid-state
        self._procs = FitProcesses(self.workers, self.database_url, self.device, self._ready_w)
        return self._procs.executor

    def _job(self) -> Callable[[int], dict[str, Any]]:
        if self.workers == 0:
            return partial(self.job, storage=self.storage)
        return partial(self.job, save=False)  # this process stores the snapshot (see fit_study)

    # --------------------------------------------------------------- public
    def request(self, study_id: int) -> None:
        """Queue a fit of ``study_id`` (coalescing with one queued or running)."""
        with self._cond:
            if self._closed:
                return
            st = self._studies.setdefault(study_id, _StudyFits())
            if st.running:
                st.dirty = True
                return
            st.running = True
            st.dirty = False
        self._submit(study_id)

    def depth(self) -> int:
        """Studies with a fit running or waiting to run."""
        with self._cond:
            return sum(st.running for st in self._studies.values())

    def busy(self, study_id: int) -> bool:
        with self._cond:
            st = self._studies.get(study_id)
            return bool(st and st.running)

    def wait(self, study_id: int, n_obs: int, timeout: float, n_failed: int = 0) -> bool:
        """Wait until a fit on at least ``n_obs`` observations (and ``n_failed`` failures) landed,
        none is running, or timeout. The time waited goes to the observer (``Metrics.observe_wait``)."""
        t0 = time.monotonic()
        try:
            return self._wait(study_id, n_obs, t0 + timeout, n_failed)
        finally:
            if self.observer is not None:
                self.observer.observe_wait(time.monotonic() - t0)

    def _wait(self, study_id: int, n_obs: int, deadline: float, n_failed: int) -> bool:
        with self._cond:
            while True:
                st = self._studies.get(study_id)
                if st is None or (st.fitted_n_obs >= n_obs and st.fitted_n_failed >= n_failed):
                    return st is not None
                if not st.running:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)

    def resume_stalled(self) -> int:
        """Fit again the studies whose fits gave up during a database outage; how many."""
        with self._cond:
            stalled = [sid for sid, st in self._studies.items() if st.stalled and not st.running]
            for sid in stalled:
                self._studies[sid].stalled = False
        for sid in stalled:
            self.request(sid)
        return len(stalled)

    def restart(self, study_id: int) -> None:
        """The study's space grew: no fit stored so far is of it (``wait`` waits for one that is)."""
        with self._cond:
            st = self._studies.get(study_id)
            if st is not None:
                st.fitted_n_obs = st.fitted_n_failed = 0

    def forget(self, study_id: int) -> None:
        with self._cond:
            self._studies.pop(study_id, None)
            self._cond.notify_all()

    def status(self, study_id: int) -> dict[str, Any]:
        with self._cond:
            st = self._studies.get(study_id)
            if st is None:
                return {"fitting": False, "queued": False}
            return {"fitting": st.running, "queued": st.dirty}

    def readiness(self) -> str:
        """``ok`` when every fit process is alive and warmed up, ``starting`` while one warms up
        (at start, or after a dead one was replaced), ``down`` when none is alive or the pool is
        closed. A thread pool (``workers=0``) is ``ok``: it runs in the API process, which has
        imported the engine already to serve asks, and cannot die on its own."""
        with self._cond:
            if self._closed:
                return "down"
        procs = self._procs
        return "ok" if procs is None else procs.state()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._executor.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------- internal
    def _submit(self, study_id: int) -> None:
        executor = self._executor
        try:
            fut = executor.submit(self._job(), study_id)
        except (BrokenProcessPool, RuntimeError) as e:
            with self._cond:
                closed = self._closed
            if closed:
                return
            log.error("fit pool broken (%s); starting a new one", e)
            self._replace_executor(executor)
            executor = self._executor
            fut = executor.submit(self._job(), study_id)
        fut.add_done_callback(partial(self._done, study_id, executor))

    def _replace_executor(self, broken: Executor) -> None:
        """Swap in a new pool for ``broken`` (once, however many jobs saw it break); it warms up anew."""
        with self._swap:
            if self._executor is not broken or self._closed:
                return
            self._executor = self._make_executor()
        broken.shutdown(wait=False, cancel_futures=True)

    def _watch(self) -> None:
        """Log each process's warm-up, and replace the pool as soon as one of its processes dies
        (its fits would fail with it: they are retried on the new pool, see ``_done``). A pool
        whose processes die before warming up is replaced after a growing pause (at most 30 s)."""
        early_deaths = 0
        try:
            while not self._closed:
                procs = self._procs
                if procs is None:
                    return
                by_sentinel = procs.sentinels()
                for obj in wait([self._ready_r, *by_sentinel], timeout=0.5):
                    if obj is self._ready_r:
                        self._warmed(*self._ready_r.recv())
                    elif not self._closed and procs is self._procs:
                        p = by_sentinel[cast(int, obj)]  # not the pipe: one of the processes' sentinels
                        procs.reported_dead.add(cast(int, p.pid))  # started, so it has one
                        early_deaths = 0 if procs.all_warm else early_deaths + 1
                        pause = min(30.0, 0.5 * 2 ** early_deaths) if early_deaths else 0.0
                        log.error("fit process %s died; starting a new fit pool%s", p.pid,
                                  f" in {pause:.1f} s" if pause else "")
                        with self._cond:
                            self._cond.wait_for(lambda: self._closed, pause)
                        try:
                            self._replace_executor(procs.executor)
                        except Exception as e:  # noqa: BLE001 - readiness says down; the next fit tries again
                            log.error("could not start a new fit pool: %s", e, exc_info=e)
                        break
        finally:
            self._ready_r.close()
            self._ready_w.close()

    def _warmed(self, pid: int, fit_s: float | None) -> None:
        procs = self._procs
        if procs is None or not procs.owns(pid):
            return  # a process of a pool replaced meanwhile
        took = procs.report(pid)
        fit = f"its first fit {fit_s:.2f} s" if fit_s is not None else "its warm-up fit failed"
        log.info("fit process %d warm %.1f s after its pool started (imports, %s)", pid, took, fit)
        if procs.all_warm:
            log.info("fit pool ready: %d process(es) warm in %.1f s", self.workers, took)

    def _done(self, study_id: int, executor: Executor, fut: Future) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        saved: dict[str, Any] = {}
        if exc is None:
            try:
                saved = store(self.storage, fut.result())
            except Exception as e:  # noqa: BLE001 - a failed save is a failed fit: retried
                exc = e
        resubmit = False
        delay = 0.0
        with self._cond:
            st = self._studies.get(study_id)
            if st is None or self._closed:
                self._cond.notify_all()
                return
            if exc is None:
                res = saved
                self.fits_done += res.get("status") == "fitted"
                if self.observer is not None:
                    self.observer.observe_fit(res)
                st.attempts = 0
                st.last_error = None
                st.fitted_n_obs = max(st.fitted_n_obs, int(res.get("n_obs") or 0))
                st.fitted_n_failed = max(st.fitted_n_failed, int(res.get("n_failed") or 0))
                if res.get("status") == "deleted":
                    self._studies.pop(study_id, None)
                elif st.dirty:
                    st.dirty = False
                    resubmit = True
                else:
                    st.running = False
            else:
                self.fits_failed += 1
                if self.observer is not None:
                    self.observer.fit_failures.inc()
                st.attempts += 1
                st.last_error = f"{type(exc).__name__}: {exc}"
                if st.attempts <= self.retries:
                    resubmit = True
                    delay = self.backoff * 2 ** (st.attempts - 1)
                else:
                    st.running = False
                    st.dirty = False
                    st.attempts = 0
                    st.stalled = isinstance(exc, Unavailable)
            self._cond.notify_all()
        if isinstance(exc, Unavailable):  # the database's fault, not the fit's: one line, nothing to record
            _outage.log(logging.WARNING, "fit", "fit of study %s waits for the database%s", study_id,
                        f"; retry in {delay:.1f} s" if resubmit else "; resumed once it answers")
        elif exc is not None:
            log.error("fit of study %s failed (%s)%s", study_id, st.last_error,
                      f"; retry in {delay:.1f} s" if resubmit else "; giving up until the next tell",
                      exc_info=exc)
            try:
                self.storage.record_fit_error(study_id, st.last_error or "fit failed")
            except Unavailable:
                pass  # storage logged it
            if isinstance(exc, BrokenProcessPool):
                self._replace_executor(executor)
        if resubmit:
            if delay:
                t = threading.Timer(delay, self._submit, (study_id,))
                t.daemon = True
                t.start()
            else:
                self._submit(study_id)
