"""Cluster mode on the local PostgreSQL, loopback only: 2 API processes and 2 ``calibo worker``
processes around one database, with fits on the procrastinate queue (CALIBO_WORKER_MODE=queue).

One cluster serves the module, started in the order a deployment may take: worker A on an empty
database (it migrates it), the two APIs, then worker B. The kill -9 test runs last.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from conftest import free_port, unique

pytestmark = pytest.mark.usefixtures("pg_server")

SPACE = {"x": {"type": "float", "low": -5.0, "high": 10.0}, "y": {"type": "float", "low": 0.0, "high": 15.0}}
HEARTBEAT, STALLED = 1.0, 4.0


def value_of(p: dict) -> float:
    return (p["y"] - 0.13 * p["x"] ** 2 + 1.6 * p["x"] - 6) ** 2 + 10 * abs(p["x"] - 3.1) ** 0.5


def sql(url: str, query: str, *params: object) -> list[tuple]:
    """Run ``query`` on the database of ``url`` (calibo's SQLAlchemy form); its rows, if any."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


@dataclass
class Proc:
    name: str
    proc: subprocess.Popen
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            with_group = os.getpgid(self.proc.pid)
            os.killpg(with_group, sig)
            self.proc.wait(30)


@dataclass
class Cluster:
    url: str
    tmp: Path
    apis: list[str] = field(default_factory=list)
    procs: dict[str, Proc] = field(default_factory=dict)
    metrics_port: int = 0

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CALIBO_")}
        env.update(CALIBO_DATABASE_URL=self.url, CALIBO_WORKER_MODE="queue", CALIBO_LOG_LEVEL="info",
                   CALIBO_WORKER_HEARTBEAT_SECONDS=str(HEARTBEAT), CALIBO_WORKER_STALLED_SECONDS=str(STALLED),
                   OMP_NUM_THREADS="1", **extra)
        return env

    def start(self, name: str, args: list[str], **extra: str) -> Proc:
        log = self.tmp / f"{name}.log"
        proc = subprocess.Popen([sys.executable, "-m", "calibo.server.cli", *args], env=self.env(**extra),
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        p = self.procs[name] = Proc(name, proc, log)
        return p

    def worker(self, name: str, **extra: str) -> Proc:
        alive = self.tmp / f"{name}.alive"
        p = self.start(name, ["worker"], CALIBO_WORKER_ALIVE_FILE=str(alive), **extra)
        deadline = time.monotonic() + 120
        while not alive.exists():  # touched once it is connected and its watch runs
            assert p.proc.poll() is None, f"{name} exited:\n{p.text()}"
            assert time.monotonic() < deadline, f"{name} not up:\n{p.text()}"
            time.sleep(0.1)
        return p

    def api(self, name: str) -> str:
        port = free_port()
        p = self.start(name, ["serve", "--port", str(port)])
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        with httpx.Client(base_url=url, timeout=5) as c:
            while True:
                assert p.proc.poll() is None, f"{name} exited:\n{p.text()}"
                assert time.monotonic() < deadline, f"{name} not ready:\n{p.text()}"
                try:
                    if c.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        self.apis.append(url)
        return url

    def sql(self, query: str, *params: object) -> list[tuple]:
        return sql(self.url, query, *params)

    def wait_fitted(self, study_id: int, timeout: float = 120.0) -> tuple[int, int]:
        """Until the study's snapshot covers every completed trial: ``(version, n_obs)``."""
        deadline = time.monotonic() + timeout
        while True:
            (n_complete, n_obs, version), = self.sql(
                "SELECT n_complete, snapshot_n_obs, snapshot_version FROM studies WHERE id = %s", study_id)
            if n_obs >= n_complete:
                return version, n_obs
            assert time.monotonic() < deadline, (
                f"study {study_id}: snapshot on {n_obs} of {n_complete} after {timeout} s\n"
                + "\n".join(f"--- {p.name}\n{p.text()[-3000:]}" for p in self.procs.values()))
            time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    url = request.getfixturevalue("pg_databases").create()
    c = Cluster(url, tmp_path_factory.mktemp("cluster"))
    try:
        c.worker("worker-a")  # before the API, on an empty database: it migrates it
        c.api("api-1")
        c.api("api-2")
        c.metrics_port = free_port()
        c.worker("worker-b", CALIBO_WORKER_METRICS_PORT=str(c.metrics_port))  # after the APIs
        yield c
    finally:
        for p in c.procs.values():
            p.kill(signal.SIGTERM)


def _create(c: httpx.Client, **kw) -> int:
    r = c.post("/v1/studies", json={"name": unique("cluster"), "space": SPACE, "seed": 3, **kw})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_crowd_on_two_apis_and_two_workers(cluster: Cluster) -> None:
    """16 clients on 3 studies, half on each API: no configuration suggested twice, every tell stored
    once, and the snapshots advance to cover every tell (the fits ran on the queue's workers)."""
    with httpx.Client(base_url=cluster.apis[0], timeout=60) as c:
        studies = [_create(c) for _ in range(3)]
    pairs, told, errors = 12, [], []
    lock = threading.Lock()

    def client(i: int) -> None:
        sid = studies[i % 3]
        with httpx.Client(base_url=cluster.apis[i % 2], timeout=60) as c:
            for _ in range(pairs):
                r = c.post(f"/v1/studies/{sid}/ask", json={"worker_id": f"w{i}"})
                if r.status_code != 200:
                    errors.append(("ask", r.status_code, r.text))
                    return
                t = r.json()["trials"][0]
                v = value_of(t["params"])
                r = c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": v})
                if r.status_code != 200:
                    errors.append(("tell", r.status_code, r.text))
                    return
                with lock:
                    told.append((sid, t["id"], v))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(told) == 16 * pairs
    assert len({tid for _, tid, _ in told}) == len(told)  # no trial answered to two clients

    rows = cluster.sql("SELECT study_id, id, state, value, ukey FROM trials WHERE study_id = ANY(%s)", studies)
    by_id = {r[1]: r for r in rows}
    for sid, tid, v in told:  # every tell stored, once, with its value
        assert by_id[tid][0] == sid and by_id[tid][2] == "complete" and by_id[tid][3] == v
    assert len(rows) == len(told)  # nothing asked that nobody told: no lost or doubled trial
    for sid in studies:
        keys = Counter(r[4] for r in rows if r[0] == sid)
        assert max(keys.values()) == 1, f"study {sid}: a configuration was suggested twice"
        version, n_obs = cluster.wait_fitted(sid)
        assert n_obs == sum(s == sid for s, _, _ in told) and version > 1
    # the predictions served came from the queue's snapshots, by both APIs
    served = cluster.sql("SELECT count(*) FROM trials WHERE study_id = ANY(%s) AND snapshot_version > 0", studies)
    assert served[0][0] > 0
    assert not cluster.sql("SELECT id FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")


def test_workers_started_before_and_after_the_api_both_fit(cluster: Cluster) -> None:
    """Both workers took fits: the one started on an empty database and the one started last."""
    with httpx.Client(base_url=cluster.apis[1], timeout=60) as c:
        studies = [_create(c, settings={"n_warmup": 4, "ask_wait_seconds": 0}) for _ in range(4)]
        for _ in range(8):
            for sid in studies:
                t = c.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
                assert c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell",
                              json={"value": value_of(t["params"])}).status_code == 200
    for sid in studies:
        cluster.wait_fitted(sid)
    for name in ("worker-a", "worker-b"):
        assert "fitted on" in cluster.procs[name].text(), f"{name} never fitted:\n{cluster.procs[name].text()}"
    # worker B serves its fit durations to Prometheus; the APIs count the queue's depth
    text = httpx.get(f"http://127.0.0.1:{cluster.metrics_port}/metrics").text
    fits = [line for line in text.splitlines() if line.startswith("calibo_fit_duration_seconds_count")]
    assert fits and float(fits[0].split()[-1]) >= 1
    assert "calibo_fit_queue_depth" in httpx.get(f"{cluster.apis[0]}/metrics").text


def test_a_sequential_user_gets_fresh_fits_across_replicas(cluster: Cluster) -> None:
    """One client alternating between the two APIs: past warm-up, every ask is served from a snapshot
    fitted on every tell before it (the ask waited for the queue's worker, whichever API it reached)."""
    with httpx.Client(base_url=cluster.apis[0], timeout=60) as c0, \
            httpx.Client(base_url=cluster.apis[1], timeout=60) as c1:
        sid = _create(c0, settings={"n_warmup": 5, "ask_wait_seconds": 60})
        for i in range(12):
            c = (c0, c1)[i % 2]
            t = c.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
            if i >= 5:
                (n_obs,), = cluster.sql("SELECT s.n_obs FROM trials t JOIN snapshots s ON s.study_id = t.study_id "
                                        "AND s.version = t.snapshot_version WHERE t.id = %s", t["id"])
                assert n_obs == i, f"ask {i} on API {i % 2 + 1} served from a fit on {n_obs} tells"
                assert t["prediction"] is not None
            assert c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell",
                          json={"value": value_of(t["params"])}).status_code == 200


