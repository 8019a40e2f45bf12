"""Cluster mode on one machine: ask+tell throughput and fit lag, local fit pool vs the fit queue.

Every row runs on PostgreSQL (127.0.0.1:5432), on a fresh database, with the
same study as the throughput ("load") row of ``benchmarks.service``:
Hartmann-6, default study settings, ``--candidates`` (2000) candidates, seed
``--seed + 2 + repeat``, ``--preload`` (500) finished trials told through the
API before timing (so the surrogate is past its warm-up), the first fit
covering them waited for. Then ``--clients`` (32) threads, each with its own
keep-alive ``httpx.Client``, loop ask -> tell (the Hartmann-6 value) on that
one study for ``--warmup`` + ``--duration`` seconds (``calibo.server.run_throughput``;
with two API processes the clients alternate between their ports). Rows:

* ``pool``: ``calibo serve --workers 1`` (``CALIBO_WORKER_MODE=pool``, the
  default): fits run in one local fit process of the API; the baseline at
  equal cores;
* ``q1x1``, ``q1x2``, ``q2x1``, ``q2x2``: ``CALIBO_WORKER_MODE=queue``: 1 or 2
  ``calibo serve`` processes sharing the database defer fit jobs to the
  procrastinate queue, and 1 or 2 ``calibo worker`` processes (``--concurrency
  1`` each) take them and store the snapshots.

Per row, under that load: pairs/s, ask p50/p99 and tell p50 (ms, over HTTP
from the client); the **fit lag**: for each trial told in the counted window
(in finishing order), the number of tells that finished after it and before
the first snapshot including it was stored (and the same in seconds). A
snapshot fitted on ``n_obs`` observations includes the first ``n_obs``
completed trials in finishing order (a fit reads every completed trial; tells
commit in ``finish_seq`` order under the study's lock). Trial finishing times
come from the database after the run (``trials.finish_seq``, ``finished_at``);
snapshot times from polling ``GET /v1/studies/{id}`` every ``--poll`` (0.05) s
during the run (``surrogate_status.snapshot_version``, ``fitted_on``,
``fitted_at``: when the snapshot was stored, on the server's clock, i.e. this
machine's) and the ``snapshots`` table at the end (it keeps the newest 3). A
version that came and went between two polls is counted in ``versions_missed``
(its trials are then charged to the next version seen: an overestimate). The
lag counts the trials told in the window less its last ``--lag-tail`` (4) s:
the tells go on until the window closes, so any lag shorter than that is seen
whole; a longer one is ``censored`` (left out, and counted). Also: fits/s
(snapshot versions stored per second of the window), tells per fit, fit
seconds, CPU cores used by the API(s), the pool's fit process, the queue
workers, PostgreSQL, this process (clients + poller) and everything else; HTTP
errors by status; and every ERROR / WARNING / Traceback line in the servers'
and workers' logs.

Before the load, each row also runs service.py's sequential **crowd** row:
one client, ``--pairs`` (200) timed ask+tell pairs on its own preloaded study
with ``ask_wait_seconds=0`` (asks served from the newest snapshot).

Aims (from the issue): with queue workers, fit lag at least as low as the
local pool's at equal cores (``q1x1`` against ``pool``: mean and p90, in
tells; the other queue rows against ``pool`` are shown too, marked
informative), and no loss of the crowd latency figures already reached (ask
p50 <= 20 ms, ask p99 <= 100 ms). Those figures are the sequential crowd
row's, where they were reached; under 32 closed-loop clients on 2 cores an ask
queues behind the other clients' requests (ask latency ~ clients / pairs/s,
~80 ms in service.py's load row), so they are checked on the sequential run
and the latencies under load are compared between rows.

What 2 cores can and cannot show. Everything here shares the same cores: the
32 client threads, the poller, the API process(es), the fit process or
workers, and PostgreSQL. A second API process or a second worker adds
processes, not CPU: on this machine ``q2x2`` measures the overhead and
contention of the cluster layout (more processes, connections and lock
traffic on the same two cores), not its scaling, which needs more machines
(API replicas and workers on their own cores, PostgreSQL on its own). Also,
one study is fitted by one worker at a time (the job lock ``calibo-fit-<id>``):
with a single study a second worker can only shorten the time to pick up the
next fit job, never fit in parallel; more workers pay off with many studies.
The queue's own costs (a job insert per coalesced burst of tells, the
worker's fetch, the notify) are part of what ``q1x1`` vs ``pool`` shows; so
is priority: the pool's fit process runs at niceness 10 (fits yield to asks
and tells), while a ``calibo worker`` runs at the niceness it was started with
(``--worker-nice``, default 0, as deployed), so on shared cores its fits take
CPU from the API and PostgreSQL: a lower fit lag may cost throughput and
latency under load. ``--worker-nice 10`` compares at equal priority.

    python -m benchmarks.cluster                                    # all rows, ~5 min
    python -m benchmarks.cluster --rows pool,q1x1 --repeats 3 --freeze
    python -m benchmarks.cluster --duration 5 --warmup 2 --preload 200 --pairs 50 \
        --rows pool,q1x1,q2x2 --out-dir /tmp/cluster-smoke                     # smoke run, ~1 min

Writes benchmarks/results/cluster.json and cluster.png (``--out-dir``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import re
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import report
from benchmarks.harness.servers import (
    Calibo,
    calibo_process,
    calibo_server,
    fit_status,
    freeze_code,
    git_state,
    pg_database,
    terminate,
)
from benchmarks.harness.servers import versions as package_versions
from benchmarks.harness.timing import (
    PairFn,
    combine_throughput,
    log,
    process_cpu,
    run_latency,
    run_throughput,
)
from benchmarks.service import AIMS, OTHERS_WARN


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    mode: str  # CALIBO_WORKER_MODE
    apis: int  # calibo serve processes
    workers: int  # pool: fit processes of the one API; queue: calibo worker processes


ROWS = {r.key: r for r in (
    Row("pool", "pool 1 API x 1 fit process", "pool", 1, 1),
    Row("q1x1", "queue 1 API + 1 worker", "queue", 1, 1),
    Row("q1x2", "queue 1 API + 2 workers", "queue", 1, 2),
    Row("q2x1", "queue 2 API + 1 worker", "queue", 2, 1),
    Row("q2x2", "queue 2 API + 2 workers", "queue", 2, 2),
)}
LOG_ISSUE = re.compile(r" (ERROR|WARNING|CRITICAL) |Traceback|Exception")
STATUS = re.compile(r"-> (\d{3}):")


# ------------------------------------------------------------------ processes
@contextlib.contextmanager
def calibo_worker(url: str, logdir: Path, label: str, code: Path | None, concurrency: int = 1,
                  nice: int = 0):
    """``calibo worker`` (see :func:`service.calibo_process`), ready once it logged so."""
    logfile = logdir / f"worker-{label}.log"
    args = ["worker", "--database-url", url, "--concurrency", str(concurrency)]
    env = {"CALIBO_WORKER_MODE": "queue", "CALIBO_MIGRATE": "false",  # the first API migrated
           "CALIBO_WORKER_ALIVE_FILE": str(logdir / f"worker-{label}.alive")}
    prefix = ("nice", "-n", str(nice)) if nice else ()
    with calibo_process(args, logfile, "calibo worker", lambda: " ready: " in logfile.read_text(errors="replace"),
                        code, env, prefix=prefix) as proc:
        yield proc.pid, logfile


def cluster_cpu(api_pids: list[int], worker_pids: list[int]) -> dict[str, float]:
    """CPU seconds so far by who used them: ``api`` (the serve processes), ``fit`` (their children:
    the pool's fit processes), ``workers`` (calibo worker process groups), and process_cpu's
    ``bench``, ``postgresql``, ``machine``."""
    out = {"api": 0.0, "fit": 0.0, "workers": 0.0}
    base: dict[str, float] = {}
    for pid in api_pids:
        base = process_cpu(pid)
        out["api"] += base.get("server_api", 0.0)
        out["fit"] += base.get("server_workers", 0.0)
    for pid in worker_pids:
        c = process_cpu(pid)
        out["workers"] += c.get("server_api", 0.0) + c.get("server_workers", 0.0)
    for k in ("bench", "postgresql", "machine"):
        if k in base:
            out[k] = base[k]
    return out


# ------------------------------------------------------------------ fit lag
class Poller:
    """A thread reading the study's surrogate status every ``every`` seconds (own HTTP client)."""

    def __init__(self, base: str, sid: int, every: float) -> None:
        self.base, self.sid, self.every = base, sid, every
        self.polls: list[dict[str, Any]] = []
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-poller")

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        import httpx

        with httpx.Client(base_url=self.base, timeout=30.0, trust_env=False) as c:
            while not self._stop.is_set():
                t = time.time()
                try:
                    r = c.get(f"/v1/studies/{self.sid}")
                    if r.status_code >= 400:
                        self.errors[str(r.status_code)] += 1
                    else:
                        v = r.json()
                        s = v["surrogate_status"]
                        self.polls.append({"t": t, "version": s["snapshot_version"], "n_obs": s["fitted_on"],
                                           "fitted_at": s["fitted_at"], "fit_seconds": s["fit_seconds"],
                                           "complete": v["trials"]["complete"], "fitting": s.get("fitting"),
                                           "queued": s.get("queued")})
                except Exception as e:  # counted; the poller keeps going
                    self.errors[type(e).__name__] += 1
                self._stop.wait(self.every)


def _ts(v: Any) -> float:
    if isinstance(v, str):
        v = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.UTC)
    return v.timestamp()


