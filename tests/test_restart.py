"""Stop the server mid-study (cleanly, and by killing it) and start it again on the same database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port, make_database_url, unique
from test_api import BRANIN, FAST, branin


class ServerProcess:
    """``calibo serve`` as a real process: what an operator starts and stops."""

    def __init__(self, database_url: str, port: int, log: Path, env: dict[str, str] | None = None) -> None:
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "CALIBO_DATABASE_URL": database_url, "CALIBO_WORKERS": "1", **(env or {})}
        self.log = log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "calibo.server.cli", "serve", "--port", str(port)],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise RuntimeError(f"server did not start:\n{log.read_text()}")
            time.sleep(0.1)

    def stop(self, sig: int) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(60)
        finally:
            self.log.close()
        return code


def run(http: httpx.Client, sid: int, n: int) -> None:
    for _ in range(n):
        t = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
        assert http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell",
                         json={"value": branin(t["params"])}).status_code == 200


def durable(view: dict) -> dict:
    """The parts of a study view that must survive a restart."""
    keep = dict(view)
    keep["surrogate_status"] = {k: view["surrogate_status"][k] for k in ("snapshot_version", "fitted_on")}
    return keep


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "kill"])
def test_study_continues_after_a_restart(request: pytest.FixtureRequest, tmp_path: Path, backend: str,
                                         how: int) -> None:
    url = make_database_url(request, backend, tmp_path)
    port = free_port()
    log = tmp_path / "server.log"
    srv = ServerProcess(url, port, log)
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as http:
            sid = http.post("/v1/studies", json={"name": unique(), "space": BRANIN, "seed": 2,
                                                "settings": FAST}).json()["id"]
            run(http, sid, 18)
            pending = http.post(f"/v1/studies/{sid}/ask", json={"count": 2}).json()["trials"]
            # settle: the fit after the last tell lands, so "before" includes it
            deadline = time.monotonic() + 30
            while http.get(f"/v1/studies/{sid}").json()["surrogate_status"]["fitted_on"] < 18:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            before = http.get(f"/v1/studies/{sid}").json()
            trials_before = http.get(f"/v1/studies/{sid}/trials", params={"limit": 100}).json()
            cal_before = http.get(f"/v1/studies/{sid}/calibration").json()
    finally:
        code = srv.stop(how)
    if how == signal.SIGTERM:
        # a clean shutdown (uvicorn re-raises the signal once it is done, hence the exit status)
        assert code in (0, -signal.SIGTERM) and "Application shutdown complete" in log.read_text()

    srv = ServerProcess(url, port, log)
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as http:
            after = http.get(f"/v1/studies/{sid}").json()
            assert durable(after) == durable(before)  # adaptive state, counts, best, snapshot
            assert http.get(f"/v1/studies/{sid}/trials", params={"limit": 100}).json() == trials_before
            assert http.get(f"/v1/studies/{sid}/calibration").json() == cal_before
            # the two trials asked before the restart can still be told, and the study goes on
            for t in pending:
                assert http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell",
                                 json={"value": branin(t["params"])}).status_code == 200
            run(http, sid, 3)
            view = http.get(f"/v1/studies/{sid}").json()
            assert view["trials"] == {"waiting": 0, "running": 0, "complete": 23, "failed": 0, "pruned": 0, "total": 23}
            numbers = [t["number"] for t in
                       http.get(f"/v1/studies/{sid}/trials", params={"limit": 100}).json()["trials"]]
            assert numbers == list(range(23))
            steps = [p["steps"] for p in view["adaptive"]["pairs"]]
            assert all(s == before["adaptive"]["pairs"][0]["steps"] + 5 for s in steps)
    finally:
        srv.stop(signal.SIGTERM)


def test_tells_that_were_never_fitted_are_fitted_after_a_restart(request: pytest.FixtureRequest,
                                                                tmp_path: Path) -> None:
    url = make_database_url(request, "sqlite", tmp_path)
    port = free_port()
    srv = ServerProcess(url, port, tmp_path / "s.log")
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as http:
            sid = http.post("/v1/studies", json={"name": unique(), "space": BRANIN,
                                                "settings": FAST}).json()["id"]
            run(http, sid, 8)
    finally:
        srv.stop(signal.SIGKILL)  # likely before the fit on 8 landed
    from calibo.server.storage import Storage

    st = Storage(url, migrate=False)
    try:
        # make sure the last tell is unfitted, whatever the race above did
        with st.locked(sid) as tx:
            tx.study.snapshot_n_obs = min(tx.study.snapshot_n_obs, 7)
    finally:
        st.close()
    srv = ServerProcess(url, port, tmp_path / "s.log")
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as http:
            deadline = time.monotonic() + 30
            while http.get(f"/v1/studies/{sid}").json()["surrogate_status"]["fitted_on"] < 8:
                assert time.monotonic() < deadline, "the restart did not refit the lagging study"
                time.sleep(0.05)
    finally:
        srv.stop(signal.SIGTERM)