def test_a_space_grown_in_queue_mode_is_fitted_by_the_queue_and_asked_from(cluster: Cluster) -> None:
    """PATCH space on a queue-mode replica: 200 (the fit backend's restart is the queue's too), and
    the next asks, past a fit of the grown space by a worker, hold the new parameter."""
    with httpx.Client(base_url=cluster.apis[0], timeout=60) as c:
        sid = _create(c, settings={"n_warmup": 4, "ask_wait_seconds": 60})
        for _ in range(6):
            t = c.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
            assert c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell",
                          json={"value": value_of(t["params"])}).status_code == 200
        cluster.wait_fitted(sid)
        r = c.patch(f"/v1/studies/{sid}/space", json={"space": {"z": {"type": "float", "low": 0.0, "high": 1.0}}})
        assert r.status_code == 200, r.text
        assert "z" in r.json()["space"]
        t = c.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
        assert "z" in t["params"]
        assert c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell",
                      json={"value": value_of(t["params"])}).status_code == 200
        version, n_obs = cluster.wait_fitted(sid)
        assert n_obs == 7 and version >= 1


def test_both_fit_backends_provide_the_interface_the_api_uses() -> None:
    from calibo.server.workers import FitPool, Fits
    from calibo.server.workers.queue import QueueFits

    assert "restart" in vars(Fits)
    for backend in (FitPool, QueueFits):
        missing = [m for m, f in vars(Fits).items() if callable(f) and not m.startswith("_")
                   and not callable(getattr(backend, m, None))]
        assert not missing, f"{backend.__name__} lacks {missing}"