def read_db(url: str, sid: int) -> dict[str, Any]:
    """What the lag needs from the database (read-only): finished trials, surviving snapshots, the study."""
    import psycopg

    with psycopg.connect(url) as c:
        trials = c.execute("SELECT finish_seq, finished_at, state FROM trials WHERE study_id = %s "
                           "AND finish_seq IS NOT NULL ORDER BY finish_seq", (sid,)).fetchall()
        snaps = c.execute("SELECT version, n_obs, created_at, fit_seconds FROM snapshots WHERE study_id = %s",
                          (sid,)).fetchall()
        study = c.execute("SELECT n_complete, finish_seq, snapshot_version, snapshot_n_obs, fitted_at "
                          "FROM studies WHERE id = %s", (sid,)).fetchone()
    return {"trials": [(int(s), _ts(f), st) for s, f, st in trials],
            "snapshots": [(int(v), int(n), _ts(t), float(fs)) for v, n, t, fs in snaps],
            "study": {"n_complete": study[0], "finish_seq": study[1], "snapshot_version": study[2],
                      "snapshot_n_obs": study[3]}}


def fit_lag(db: dict[str, Any], polls: list[dict[str, Any]], lo: float, hi: float, tail: float) -> dict[str, Any]:
    """Fit lag of the trials told in ``[lo, hi - tail)`` (wall clock: the tells go on until ``hi``, so
    a lag shorter than ``tail`` seconds is seen whole), fits and tells in ``[lo, hi)``."""
    snaps: dict[int, tuple[int, float, float | None]] = {}  # version -> (n_obs, stored at, fit seconds)
    for p in polls:
        if p["version"] and p["fitted_at"]:
            snaps.setdefault(int(p["version"]), (int(p["n_obs"]), _ts(p["fitted_at"]), p["fit_seconds"]))
    from_polls = set(snaps)
    for v, n, t, fs in db["snapshots"]:
        snaps.setdefault(v, (n, t, fs))
    versions = sorted(snaps)
    n_obs = np.array([snaps[v][0] for v in versions], dtype=float)
    stored = np.array([snaps[v][1] for v in versions], dtype=float)
    if len(n_obs) > 1 and np.any(np.diff(n_obs) <= 0):
        log(f"warning: snapshot n_obs not increasing with version: {list(zip(versions, n_obs, strict=True))}")
    n_obs = np.maximum.accumulate(n_obs) if len(n_obs) else n_obs
    missed = (sorted(set(range(versions[0], versions[-1] + 1)) - set(versions)) if versions else [])

    trials = db["trials"]
    t_fin = np.array([t for _, t, _ in trials], dtype=float)
    complete = np.array([st == "complete" for _, _, st in trials])
    rank = np.cumsum(complete)  # a completed trial's position among the completed ones
    last_tell = float(t_fin.max()) if len(t_fin) else hi
    lags, lag_s = [], []
    censored = uncovered = 0
    for i in np.flatnonzero(complete & (t_fin >= lo) & (t_fin < hi - tail)):
        j = int(np.searchsorted(n_obs, rank[i], side="left"))  # first snapshot on >= rank[i] observations
        if j >= len(n_obs):
            uncovered += 1
            continue
        t_snap = stored[j]
        if t_snap > last_tell:
            censored += 1
            continue
        lags.append(int(np.count_nonzero(t_fin[i + 1:] < t_snap)))
        lag_s.append(max(0.0, t_snap - t_fin[i]))
    in_window = (stored >= lo) & (stored < hi)
    before = [v for v, t in zip(versions, stored, strict=True) if t < lo]
    upto = [v for v, t in zip(versions, stored, strict=True) if t < hi]
    fits = (max(upto) - max(before)) if before and upto else int(in_window.sum())
    tells = int(np.count_nonzero((t_fin >= lo) & (t_fin < hi)))
    fit_secs = [snaps[v][2] for v in versions if snaps[v][2] is not None and lo <= snaps[v][1] < hi]
    return {"lag_tells": lags, "lag_seconds": lag_s, "censored": censored, "uncovered": uncovered,
            "fits": int(fits), "tells": tells, "window_s": hi - lo, "lag_window_s": hi - tail - lo,
            "fit_seconds": fit_secs, "versions_seen": len(from_polls),
            "versions_missed": len([v for v in missed if v not in from_polls]),
            "polls": len(polls)}


