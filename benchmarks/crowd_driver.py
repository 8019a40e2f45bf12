"""A crowd of ask/tell clients on one study, with retries, and what must hold afterwards.

Shared by ``benchmarks/load.py`` and ``tests/test_load.py`` / ``tests/test_faults.py``.

:class:`Crowd`: ``clients`` threads, each with its own keep-alive ``httpx.Client``,
share a budget of ``trials`` ask -> evaluate -> tell pairs on one study. Every
attempt is timed and its outcome (HTTP status, or the transport error's class)
counted. Retry policy: a 503 (honouring ``Retry-After``, plus a little jitter)
or a transport error (exponential backoff) is retried until the request's
deadline; an ask is retried with the *same* ``Idempotency-Key`` (so the server
hands back the same trial, not a new one), a tell as it is (tells are
idempotent). Any other answer is final: a 409 on a tell is a duplicated tell,
anything else an error. A 500 is not retried by default: the contract says it
is a bug, and a load run should show it, not hide it.

:func:`verify` reads the study back through the API and checks the invariants:
no acknowledged tell lost or changed, no tell rejected as a duplicate (409),
no ask returning the params of another trial still in flight, all params
distinct, numbers gapless from 0, the study's complete count equal to the
acknowledged tells, and one adaptive step per predicted tell.

:class:`CaliboServer` runs ``calibo serve`` in its own process group on a fixed
port, so it can be killed (SIGKILL) and started again where the crowd expects
it; :class:`PgOutage` makes a PostgreSQL database refuse connections for a
while. :func:`run_load`, :func:`run_kill` and :func:`run_outage` are the three
scenarios, returning JSON-able results with a ``problems`` list (empty when
every invariant held).
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.service import _stop_group, _tail, free_port, summarize_ms
from benchmarks.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
TASK = TASKS["hartmann6"]
RETRY_STATUSES = frozenset({503})
Progress = Callable[[int, int], None]  # (acknowledged tells, trials in total)


def params_key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def _retry_after(r: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), or None."""
    raw = r.headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(raw)
        return max(0.0, when.timestamp() - time.time())
    return None


@dataclass
class _Client:
    """One crowd member's own records (merged at the end, so the hot path takes no shared lock)."""

    index: int
    rng: random.Random
    # (kind, t0, t1, outcome): outcome is the HTTP status, or the transport error's class name
    attempts: list[tuple[str, float, float, int | str]] = field(default_factory=list)
    retries: Counter = field(default_factory=Counter)
    no_retry_after: int = 0  # 503 answers without a Retry-After header
    # (slot, trial id, ask acknowledged at, tell acknowledged at)
    pairs: list[tuple[int, int, float, float]] = field(default_factory=list)