def test_queue_mode_needs_postgresql() -> None:
    from pydantic import ValidationError

    from calibo.server.config import Settings

    with pytest.raises(ValidationError, match="needs PostgreSQL"):
        Settings(database_url="sqlite:///x.db", worker_mode="queue")
    with pytest.raises(ValidationError, match="must exceed"):
        Settings(database_url="postgresql://h/db", worker_mode="queue", worker_heartbeat_seconds=10,
                 worker_stalled_seconds=5)


def test_no_api_error_and_no_lost_job_in_the_logs(cluster: Cluster) -> None:
    for p in cluster.procs.values():
        text = p.text()
        assert "Traceback" not in text and " 500 " not in text, f"{p.name}:\n{text[-4000:]}"


def _busy_worker(cluster: Cluster, names: list[str], within: float = 60.0) -> str:
    """The worker process that is fitting right now (the one using a CPU while a job is doing)."""
    import psutil

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if cluster.sql("SELECT id FROM procrastinate_jobs WHERE status = 'doing'"):
            procs = {n: psutil.Process(cluster.procs[n].proc.pid) for n in names}
            before = {n: sum(p.cpu_times()[:2]) for n, p in procs.items()}
            time.sleep(0.5)
            used = {n: sum(p.cpu_times()[:2]) - before[n] for n, p in procs.items()}
            busy = max(used, key=used.get)
            if used[busy] > 0.15 and cluster.sql("SELECT id FROM procrastinate_jobs WHERE status = 'doing'"):
                return busy
        time.sleep(0.05)
    raise AssertionError("no fit started")


def test_kill_9_of_a_worker_mid_fit(cluster: Cluster) -> None:
    """kill -9 of the worker running a slow fit: the surviving worker queues the job again once the
    dead one misses its heartbeats, fits the study, and asks are served meanwhile by both APIs."""
    with httpx.Client(base_url=cluster.apis[0], timeout=60) as c:
        # a torch MLP ensemble fits in seconds on this CPU: long enough to be killed in the middle
        sid = _create(c, surrogate="mlp-ensemble", settings={"n_warmup": 6, "ask_wait_seconds": 0})
        for _ in range(6):
            t = c.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
            c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": value_of(t["params"])})
    victim = _busy_worker(cluster, ["worker-a", "worker-b"])
    survivor = "worker-b" if victim == "worker-a" else "worker-a"
    cluster.procs[victim].kill()
    # asks keep being served, on both APIs, while the study's fit is stranded on the dead worker
    for url in cluster.apis:
        with httpx.Client(base_url=url, timeout=10) as c:
            t0 = time.monotonic()
            r = c.post(f"/v1/studies/{sid}/ask", json={})
            assert r.status_code == 200 and time.monotonic() - t0 < 5, r.text
            t = r.json()["trials"][0]
            assert c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell",
                          json={"value": value_of(t["params"])}).status_code == 200
    version, n_obs = cluster.wait_fitted(sid, timeout=180)
    assert n_obs == 8 and version >= 1
    assert "stalled on worker" in cluster.procs[survivor].text()
    assert not cluster.sql("SELECT id FROM procrastinate_jobs WHERE status = 'doing'")
    # the cluster goes on with one worker: a new tell is fitted
    with httpx.Client(base_url=cluster.apis[1], timeout=60) as c:
        t = c.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
        c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": value_of(t["params"])})
    assert cluster.wait_fitted(sid, timeout=180)[1] == 9


