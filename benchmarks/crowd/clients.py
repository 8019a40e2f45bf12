"""A crowd of ask/tell clients on one study, with retries.

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
"""

from __future__ import annotations

import contextlib
import email.utils
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.harness.tasks import TASKS
from benchmarks.harness.timing import summarize_ms

TASK = TASKS["hartmann6"]
RETRY_STATUSES = frozenset({503})
Progress = Callable[[int, int], None]  # (acknowledged tells, trials in total)
AskHook = Callable[[int, dict[str, Any], float], None]  # (slot, trial as answered, crowd time)


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
                 worker_prefix: str = "crowd", duration: Callable[[int], float] | None = None,
                 on_ask: AskHook | None = None) -> None:
        """``duration(slot)``: the seconds slot's evaluation sleeps (instead of ``eval_sleep``'s draw);
        ``on_ask(slot, trial, t)``: called with every trial an ask answered and when (``now()``)."""
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
        self.duration = duration
        self.on_ask = on_ask
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
        if self.on_ask is not None:
            self.on_ask(slot, trial, ask_t)
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
            if self.duration is not None:
                time.sleep(self.duration(slot))
            elif self.eval_sleep:
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
