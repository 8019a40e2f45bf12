"""No cold start: ``calibo serve`` says ready only once its fit process runs and is warm.

The fit process starts with the server, imports the engine's stack and runs a tiny
fit before ``/healthz`` answers 200; until then it answers 503 ``fit_pool:
starting``. A fit process killed -9 is replaced at once and warmed again (503
meanwhile), and fits go on on the new one. The first ask after the warm-start
tells then carries a prediction as soon as one fit has run, not after a process
start.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest
from test_api import BRANIN, FAST, branin

from benchmarks.crowd import CaliboServer, HealthMonitor
from calibo.engine import EngineConfig
from calibo.engine.config import WARMUP_LEAST


def fit_processes(srv: CaliboServer) -> list[psutil.Process]:
    """The server's fit processes: its children started by multiprocessing's spawn."""
    return [p for p in psutil.Process(srv.proc.pid).children()
            if any("spawn_main" in part for part in p.cmdline())]


def assert_warm(srv: CaliboServer, proc: psutil.Process) -> None:
    """``proc`` has loaded the fit stack (scikit-learn, LightGBM) and logged its warm-up fit."""
    libs = "\n".join(m.path for m in proc.memory_maps())
    assert "/sklearn/" in libs and "lib_lightgbm" in libs, "the fit process has not imported the fit stack"
    assert f"fit process {proc.pid} warm" in srv.tail(200)


def health(http: httpx.Client) -> tuple[int, dict]:
    r = http.get("/healthz")
    return r.status_code, r.json()


def wait_health(http: httpx.Client, ok: bool, timeout: float) -> dict:
    """Poll ``/healthz`` until it answers 200 (``ok``) or anything else; its body."""
    deadline = time.monotonic() + timeout
    while True:
        code, body = health(http)
        if (code == 200) == ok:
            return body
        assert time.monotonic() < deadline, f"/healthz still {code} {body}"
        time.sleep(0.05)


def ask_tell(http: httpx.Client, sid: int) -> dict:
    trial = http.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
    assert http.post(f"/v1/studies/{sid}/trials/{trial['id']}/tell",
                     json={"value": branin(trial["params"])}).status_code == 200
    return trial


def first_prediction(http: httpx.Client, sid: int, timeout: float) -> tuple[float, dict]:
    """Ask (and tell) until an ask carries a prediction: the seconds that took, and that trial."""
    t0 = time.monotonic()
    while True:
        trial = ask_tell(http, sid)
        if trial["prediction"] is not None:
            return time.monotonic() - t0, trial
        assert time.monotonic() - t0 < timeout, "no ask carried a prediction"
        time.sleep(0.05)


@pytest.fixture
def server(tmp_path: Path):
    srv = CaliboServer(f"sqlite:///{tmp_path / 'cold.db'}", tmp_path / "server.log", workers=1)
    yield srv
    srv.stop()


def test_serve_is_ready_only_with_a_live_warm_fit_process_and_replaces_a_killed_one(
        server: CaliboServer) -> None:
    with HealthMonitor(server.url, time.monotonic, interval=0.05) as monitor:
        server.start()  # returns at the first 200 from /healthz
    before = [(s, p) for (_, s, _), (_, p) in zip(monitor.samples, monitor.fit_pool, strict=True) if s != 200]
    assert (503, "starting") in before, before  # the API answered before the fit process was warm
    procs = fit_processes(server)
    assert len(procs) == 1
    assert_warm(server, procs[0])

    with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as http:
        code, body = health(http)
        assert (code, body) == (200, {"status": "ok", "database": "ok", "fit_pool": "ok"})
        os.kill(procs[0].pid, signal.SIGKILL)
        body = wait_health(http, ok=False, timeout=30)
        assert body["status"] == "unavailable" and body["fit_pool"] in ("starting", "down"), body
        assert http.get("/healthz").headers.get("retry-after")
        wait_health(http, ok=True, timeout=120)  # replaced, and warm again
        new = fit_processes(server)
        assert len(new) == 1 and new[0].pid != procs[0].pid
        assert_warm(server, new[0])
        # and it fits: a study's first ask after its warm start gets a prediction
        sid = http.post("/v1/studies", json={"name": "after-kill", "space": BRANIN, "settings": FAST}).json()["id"]
        _, trial = first_prediction(http, sid, timeout=60)
        assert trial["prediction"]["fitted_on"] >= EngineConfig.from_dict(FAST).warmup_least


def test_the_first_ask_after_the_warm_start_gets_a_prediction_within_a_fit_time(server: CaliboServer) -> None:
    server.start()
    with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as http:
        # default engine settings (the model takes over from 5 results, once it ranks them); asks never
        # wait for a fit, as in a crowd
        sid = http.post("/v1/studies", json={"name": "cold", "space": BRANIN,
                                            "settings": {"ask_wait_seconds": 0}}).json()["id"]
        warm = [ask_tell(http, sid) for _ in range(WARMUP_LEAST)]
        assert all(t["prediction"] is None for t in warm)
        took, trial = first_prediction(http, sid, timeout=30)
        status = http.get(f"/v1/studies/{sid}").json()["surrogate_status"]
    assert trial["prediction"]["fitted_on"] >= WARMUP_LEAST
    print(f"first prediction {took:.2f} s after the 5th tell, fitted on {trial['prediction']['fitted_on']}; "
          f"fit took {status['fit_seconds']:.2f} s")


def test_a_thread_pool_is_ready_at_once_and_a_closed_pool_is_down(tmp_path: Path) -> None:
    from calibo.server.storage import Storage
    from calibo.server.workers import FitPool

    st = Storage(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        pool = FitPool(st, "", workers=0)  # fits on a thread of the API process, which imported the engine
        assert pool.readiness() == "ok"
        pool.close()
        assert pool.readiness() == "down"
    finally:
        st.close()