# ---------------------------------------------------------------- in-process
@pytest.fixture
def queue_db(pg_databases) -> Iterator[tuple[str, object, int]]:
    """A fresh migrated PostgreSQL database with one study past warm-up, and no worker."""
    from calibo.server.config import Settings
    from calibo.server.storage import Storage
    from calibo.server.studies import StudyService

    url = pg_databases.create()
    storage = Storage(url)
    svc = StudyService(Settings(database_url=url), storage, None)
    info, _ = svc.create(unique("q"), SPACE, settings={"n_warmup": 4})
    yield url, storage, info.id
    storage.close()


def test_requests_coalesce_into_one_waiting_job(queue_db) -> None:
    from calibo.server.workers.queue import QueueFits, fit_lock

    url, storage, sid = queue_db
    fits = QueueFits(storage, url)
    try:
        for _ in range(200):
            fits.request(sid)
        assert fits.status(sid)["queued"]
        assert not fits.wait(sid, 1, 0.3)  # no worker: nothing lands, the wait gives up
        fits.request(sid)
        time.sleep(0.2)
    finally:
        fits.close()
    rows = sql(url, "SELECT status, lock, args FROM procrastinate_jobs")
    assert rows == [("todo", fit_lock(sid), {"study_id": sid, "attempt": 0})]


def test_a_failed_fit_is_recorded_and_retried_with_backoff(queue_db, monkeypatch) -> None:
    from calibo.server.workers import worker as worker_mod
    from calibo.server.workers.worker import FitWorker

    url, storage, sid = queue_db

    def broken(study_id, storage=None):
        raise RuntimeError("surrogate exploded")

    monkeypatch.setattr(worker_mod, "fit_study", broken)
    w = FitWorker(url, retries=2, backoff=0.5, heartbeat=1.0, stalled=2.0, migrate=False)
    w.storage = storage

    async def attempts() -> list[dict]:
        async with w.app.open_async():
            out = [await w._fit(sid, 0)]
            out.append(await w._fit(sid, 2))  # the last attempt: no more retries
            return out

    results = asyncio.run(attempts())
    assert [r["status"] for r in results] == ["failed", "failed"]
    assert "surrogate exploded" in storage.get_study(sid).fit_error
    rows = sql(url, "SELECT status, args, scheduled_at > now() FROM procrastinate_jobs")
    # one retry, of attempt 1, scheduled after the backoff; none after the last attempt
    assert rows == [("todo", {"study_id": sid, "attempt": 1}, True)]


def test_lagging_studies_with_no_fit_queued_are_queued_again(queue_db) -> None:
    """The API's housekeeping re-queues a study whose snapshot lags its tells when no fit of it is
    queued (an API killed between a tell and its defer), but not one whose last fit failed."""
    from calibo.server.workers.queue import QueueFits

    url, storage, sid = queue_db
    sql(url, "UPDATE studies SET n_complete = 10 WHERE id = %s", sid)  # 10 tells, no fit
    fits = QueueFits(storage, url)
    try:
        assert fits.resume_stalled() == 1
        time.sleep(0.2)  # the flusher defers it
        assert fits.status(sid)["queued"]
        assert fits.resume_stalled() == 0  # queued already
    finally:
        fits.close()
    assert sql(url, "SELECT count(*) FROM procrastinate_jobs") == [(1,)]
    sql(url, "DELETE FROM procrastinate_jobs")
    storage.record_fit_error(sid, "RuntimeError: boom")
    fits = QueueFits(storage, url)
    try:
        assert fits.resume_stalled() == 0
    finally:
        fits.close()
