"""The fit processes of one process pool, started and warmed before the server says ready.

A fresh fit process spends seconds importing the scientific stack (NumPy, SciPy,
scikit-learn, LightGBM) and its first fit initialising BLAS and lazy caches;
left to the first study's first fit, a crowd on a fresh server would be served
unfitted asks meanwhile. So :class:`FitProcesses` starts every process of its
pool at once (``ProcessPoolExecutor`` otherwise starts them at the first
submits), each runs ``jobs.warm_up`` in its initializer (a tiny real fit, see
there) and reports its pid on a pipe, and the pool counts as ``ok`` only while
every process is alive and has reported. Liveness is read from each process's
sentinel (a descriptor that becomes readable when it exits), which the pool's
watcher also waits on to replace a dead process at once, not at the next fit.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

from .jobs import init_process


class _TrackingSpawn(SpawnContext):
    """The spawn context, remembering the processes it makes (the executor keeps its own privately)."""

    def __init__(self) -> None:
        super().__init__()
        self.processes: list[SpawnProcess] = []

    # the executor calls ``Process(...)``; typeshed declares it a class: hence the override's ignore
    def Process(self, *args: Any, **kwargs: Any) -> SpawnProcess:  # type: ignore[override]  # noqa: N802
        p = SpawnProcess(*args, **kwargs)
        self.processes.append(p)
        return p


class FitProcesses:
    """``workers`` spawned fit processes behind one ``ProcessPoolExecutor``, started now, warm when reported."""

    def __init__(self, workers: int, database_url: str, device: str | None, ready: Connection) -> None:
        self.workers = workers
        self.started = time.monotonic()
        self.warm: dict[int, float] = {}  # pid -> seconds from the pool's start to that process's report
        self.reported_dead: set[int] = set()
        self._ctx = _TrackingSpawn()
        self.executor = ProcessPoolExecutor(workers, mp_context=self._ctx, initializer=init_process,
                                            initargs=(database_url, device, ready))
        for _ in range(workers):  # one start per submit while none is idle: all of them, now
            self.executor.submit(os.getpid)

    def _started(self) -> list[SpawnProcess]:
        out = []
        for p in list(self._ctx.processes):
            try:
                p.sentinel  # noqa: B018 - raises until the process has started
            except ValueError:
                continue
            out.append(p)
        return out

    def sentinels(self) -> dict[int, SpawnProcess]:
        """Sentinel -> process, for the live processes not yet reported dead."""
        return {p.sentinel: p for p in self._started() if p.pid not in self.reported_dead}

    def alive(self) -> list[int]:
        """Pids of the processes still running (by their sentinels: no waitpid race with the executor)."""
        procs = self._started()
        gone = set(wait([p.sentinel for p in procs], timeout=0)) if procs else set()
        return [p.pid for p in procs if p.sentinel not in gone and p.pid is not None]

    def owns(self, pid: int) -> bool:
        return any(p.pid == pid for p in self._started())

    def report(self, pid: int) -> float:
        """``pid`` finished its warm-up: the seconds since this pool started."""
        self.warm[pid] = time.monotonic() - self.started
        return self.warm[pid]

    def state(self) -> str:
        """``ok`` (every process alive and warm), ``starting`` (some still warming) or ``down`` (none alive)."""
        alive = self.alive()
        if not alive:
            return "down"
        if len(alive) >= self.workers and all(pid in self.warm for pid in alive):
            return "ok"
        return "starting"

    @property
    def all_warm(self) -> bool:
        return len(self.warm) >= self.workers