class Crowd:
    """``clients`` threads sharing ``trials`` ask/evaluate/tell pairs on study ``study_id``."""

    def __init__(self, base_url: str, study_id: int, *, clients: int, trials: int,
                 objective: Callable[[dict[str, Any]], float] = TASK.objective, eval_sleep: float = 0.0,
                 request_deadline: float = 60.0, http_timeout: float = 30.0, max_backoff: float = 2.0,
                 retry_statuses: frozenset[int] = RETRY_STATUSES, seed: int = 0,
                 worker_prefix: str = "crowd") -> None:
        self.base_url = base_url
        self.study_id = study_id
        self.clients = clients
        self.trials = trials
        self.objective = objective
        self.eval_sleep = eval_sleep
        self.request_deadline = request_deadline
        self.http_timeout = http_timeout
        self.max_backoff = max_backoff
        self.retry_statuses = retry_statuses
        self.seed = seed
        self.worker_prefix = worker_prefix
        self.run_id = uuid.uuid4().hex[:12]

        self._lock = threading.Condition()
        self._claimed = 0  # slots handed out
        self._busy = 0  # clients between claiming a slot and finishing its pair
        self._gate = threading.Event()  # cleared: paused (no new pair starts)
        self._gate.set()
        self._abort = threading.Event()
        self._members = [_Client(i, random.Random(seed * 100_003 + i)) for i in range(clients)]
        self._threads: list[threading.Thread] = []
        self.acked: dict[int, float] = {}  # trial id -> value, every tell answered 200
        self.asked: dict[int, int] = {}  # trial id -> the slot whose ask returned it
        self.in_flight: dict[tuple, int] = {}  # params key -> trial id, asked and not yet acknowledged
        self.dup_running: list[dict[str, Any]] = []  # an ask returned params another running trial has
        self.reused: list[dict[str, Any]] = []  # an ask returned a trial already returned to another slot
        self.double_acked: list[int] = []
        self.conflicts: list[dict[str, Any]] = []  # tells answered 409
        self.failed: list[dict[str, Any]] = []  # requests that ended without the answer they needed
        self.crashed: list[str] = []  # a client thread died on an unexpected exception
        self.t_start = self.t_end = 0.0

    # ------------------------------------------------------------ control
    def start(self) -> Crowd:
        self.t_start = time.perf_counter()
        for m in self._members:
            th = threading.Thread(target=self._run, args=(m,), daemon=True, name=f"crowd-{m.index}")
            th.start()
            self._threads.append(th)
        return self

    def now(self) -> float:
        """Seconds since the crowd started (the time base of every record)."""
        return time.perf_counter() - self.t_start

    @property
    def done(self) -> bool:
        return all(not th.is_alive() for th in self._threads)

    @property
    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acked(self, n: int, timeout: float, progress: Progress | None = None) -> bool:
        """Until ``n`` tells are acknowledged (True), the crowd ends or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                k = len(self.acked)
                if k >= n:
                    return True
                self._lock.wait(0.25)
            if progress:
                progress(k, self.trials)
            if self.done or time.monotonic() > deadline:
                return self.acked_count >= n

    def pause(self, timeout: float = 120.0) -> bool:
        """No new pair starts; waits until no client is mid-pair. True when the crowd is idle."""
        self._gate.clear()
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.25))
        return True

    def resume(self) -> None:
        self._gate.set()

    def join(self, timeout: float, progress: Progress | None = None) -> bool:
        """Until every client has finished (True) or ``timeout`` passes (then the crowd is aborted)."""
        deadline = time.monotonic() + timeout
        for th in self._threads:
            while th.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                th.join(min(left, 0.5))
                if progress:
                    progress(self.acked_count, self.trials)
        ok = self.done
        if not ok:
            self._abort.set()
            self._gate.set()
            for th in self._threads:
                th.join(self.http_timeout + 5)
        self.t_end = time.perf_counter()
        return ok

    # ------------------------------------------------------------ a client
    def _claim(self) -> int | None:
        while not self._abort.is_set():
            if not self._gate.wait(0.25):
                continue
            with self._lock:
                if not self._gate.is_set():
                    continue  # paused between the wait and the lock
                if self._claimed >= self.trials:
                    return None
                slot = self._claimed
                self._claimed += 1
                self._busy += 1
                return slot
        return None

    def _release(self) -> None:
        with self._lock:
            self._busy -= 1
            self._lock.notify_all()

    def _run(self, m: _Client) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        timeout = httpx.Timeout(self.http_timeout, connect=min(5.0, self.http_timeout))
        try:
            with httpx.Client(base_url=self.base_url, timeout=timeout, limits=limits, trust_env=False) as http:
                while (slot := self._claim()) is not None:
                    try:
                        self._pair(m, http, slot)
                    finally:
                        self._release()
        except Exception as e:  # noqa: BLE001 - recorded, and the invariants then fail loudly
            with self._lock:
                self.crashed.append(f"client {m.index}: {type(e).__name__}: {e}")

    def _request(self, m: _Client, http: httpx.Client, kind: str, url: str, body: dict[str, Any],
                 headers: dict[str, str] | None = None) -> httpx.Response | str:
        """POST until an answer that is not retried, or the deadline: the response, or why it failed."""
        deadline = time.monotonic() + self.request_deadline
        n = 0
        while True:
            t0 = self.now()
            try:
                r: httpx.Response | None = http.post(url, json=body, headers=headers)
                outcome: int | str = r.status_code
            except httpx.TransportError as e:
                r, outcome = None, type(e).__name__
            m.attempts.append((kind, t0, self.now(), outcome))
            if r is not None and r.status_code not in self.retry_statuses:
                return r
            left = deadline - time.monotonic()
            if left <= 0 or self._abort.is_set():
                return f"gave up after {n + 1} attempts, last: {outcome}"
            wait = _retry_after(r) if r is not None else None
            if r is not None and wait is None:
                m.no_retry_after += 1
            if wait is None:
                wait = min(self.max_backoff, 0.05 * 2 ** min(n, 10))
            wait = min(wait, self.max_backoff) + m.rng.uniform(0.0, 0.1 + 0.1 * wait)
            m.retries[kind] += 1
            n += 1
            time.sleep(max(0.0, min(wait, left)))

    def _fail(self, kind: str, slot: int, why: str, **extra: Any) -> None:
        with self._lock:
            self.failed.append({"kind": kind, "slot": slot, "why": why, **extra})

    def _pair(self, m: _Client, http: httpx.Client, slot: int) -> None:
        sid = self.study_id
        key = f"{self.run_id}-{slot}"
        r = self._request(m, http, "ask", f"/v1/studies/{sid}/ask",
                          {"count": 1, "worker_id": f"{self.worker_prefix}-{m.index}"},
                          {"Idempotency-Key": key})
        if isinstance(r, str) or r.status_code != 200:
            self._fail("ask", slot, r if isinstance(r, str) else f"{r.status_code}: {r.text[:300]}")
            return
        ask_t = self.now()
        trial = r.json()["trials"][0]
        tid, params = int(trial["id"]), trial["params"]
        pk = params_key(params)
        with self._lock:
            other = self.asked.get(tid)
            if other is not None and other != slot:
                self.reused.append({"trial": tid, "slots": [other, slot]})
            self.asked[tid] = slot
            holder = self.in_flight.get(pk)
            if holder is not None and holder != tid:
                self.dup_running.append({"trial": tid, "running": holder, "params": params})
            self.in_flight[pk] = tid
        try:
            value = float(self.objective(params))
            if self.eval_sleep:
                time.sleep(self.eval_sleep * m.rng.uniform(0.5, 1.5))
            r = self._request(m, http, "tell", f"/v1/studies/{sid}/trials/{tid}/tell", {"value": value})
            if isinstance(r, str):
                self._fail("tell", slot, r, trial=tid)
            elif r.status_code == 200:
                with self._lock:
                    if tid in self.acked:
                        self.double_acked.append(tid)
                    self.acked[tid] = value
                    self._lock.notify_all()
                m.pairs.append((slot, tid, ask_t, self.now()))
            elif r.status_code == 409:
                with self._lock:
                    self.conflicts.append({"trial": tid, "value": value, "answer": r.text[:300]})
            else:
                self._fail("tell", slot, f"{r.status_code}: {r.text[:300]}", trial=tid)
        finally:
            with self._lock:
                if self.in_flight.get(pk) == tid:
                    del self.in_flight[pk]

    # ------------------------------------------------------------ results
    def attempts(self) -> list[tuple[str, float, float, int | str]]:
        return sorted((a for m in self._members for a in m.attempts), key=lambda a: a[1])

    def pairs(self) -> list[tuple[int, int, float, float]]:
        return sorted((p for m in self._members for p in m.pairs), key=lambda p: p[3])

    def summary(self) -> dict[str, Any]:
        """Throughput, latencies of the answered attempts, outcomes and retries: JSON-able."""
        attempts = self.attempts()
        wall = (self.t_end or time.perf_counter()) - self.t_start
        outcomes: dict[str, Counter] = {"ask": Counter(), "tell": Counter()}
        for kind, _, _, o in attempts:
            outcomes[kind][str(o)] += 1
        retries: Counter = Counter()
        for m in self._members:
            retries.update(m.retries)
        statuses = [o for _, _, _, o in attempts]
        by_kind = Counter(f["kind"] for f in self.failed)
        return {
            "clients": self.clients, "trials": self.trials, "wall_s": round(wall, 3),
            "pairs": len(self.acked), "pairs_per_s": len(self.acked) / wall if wall > 0 else 0.0,
            "ask_ms": summarize_ms([t1 - t0 for k, t0, t1, o in attempts if k == "ask" and o == 200]),
            "tell_ms": summarize_ms([t1 - t0 for k, t0, t1, o in attempts if k == "tell" and o == 200]),
            "outcomes": {k: dict(sorted(v.items())) for k, v in outcomes.items()},
            "errors_5xx": sum(isinstance(o, int) and o >= 500 for o in statuses),
            "answers_503": sum(o == 503 for o in statuses),
            "answers_503_without_retry_after": sum(m.no_retry_after for m in self._members),
            "answers_500": sum(o == 500 for o in statuses),
            "transport_errors": sum(isinstance(o, str) for o in statuses),
            "retries": {"ask": retries["ask"], "tell": retries["tell"], "total": sum(retries.values())},
            "failed_permanently": {"ask": by_kind["ask"], "tell": by_kind["tell"], "total": len(self.failed)},
            "failed_examples": self.failed[:5],
            "conflicts_409": len(self.conflicts), "conflict_examples": self.conflicts[:3],
            "dup_running": len(self.dup_running), "dup_running_examples": self.dup_running[:3],
            "asks_reused_across_keys": len(self.reused), "double_acked": len(self.double_acked),
            "crashed": self.crashed[:5],
        }


# ---------------------------------------------------------------- reading back
def _get(http: httpx.Client, path: str, deadline: float = 60.0, **params: Any) -> dict[str, Any]:
    """GET with retries on 503 and transport errors (for reading a study back after a fault)."""
    end = time.monotonic() + deadline
    while True:
        try:
            r = http.get(path, params=params or None)
            if r.status_code != 503:
                r.raise_for_status()
                return r.json()
            why = f"503: {r.text[:200]}"
        except httpx.TransportError as e:
            why = f"{type(e).__name__}: {e}"
        if time.monotonic() > end:
            raise RuntimeError(f"GET {path}: still failing after {deadline:.0f} s: {why}")
        time.sleep(0.2)


def read_trials(http: httpx.Client, study_id: int, page: int = 1000) -> list[dict[str, Any]]:
    """Every trial of the study, through the paginated listing."""
    out: list[dict[str, Any]] = []
    total = None
    for _ in range(10_000):  # bounded: 10M trials at most
        body = _get(http, f"/v1/studies/{study_id}/trials", limit=page, offset=len(out))
        total = body["total"]
        out.extend(body["trials"])
        if not body["trials"] or len(out) >= total:
            break
    if total is not None and len(out) != total:
        raise RuntimeError(f"listing gave {len(out)} trials, total says {total}")
    return out


def verify(base_url: str, study_id: int, crowds: list[Crowd], expected_total: int | None = None
           ) -> dict[str, Any]:
    """Read the study back and check every invariant; ``problems`` lists each one broken.

    ``crowds``: every crowd that ran on the study (a warm-up one and the main one), so
    their acknowledged tells together are the study's trials.
    """
    with httpx.Client(base_url=base_url, timeout=60.0, trust_env=False) as http:
        view = _get(http, f"/v1/studies/{study_id}")
        trials = read_trials(http, study_id)
    acked: dict[int, float] = {}
    for c in crowds:
        acked.update(c.acked)
    sums = [c.summary() for c in crowds]

    def total(key: str) -> int:
        return sum(s[key] for s in sums)

    failed = [f for c in crowds for f in c.failed]
    by_id = {int(t["id"]): t for t in trials}
    numbers = sorted(int(t["number"]) for t in trials)
    missing = sorted(set(range(len(trials))) - set(numbers))
    lost = [tid for tid in acked if tid not in by_id or by_id[tid]["state"] != "complete"]
    changed = [tid for tid, v in acked.items()
               if tid in by_id and by_id[tid]["state"] == "complete" and by_id[tid]["value"] != v]
    keys = [params_key(t["params"]) for t in trials]
    running = [int(t["id"]) for t in trials if t["state"] == "running"]
    states = Counter(t["state"] for t in trials)
    predicted = sum(t["state"] == "complete" and t["prediction"] is not None
                    and t["prediction"].get("method") != "raw" for t in trials)
    steps = sorted({int(p["steps"]) for p in view["adaptive"]["pairs"]})
    out: dict[str, Any] = {
        "trials_total": len(trials), "states": dict(states), "complete_in_view": view["trials"]["complete"],
        "acked": len(acked), "lost": len(lost), "lost_examples": lost[:5],
        "value_changed": len(changed), "duplicated_409": total("conflicts_409"),
        "dup_running": total("dup_running"), "dup_params": len(keys) - len(set(keys)), "gaps": len(missing),
        "dup_numbers": len(numbers) - len(set(numbers)), "running_left": len(running),
        "failed_permanently": len(failed), "adaptive_steps": steps, "predicted_tells": predicted,
        "predictions": dict(Counter(str((t["prediction"] or {}).get("method")) for t in trials)),
    }
    problems = []
    if expected_total is not None and len(trials) != expected_total:
        problems.append(f"the study holds {len(trials)} trials, the crowd asked for {expected_total}")
    if numbers != list(range(len(trials))):
        problems.append(f"numbers are not 0..{len(trials) - 1}: {len(missing)} missing (first {missing[:5]}), "
                        f"{out['dup_numbers']} repeated")
    if lost:
        problems.append(f"{len(lost)} acknowledged tells lost (trials {lost[:5]})")
    if changed:
        problems.append(f"{len(changed)} acknowledged tells stored with another value (trials {changed[:5]})")
    if out["duplicated_409"]:
        problems.append(f"{out['duplicated_409']} tells answered 409 (told twice, differently)")
    if out["dup_running"]:
        problems.append(f"{out['dup_running']} asks returned params of a trial still running: "
                        f"{[x for s in sums for x in s['dup_running_examples']][:2]}")
    if out["dup_params"]:
        problems.append(f"{out['dup_params']} trials repeat another trial's params")
    if running:
        problems.append(f"{len(running)} trials still running after the crowd ended (trials {running[:5]})")
    if view["trials"]["complete"] != len(acked):
        problems.append(f"the study counts {view['trials']['complete']} complete trials, "
                        f"{len(acked)} tells were acknowledged")
    if steps != [predicted]:
        problems.append(f"adaptive steps {steps} != {predicted} predicted tells (one adapt per tell)")
    if failed:
        problems.append(f"{len(failed)} requests failed permanently: {failed[:3]}")
    if total("asks_reused_across_keys") or total("double_acked"):
        problems.append(f"a trial was handed to two asks ({total('asks_reused_across_keys')}) or "
                        f"acknowledged twice ({total('double_acked')})")
    crashed = [x for s in sums for x in s["crashed"]]
    if crashed:
        problems.append(f"client threads crashed: {crashed}")
    out["problems"] = problems
    return out


# ---------------------------------------------------------------- server and database
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
        cmd = [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--database-url", self.database_url, "--workers", str(self.workers)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.code or ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=2.0, trust_env=False) as c:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"calibo serve exited with {self.proc.returncode}:\n{_tail(self.log_path)}")
                with contextlib.suppress(httpx.HTTPError):
                    if c.get("/healthz").status_code == 200:
                        return time.perf_counter() - t0
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"calibo serve did not answer /healthz in {timeout:.0f} s:\n"
                                       f"{_tail(self.log_path)}")
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
            _stop_group(self.proc)
            self.proc = None

    def __enter__(self) -> CaliboServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tail(self, n: int = 40) -> str:
        return _tail(self.log_path, n)


class PgOutage:
    """Make one PostgreSQL database unreachable (no new connection, every session ended) and back.

    ``admin`` is a libpq conninfo to *another* database of the same server. Used as a
    context manager, connections are allowed again on exit, whatever happened.
    """

    def __init__(self, admin: str, database: str) -> None:
        self.admin = admin.replace("postgresql+psycopg://", "postgresql://")
        self.database = database
        self.began = self.ended = None

    def _exec(self, *sql: tuple[str, tuple]) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True, connect_timeout=10) as c:
            for q, args in sql:
                c.execute(q, args)

    def begin(self) -> float:
        self._exec((f'ALTER DATABASE "{self.database}" WITH ALLOW_CONNECTIONS false', ()),
                   ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                    "AND pid <> pg_backend_pid()", (self.database,)))
        self.began = time.perf_counter()
        return self.began

    def end(self) -> float:
        for attempt in range(10):
            try:
                self._exec((f'ALTER DATABASE "{self.database}" WITH ALLOW_CONNECTIONS true', ()))
                break
            except Exception:  # noqa: BLE001 - keep trying: leaving the database closed is worse
                if attempt == 9:
                    raise
                time.sleep(1.0)
        self.ended = time.perf_counter()
        return self.ended

    def __enter__(self) -> PgOutage:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.began is not None and self.ended is None:
            self.end()


class HealthMonitor:
    """Polls ``/healthz`` every ``interval`` seconds on a thread: (time, status, database field)."""

    def __init__(self, base_url: str, clock: Callable[[], float], interval: float = 0.1) -> None:
        self.base_url = base_url
        self.clock = clock
        self.interval = interval
        self.samples: list[tuple[float, int | str, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="healthz")

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=2.0, trust_env=False) as c:
            while not self._stop.is_set():
                t = self.clock()
                try:
                    r = c.get("/healthz")
                    try:
                        db = r.json().get("database")
                    except ValueError:
                        db = None
                    self.samples.append((t, r.status_code, db))
                except httpx.HTTPError as e:
                    self.samples.append((t, type(e).__name__, None))
                self._stop.wait(self.interval)

    def __enter__(self) -> HealthMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


# ---------------------------------------------------------------- scenarios
WARM = 16  # trials told by one client before a crowd starts, so the crowd runs on a fitted surrogate


def create_study(base_url: str, name: str, seed: int, settings: dict[str, Any] | None = None) -> int:
    with httpx.Client(base_url=base_url, timeout=60.0, trust_env=False) as http:
        r = http.post("/v1/studies", json={"name": name, "space": TASK.space, "direction": TASK.direction,
                                           "seed": seed, "settings": settings or {}})
        if r.status_code not in (200, 201):
            raise RuntimeError(f"create study: {r.status_code}: {r.text[:300]}")
        return int(r.json()["id"])


def _view(base_url: str, study_id: int) -> dict[str, Any]:
    with httpx.Client(base_url=base_url, timeout=60.0, trust_env=False) as http:
        return _get(http, f"/v1/studies/{study_id}")


def warm_up(base_url: str, study_id: int, n: int, seed: int, timeout: float = 120.0,
            **crowd_kw: Any) -> Crowd | None:
    """``n`` pairs by a single client, then until a fit covering them is stored (bounded)."""
    if n <= 0:
        return None
    crowd = Crowd(base_url, study_id, clients=1, trials=n, seed=seed + 7919, worker_prefix="warm",
                  **crowd_kw).start()
    crowd.join(timeout)
    deadline = time.monotonic() + timeout
    while _view(base_url, study_id)["surrogate_status"]["fitted_on"] < n and time.monotonic() < deadline:
        time.sleep(0.1)
    return crowd


class _Run:
    """A study on ``base_url``: a warm-up by one client, then the crowd; verified at the end."""

    def __init__(self, scenario: str, base_url: str, *, clients: int, trials: int, seed: int, warm: int,
                 settings: dict[str, Any] | None, crowd_kw: dict[str, Any]) -> None:
        if not 0 <= warm < trials:
            raise ValueError(f"warm ({warm}) must be below trials ({trials})")
        self.base_url, self.trials = base_url, trials
        self.study_id = create_study(base_url, f"{scenario}-{clients}x{trials}-{uuid.uuid4().hex[:8]}", seed,
                                     settings)
        t0 = time.perf_counter()
        self.warm = warm_up(base_url, self.study_id, warm, seed, **crowd_kw)
        self.warm_s = time.perf_counter() - t0
        self.crowd = Crowd(base_url, self.study_id, clients=clients, trials=trials - warm, seed=seed,
                           **crowd_kw)
        self.result: dict[str, Any] = {"scenario": scenario, "study_id": self.study_id, "trials_total": trials,
                                       "warm_trials": warm, "warm_s": round(self.warm_s, 3)}
        self.problems: list[str] = []

    def acked(self) -> int:
        return (len(self.warm.acked) if self.warm else 0) + self.crowd.acked_count

    def finish(self, finished: bool, timeout: float) -> dict[str, Any]:
        res = self.result
        res.update(self.crowd.summary())
        res["finished"] = finished
        crowds = [c for c in (self.warm, self.crowd) if c is not None]
        res["invariants"] = verify(self.base_url, self.study_id, crowds, expected_total=self.trials)
        res["problems"] = ([] if finished else [f"the crowd did not finish in {timeout:.0f} s"]) \
            + self.problems + res["invariants"]["problems"]
        return res


def run_load(base_url: str, *, clients: int, trials: int, seed: int = 0, warm: int = WARM,
             timeout: float = 600.0, settings: dict[str, Any] | None = None, progress: Progress | None = None,
             **crowd_kw: Any) -> dict[str, Any]:
    """A crowd on a new study (after ``warm`` sequential pairs), start to end, no fault."""
    run = _Run("load", base_url, clients=clients, trials=trials, seed=seed, warm=warm, settings=settings,
               crowd_kw=crowd_kw)
    run.crowd.start()
    return run.finish(run.crowd.join(timeout, progress), timeout)


def _durable(view: dict[str, Any]) -> dict[str, Any]:
    """What must read the same right before a kill (nothing in flight) and right after the restart."""
    return {"adaptive": view["adaptive"], "trials": view["trials"], "best_trial": view["best_trial"]}


def run_kill(server: CaliboServer, *, clients: int, trials: int, seed: int = 0, warm: int = WARM,
             hot_at: float = 0.25, quiet_at: float = 0.6, timeout: float = 600.0,
             settings: dict[str, Any] | None = None, progress: Progress | None = None,
             **crowd_kw: Any) -> dict[str, Any]:
    """Two kill -9 of the API during one crowd run, each followed by a restart on the same port.

    *hot*: at ``hot_at`` of the trials told, with the crowd running: its clients retry through
    the connection errors (asks with their Idempotency-Key). *quiet*: at ``quiet_at``, the crowd
    paused (no request in flight) so the study's state read just before the kill covers exactly
    the acknowledged tells; it must read the same right after the restart. Then the crowd
    finishes and every invariant is checked.
    """
    base = server.url
    run = _Run("kill", base, clients=clients, trials=trials, seed=seed, warm=warm, settings=settings,
               crowd_kw=crowd_kw)
    crowd, res = run.crowd, run.result
    crowd.start()
    try:
        if not crowd.wait_acked(math.ceil(hot_at * trials) - warm, timeout, progress):
            raise RuntimeError(f"the crowd stalled before the hot kill: {crowd.summary()}")
        res["hot_kill_at_acked"] = run.acked()
        res["hot_kill_t"] = round(crowd.now(), 3)
        server.kill()
        res["hot_restart_s"] = round(server.start(), 3)

        if not crowd.wait_acked(math.ceil(quiet_at * trials) - warm, timeout, progress):
            raise RuntimeError(f"the crowd stalled after the hot restart: {crowd.summary()}")
        if not crowd.pause(120):
            raise RuntimeError("the crowd did not go idle in 120 s")
        acked = run.acked()
        before = _view(base, run.study_id)
        res["quiet_kill_at_acked"] = acked
        res["quiet_kill_t"] = round(crowd.now(), 3)
        server.kill()
        res["quiet_restart_s"] = round(server.start(), 3)
        after = _view(base, run.study_id)
        crowd.resume()
        res["state_before"], res["state_after"] = _durable(before), _durable(after)
        res["state_equal"] = _durable(before) == _durable(after)
        if not res["state_equal"]:
            run.problems.append("the study's adaptive state / counts / best changed across the quiet kill")
        if before["trials"]["complete"] != acked:
            run.problems.append(f"before the quiet kill the study counts {before['trials']['complete']} "
                                f"complete trials, {acked} tells were acknowledged")
        if before["trials"]["running"]:
            run.problems.append(f"{before['trials']['running']} trials running with the crowd idle (asks "
                                "cut off by the hot kill were served again as new trials)")
    finally:
        crowd.resume()
        finished = crowd.join(timeout, progress)
    res["timeline"] = timeline(crowd.attempts())
    return run.finish(finished, timeout)


def run_outage(base_url: str, admin: str, database: str, *, clients: int, trials: int, seed: int = 0,
               warm: int = WARM, at: float = 0.3, outage_s: float = 4.0, timeout: float = 600.0,
               settings: dict[str, Any] | None = None, progress: Progress | None = None,
               **crowd_kw: Any) -> dict[str, Any]:
    """PostgreSQL database ``database`` unreachable for ``outage_s`` seconds mid-run, then back.

    Records what the clients saw during the outage, ``/healthz`` throughout, the recovery
    time (from connections allowed again to the end of the first ask+tell pair whose ask was
    answered after that), and the invariants at the end.
    """
    run = _Run("outage", base_url, clients=clients, trials=trials, seed=seed, warm=warm, settings=settings,
               crowd_kw=crowd_kw)
    crowd, res = run.crowd, run.result
    res["outage_s"] = outage_s
    crowd.start()
    down = up = None
    with HealthMonitor(base_url, crowd.now) as health:
        try:
            with PgOutage(admin, database) as outage:
                if not crowd.wait_acked(math.ceil(at * trials) - warm, timeout, progress):
                    raise RuntimeError(f"the crowd stalled before the outage: {crowd.summary()}")
                res["outage_at_acked"] = run.acked()
                outage.begin()
                down = crowd.now()
                end = time.monotonic() + outage_s
                while (left := end - time.monotonic()) > 0:
                    time.sleep(min(left, 0.25))
                    if progress:
                        progress(run.acked(), trials)
                outage.end()
                up = crowd.now()
        finally:
            finished = crowd.join(timeout, progress)
        time.sleep(0.3)  # a few healthz samples after the end
    res["outage_window"] = [round(down, 3), round(up, 3)]
    during = Counter(str(o) for _, t0, _, o in crowd.attempts() if down <= t0 <= up)
    res["outcomes_during_outage"] = dict(sorted(during.items()))
    after = [p for p in crowd.pairs() if p[2] >= up]
    res["recovery_s"] = round(min(p[3] for p in after) - up, 3) if after else None
    h = list(health.samples)
    res["healthz"] = [(round(t, 3), s, d) for t, s, d in h]
    down_seen = [t for t, s, d in h if down + 0.5 <= t <= up and s == 503 and d == "down"]
    ok_after = [t for t, s, d in h if t >= up and s == 200 and d == "ok"]
    res["healthz_down_seen"] = bool(down_seen)
    res["healthz_recovery_s"] = round(min(ok_after) - up, 3) if ok_after else None
    res["healthz_during"] = dict(Counter(f"{s}/{d}" for t, s, d in h if down + 0.5 <= t <= up))
    res["timeline"] = timeline(crowd.attempts())
    out = run.finish(finished, timeout)
    extra = []
    if out["answers_500"]:
        extra.append(f"{out['answers_500']} answers were 500 (the contract: 503 while the database is "
                     "unreachable)")
    if not out["answers_503"]:
        extra.append("no client saw a 503 during the outage")
    if out["answers_503_without_retry_after"]:
        extra.append(f"{out['answers_503_without_retry_after']} answers 503 came without Retry-After")
    if not out["healthz_down_seen"]:
        extra.append(f"/healthz never reported the database down during the outage: {out['healthz_during']}")
    if out["healthz_recovery_s"] is None:
        extra.append("/healthz never reported the database ok after the outage")
    if out["recovery_s"] is None:
        extra.append("no ask+tell pair succeeded after the database came back")
    out["problems"] = extra + out["problems"]
    return out


def timeline(attempts: list[tuple[str, float, float, int | str]], step: float = 0.25) -> dict[str, Any]:
    """Answers per ``step`` seconds (by when they ended), by outcome: for plotting an outage."""
    if not attempts:
        return {"step": step, "counts": {}}
    n = int(max(a[2] for a in attempts) / step) + 1
    counts: dict[str, list[int]] = {}
    for _, _, t1, o in attempts:
        key = str(o) if isinstance(o, int) else "transport"
        counts.setdefault(key, [0] * n)[int(t1 / step)] += 1
    return {"step": step, "counts": counts}


@contextlib.contextmanager
def server_on(database_url: str, log_path: Path, **kw: Any) -> Iterator[CaliboServer]:
    srv = CaliboServer(database_url, log_path, **kw)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
