"""The three crowd scenarios: :func:`run_load`, :func:`run_kill` and :func:`run_outage`.

Each creates a study, has one client tell the first ``warm`` trials (so the crowd
runs on a fitted surrogate), runs the crowd (through a kill -9 and restart of the
API, or a PostgreSQL outage, for the last two) and returns a JSON-able result with
the crowd's summary, the invariants (:func:`benchmarks.crowd.verify.verify`) and a
``problems`` list (empty when every invariant held).
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from typing import Any

import httpx

from benchmarks.crowd.clients import TASK, Crowd, Progress
from benchmarks.crowd.faults import HealthMonitor, PgOutage
from benchmarks.crowd.server import CaliboServer
from benchmarks.crowd.verify import _get, verify
from benchmarks.harness.tasks import Task

WARM = 16  # trials told by one client before a crowd starts, so the crowd runs on a fitted surrogate


def create_study(base_url: str, name: str, seed: int, settings: dict[str, Any] | None = None,
                 task: Task = TASK) -> int:
    with httpx.Client(base_url=base_url, timeout=60.0, trust_env=False) as http:
        r = http.post("/v1/studies", json={"name": name, "space": task.space, "direction": task.direction,
                                           "seed": seed, "settings": settings or {}})
        if r.status_code not in (200, 201):
            raise RuntimeError(f"create study: {r.status_code}: {r.text[:300]}")
        return int(r.json()["id"])


def study_view(base_url: str, study_id: int) -> dict[str, Any]:
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
    while study_view(base_url, study_id)["surrogate_status"]["fitted_on"] < n and time.monotonic() < deadline:
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
        before = study_view(base, run.study_id)
        res["quiet_kill_at_acked"] = acked
        res["quiet_kill_t"] = round(crowd.now(), 3)
        server.kill()
        res["quiet_restart_s"] = round(server.start(), 3)
        after = study_view(base, run.study_id)
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