def _dist(xs: list[float], d: int = 2) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    a = np.asarray(xs, dtype=float)
    return {"n": int(a.size), "mean": round(float(a.mean()), d), "p50": round(float(np.percentile(a, 50)), d),
            "p90": round(float(np.percentile(a, 90)), d), "p99": round(float(np.percentile(a, 99)), d),
            "max": round(float(a.max()), d)}


def combine_lag(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeats -> one row: lags pooled, fits/s as the median of the repeats."""
    rates = [p["fits"] / p["window_s"] for p in parts]
    tells = sum(p["tells"] for p in parts)
    fits = sum(p["fits"] for p in parts)
    per_run = [{"lag_tells": _dist(p["lag_tells"]), "lag_seconds": _dist(p["lag_seconds"], 3),
                "fits_per_s": p["fits"] / p["window_s"], "lag_window_s": p["lag_window_s"],
                **{k: p[k] for k in ("censored", "uncovered", "versions_missed", "poll_errors")}} for p in parts]
    return {"lag_runs": per_run, "fit_lag_tells": _dist([x for p in parts for x in p["lag_tells"]]),
            "fit_lag_seconds": _dist([x for p in parts for x in p["lag_seconds"]], 3),
            "fits_per_s": float(np.median(rates)), "fits_per_s_runs": rates,
            "tells_per_fit": (tells / fits) if fits else None,
            "fit_seconds": _dist([x for p in parts for x in p["fit_seconds"]], 3),
            **{k: sum(p[k] for p in parts) for k in ("censored", "uncovered", "versions_seen",
                                                     "versions_missed", "polls", "fits", "tells")}}


# ------------------------------------------------------------------ one row
def _log_issues(files: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {"lines": 0, "by_file": {}, "examples": []}
    for f in files:
        try:
            lines = [ln for ln in f.read_text(errors="replace").splitlines() if LOG_ISSUE.search(ln)]
        except OSError:
            continue
        if lines:
            out["by_file"][f.name] = len(lines)
            out["lines"] += len(lines)
            out["examples"].extend(f"{f.name}: {ln[:400]}" for ln in lines[:8])
    return out


def run_row(row: Row, args: argparse.Namespace, logdir: Path, code: Path | None) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(pg_database(f"calibo_bench_cluster_{row.key}_{os.getpid()}_{uuid.uuid4().hex[:6]}"))
        bases, api_pids, logs, worker_pids = [], [], [], []
        for i in range(row.apis):  # one after the other: the first migrates, the others need not
            env = {"CALIBO_WORKER_MODE": row.mode} | ({"CALIBO_MIGRATE": "false"} if i else {})
            base, logfile, pid = stack.enter_context(calibo_server(
                url, logdir, f"{row.key}-api{i}", row.workers if row.mode == "pool" else 1, code, env=env))
            bases.append(base)
            api_pids.append(pid)
            logs.append(logfile)
        if row.mode == "queue":
            for i in range(row.workers):
                pid, logfile = stack.enter_context(calibo_worker(url, logdir, f"{row.key}-w{i}", code,
                                                                 args.worker_concurrency, args.worker_nice))
                worker_pids.append(pid)
                logs.append(logfile)
        cbs = [Calibo(b) for b in bases]
        for c in cbs:
            stack.callback(c.close)
        cb = cbs[0]
        ids = [cb.create(f"bench-cluster-{k}", args.seed + 2 + k, args.candidates) for k in range(args.repeats)]
        preload_s = [cb.preload(sid, args.preload, args.preload_batch, f"{row.key}: preload {k + 1}/{args.repeats}")
                     for k, sid in enumerate(ids)]
        crowd = None
        if args.pairs > 0:  # service.py's crowd row: one client, asks from the newest snapshot
            sid = cb.create("bench-crowd", args.seed, args.candidates, ask_wait_seconds=0)
            cb.preload(sid, args.preload, args.preload_batch, f"{row.key}: preload crowd")
            before = fit_status(cb.wait_fitted(sid))
            with cb.client() as http:
                crowd = run_latency(cb.pair_fn(http, sid, "bench-crowd"), args.pairs, args.latency_warmup,
                                    f"{row.key}: sequential crowd", lambda: cluster_cpu(api_pids, worker_pids))
            crowd.pop("raw_ms")
            crowd["status_before"], crowd["status_after"] = before, fit_status(cb.view(sid))
            log(f"{row.key} sequential crowd: ask p50 {crowd['ask']['p50']:.1f} p99 {crowd['ask']['p99']:.1f} "
                f"tell p50 {crowd['tell']['p50']:.1f} ms")
        runs, lags, statuses = [], [], Counter()
        lock = threading.Lock()
        for k, sid in enumerate(ids):
            before = fit_status(cb.wait_fitted(sid))
            clients: list[Any] = []
            marks: list[float] = []

            def make_pair(i: int, sid: int = sid, clients: list[Any] = clients) -> PairFn:
                http = cbs[i % len(cbs)].client()
                clients.append(http)
                pair = cb.pair_fn(http, sid, f"bench-cluster-{i}")

                def counted() -> tuple[float, float]:
                    try:
                        return pair()
                    except Exception as e:
                        m = STATUS.search(str(e))
                        with lock:
                            statuses[m.group(1) if m else type(e).__name__] += 1
                        raise

                return counted

            def cpu(marks: list[float] = marks) -> dict[str, float]:
                # run_throughput reads the CPU exactly when its window opens and when it closes:
                # their wall-clock times select the trials (finished_at) the fit lag counts
                marks.append(time.time())
                return cluster_cpu(api_pids, worker_pids)

            with Poller(bases[0], sid, args.poll) as poller:
                try:
                    res = run_throughput(make_pair, args.clients, args.duration, args.warmup,
                                         f"{row.key}: {args.clients} clients ({k + 1}/{args.repeats})", cpu)
                finally:
                    for h in clients:
                        h.close()
                try:  # the snapshots covering the last tells are stored after the load stops
                    after = fit_status(cb.wait_fitted(sid, timeout=60.0))
                except RuntimeError as e:
                    log(f"{row.key}: {e}")
                    after = fit_status(cb.view(sid))
                time.sleep(2 * args.poll)
            db = read_db(url, sid)
            lag = fit_lag(db, poller.polls, marks[0], marks[1], min(args.lag_tail, args.duration / 2))
            lag["poll_errors"] = dict(poller.errors)
            lags.append(lag)
            runs.append({**res, "status_before": before, "status_after": after})
            log(f"{row.key} run {k + 1}: {res['pairs_per_s']:.0f} pairs/s, ask p50 {res['ask'].get('p50', 0):.1f} "
                f"p99 {res['ask'].get('p99', 0):.1f} ms, fit lag mean "
                f"{np.mean(lag['lag_tells']) if lag['lag_tells'] else float('nan'):.1f} tells, "
                f"{lag['fits'] / lag['window_s']:.2f} fits/s")
    issues = _log_issues(logs)
    if issues["lines"]:
        log(f"{row.key}: {issues['lines']} ERROR/WARNING/Traceback lines in the logs, e.g. {issues['examples'][:3]}")
    out = {"row": row.key, "label": row.label, "mode": row.mode, "apis": row.apis,
           "workers": row.workers, **combine_throughput(runs), **combine_lag(lags),
           "http_errors_by_status": dict(statuses), "poll_errors": sum(sum(p["poll_errors"].values()) for p in lags),
           "preload_s": float(np.mean(preload_s)), "log_issues": issues, "crowd": crowd}
    return out


# ------------------------------------------------------------------ reporting
def _f(v: Any, w: int = 8, d: int = 1) -> str:
    return f"{v:>{w}.{d}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"


HEADER = (f"{'row':<6}{'configuration':<28}{'pairs/s':>8}{'ask p50':>8}{'ask p99':>8}{'tell p50':>9}"
          f"{'lag mean':>9}{'lag p90':>8}{'lag s':>7}{'fits/s':>7}{'tells/fit':>10}{'errors':>7}"
          f"{'seq ask p50':>12}{'p99':>7}{'tell p50':>9}")


def _line(r: dict[str, Any]) -> str:
    lag, lag_s = r.get("fit_lag_tells", {}), r.get("fit_lag_seconds", {})
    seq = r.get("crowd") or {"ask": {}, "tell": {}}
    return (f"{r['row']:<6}{r['label']:<28}{_f(r.get('pairs_per_s'), 8, 0)}{_f(r['ask'].get('p50'))}"
            f"{_f(r['ask'].get('p99'))}{_f(r['tell'].get('p50'), 9)}{_f(lag.get('mean'), 9)}"
            f"{_f(lag.get('p90'), 8)}{_f(lag_s.get('mean'), 7, 2)}{_f(r.get('fits_per_s'), 7, 2)}"
            f"{_f(r.get('tells_per_fit'), 10)}{r.get('errors', 0):>7}"
            f"{_f(seq['ask'].get('p50'), 12)}{_f(seq['ask'].get('p99'), 7)}{_f(seq['tell'].get('p50'), 9)}")


def aims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The crowd latency aims on each row's sequential crowd run (service.py's "crowd" row, where they
    were reached; under 32 clients on 2 cores an ask waits for the others' pairs: latency ~ clients /
    throughput), and the fit lag of each queue row against the pool's."""
    out = []
    by = {r["row"]: r for r in rows}
    for r in rows:
        seq = r.get("crowd")
        if not seq:
            continue
        for name, v, lim in (("crowd ask p50 <= 20 ms", seq["ask"].get("p50"), AIMS["ask_p50_ms"]),
                             ("crowd ask p99 <= 100 ms", seq["ask"].get("p99"), AIMS["ask_p99_ms"])):
            if v is not None:
                out.append({"aim": name, "row": r["row"], "value": v, "limit": lim, "met": bool(v <= lim)})
    pool = by.get("pool")
    for r in rows:
        if r["mode"] != "queue" or pool is None:
            continue
        equal = r["apis"] == 1 and r["workers"] == pool["workers"]  # equal fit cores: q1x1 vs pool
        for q in ("mean", "p90"):
            a, b = r["fit_lag_tells"].get(q), pool["fit_lag_tells"].get(q)
            if a is not None and b is not None:
                out.append({"aim": f"fit lag {q} <= pool's" + ("" if equal else " (informative)"),
                            "row": r["row"], "value": a, "pool": b, "met": bool(a <= b), "equal_cores": equal})
    return out


def print_table(rows: list[dict[str, Any]], checks: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    print(f"\nHartmann-6 on PostgreSQL, {meta['preload']} trials preloaded, {meta['candidates']} candidates, "
          f"{meta['clients']} clients for {meta['duration']:g} s after {meta['warmup']:g} s, "
          f"{meta['repeats']} run(s) per row; {meta['cpu_count']} cores.\nLatencies in ms over HTTP, under the "
          "load; fit lag: tells finished after a tell and before the first snapshot including it (mean, p90; "
          "'lag s': mean seconds);\nseq: one sequential client on its own study with ask_wait_seconds=0 "
          f"(service.py's crowd row, {meta['pairs']} pairs) before the load.")
    print(HEADER)
    for r in rows:
        print(_line(r))
    print("\nCPU cores busy (api: calibo serve; fit: the pool's fit process; workers: calibo worker; "
          "bench: clients + poller):")
    names = {"api": "api", "fit": "fit", "workers": "workers", "postgresql": "postgres", "bench": "bench",
             "others": "others"}
    for r in rows:
        used = r.get("cpu_cores_used") or {}
        shown = "  ".join(f"{names[k]} {used[k]:.2f}" for k in names if k in used)
        print(f"  {r['row']:<6}{shown}" + ("  <- other work on the machine" if used.get("others", 0) > OTHERS_WARN
                                           else ""))
    print("\nfit lag detail (trials counted / censored at the end of the load; snapshot versions missed by "
          "the poller; mean fit seconds):")
    for r in rows:
        print(f"  {r['row']:<6}counted {r['fit_lag_tells'].get('n', 0)}  censored {r['censored']}  "
              f"uncovered {r['uncovered']}  versions seen {r['versions_seen']} missed {r['versions_missed']}  "
              f"fit {r['fit_seconds'].get('mean', float('nan')):.3f} s  HTTP errors {r['http_errors_by_status'] or '-'}"
              f"  log issues {r['log_issues']['lines']}")
    print("\naims (+ met, - missed):")
    for c in checks:
        extra = f" (pool {c['pool']:.1f})" if "pool" in c else ""
        print(f"  {'+' if c['met'] else '-'} {c['row']:<6}{c['aim']:<52}{c['value']:.1f}{extra}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    fig, grid = report.figure(1, 4, figsize=(22, 5.2))
    axes = grid[0]
    x = np.arange(len(rows))
    labels = [r["label"].replace(" + ", "\n+ ").replace(" x ", "\nx ") for r in rows]
    colors = ["tab:gray" if r["mode"] == "pool" else "tab:blue" for r in rows]
    ax = axes[0]
    bars = ax.bar(x, [r["pairs_per_s"] for r in rows], color=colors)
    for i, r in enumerate(rows):
        pts = [p["pairs_per_s"] for p in r.get("runs", [])]
        ax.plot([i] * len(pts), pts, "o", color="k", ms=3)
    for b, r in zip(bars, rows, strict=True):
        extra = f"\n{r['errors']} errors" if r["errors"] else ""
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{r['pairs_per_s']:.0f}{extra}", ha="center",
                va="bottom", fontsize=8)
    ax.set_title(f"ask+tell throughput, {rows[0]['clients']} clients")
    ax.set_ylabel("pairs / s")
    w = 0.38
    ax = axes[1]
    for off, q, c in ((-w / 2, "mean", "tab:green"), (w / 2, "p90", "tab:olive")):
        vals = [r["fit_lag_tells"].get(q, np.nan) for r in rows]
        bs = ax.bar(x + off, vals, w, color=c, label=q)
        for b, v in zip(bs, vals, strict=True):
            ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_title("fit lag: tells between a tell and the snapshot including it")
    ax.set_ylabel("tells")
    ax.legend(fontsize=8)
    for ax, title, get, lines in (
            (axes[2], "sequential crowd ask latency (ms; dotted: aims)",
             lambda r, q: (r.get("crowd") or {}).get("ask", {}).get(q, np.nan), True),
            (axes[3], f"ask latency under {rows[0]['clients']} clients (ms)",
             lambda r, q: r["ask"].get(q, np.nan), False)):
        for off, q, c, aim in ((-w / 2, "p50", "tab:purple", AIMS["ask_p50_ms"]),
                               (w / 2, "p99", "tab:pink", AIMS["ask_p99_ms"])):
            vals = [get(r, q) for r in rows]
            bs = ax.bar(x + off, vals, w, color=c, label=f"ask {q}" + (f" (aim {aim:g})" if lines else ""))
            for bb, v in zip(bs, vals, strict=True):
                ax.text(bb.get_x() + bb.get_width() / 2, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
            if lines:
                ax.axhline(aim, color=c, lw=0.8, ls=":")
        ax.set_title(title)
        ax.set_ylabel("ms")
        ax.legend(fontsize=8)
    for ax in axes:
        ax.set_xticks(x, labels, fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    report.save_figure(fig, path)


# ----------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS), help=f"subset of {','.join(ROWS)}")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds counted per run")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of load before counting starts")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=1, help="runs per row, each on its own preloaded study")
    ap.add_argument("--preload", type=int, default=500, help="finished trials in the study before timing")
    ap.add_argument("--preload-batch", type=int, default=50, help="trials per preload ask")
    ap.add_argument("--candidates", type=int, default=2000, help="the study's n_candidates")
    ap.add_argument("--seed", type=int, default=0, help="study k's seed: seed + 2 + k (service.py's load row)")
    ap.add_argument("--lag-tail", type=float, default=4.0,
                    help="the fit lag counts the trials told in the window less its last N seconds (at most "
                    "half of it), whose snapshots the run may end before; longer lags are reported as censored")
    ap.add_argument("--pairs", type=int, default=200,
                    help="timed sequential crowd pairs per row (ask_wait_seconds=0; 0: none)")
    ap.add_argument("--latency-warmup", type=int, default=5, help="untimed pairs before the sequential ones")
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between two reads of the study's status")
    ap.add_argument("--worker-concurrency", type=int, default=1, help="calibo worker --concurrency")
    ap.add_argument("--worker-nice", type=int, default=0, help="start calibo worker under nice -n N")
    ap.add_argument("--freeze", nargs="?", const="worktree", choices=("worktree", "head"), default=None,
                    help="run the servers and workers from a frozen copy of service/ and migrations/ (the "
                    "checkout's files as they are at the start, or HEAD's), so a long run measures one commit")
    ap.add_argument("--out-dir", default=str(report.RESULTS))
    ap.add_argument("--log-dir", default=None, help="keep the servers' and workers' logs here (default: discarded)")
    args = ap.parse_args(argv)
    keys = [k for k in args.rows.split(",") if k]
    for k in keys:
        if k not in ROWS:
            ap.error(f"unknown row {k!r} (choose from {', '.join(ROWS)})")
    signal.signal(signal.SIGTERM, terminate)
    out = Path(args.out_dir) / "cluster.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    from importlib import metadata

    versions = package_versions()
    with contextlib.suppress(metadata.PackageNotFoundError):
        versions["procrastinate"] = metadata.version("procrastinate")
    t0 = time.time()
    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "task": "hartmann6",
        "backend": "postgresql", "rows": keys, "duration": args.duration, "warmup": args.warmup,
        "clients": args.clients, "repeats": args.repeats, "pairs": args.pairs, "preload": args.preload,
        "preload_batch": args.preload_batch, "candidates": args.candidates, "seed": args.seed,
        "args": vars(args), "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "loadavg_at_start": os.getloadavg(), "aims": {"crowd_ask_p50_ms": AIMS["ask_p50_ms"],
                                                      "crowd_ask_p99_ms": AIMS["ask_p99_ms"],
                                                      "fit_lag": "q1x1 mean and p90 (tells) <= pool's"},
        "versions": versions,
    }
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    from tqdm import tqdm

    try:
        with tempfile.TemporaryDirectory(prefix="calibo-bench-cluster-") as tmpdir:
            tmp = Path(tmpdir)
            code = None
            if args.freeze:
                meta["server_code"] = freeze_code(tmp / "code", args.freeze)
                code = tmp / "code"
                log(f"servers and workers run {args.freeze} code frozen in {code}: {meta['server_code']}")
            else:
                meta["server_code"] = {"source": "checkout (not frozen)", **git_state()}
            logdir = Path(args.log_dir) if args.log_dir else tmp
            logdir.mkdir(parents=True, exist_ok=True)
            for key in tqdm(keys, desc="rows", file=sys.stderr):
                try:
                    rows.append(run_row(ROWS[key], args, logdir, code))
                    log(HEADER + "\n" + _line(rows[-1]))
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # a row failing is reported, the others still run
                    msg = f"{key} failed: {type(e).__name__}: {e}"
                    failures.append(msg)
                    log(msg)
                out.with_suffix(".partial.json").write_text(report.dumps({"meta": meta, "rows": rows}))
    except KeyboardInterrupt:
        log(f"interrupted: servers and workers stopped, databases dropped; partial rows in "
            f"{out.with_suffix('.partial.json')}")
        sys.exit(130)
    report.write_results(out, meta, rows, failures, t0, aims, print_table, plot)
    if failures:
        print("failures:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
