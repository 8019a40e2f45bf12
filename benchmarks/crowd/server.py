"""A restartable ``calibo serve`` for a crowd to run against.

:class:`CaliboServer` runs ``calibo serve`` in its own process group on a fixed
port, so it can be killed (SIGKILL) and started again where the crowd expects
it; :func:`server_on` is the same as a context manager, stopped on exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.servers import cli_module, free_port, stop_group, tail

ROOT = Path(__file__).resolve().parents[2]


class CaliboServer:
    """``calibo serve`` on a fixed port in its own process group: start, kill -9, start again."""

    def __init__(self, database_url: str, log_path: Path, *, port: int | None = None, workers: int = 1,
                 code: Path | None = None) -> None:
        self.database_url = database_url
        self.log_path = log_path
        self.port = port or free_port()
        self.workers = workers
        self.code = code
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> float:
        """Start it and wait for ``/healthz`` to answer 200; returns the seconds that took."""
        t0 = time.perf_counter()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CALIBO_")}
        env["CALIBO_WORKERS"] = str(self.workers)
        cmd = [sys.executable, "-m", cli_module(self.code), "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--database-url", self.database_url, "--workers", str(self.workers)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.code or ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=2.0, trust_env=False) as c:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"calibo serve exited with {self.proc.returncode}:\n{tail(self.log_path)}")
                with contextlib.suppress(httpx.HTTPError):
                    if c.get("/healthz").status_code == 200:
                        return time.perf_counter() - t0
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"calibo serve did not answer /healthz in {timeout:.0f} s:\n"
                                       f"{tail(self.log_path)}")
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL to the API process (a crash), then to what is left of its group (its fit workers)."""
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
            self.proc = None

    def __enter__(self) -> CaliboServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tail(self, n: int = 40) -> str:
        return tail(self.log_path, n)


@contextlib.contextmanager
def server_on(database_url: str, log_path: Path, **kw: Any) -> Iterator[CaliboServer]:
    srv = CaliboServer(database_url, log_path, **kw)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
