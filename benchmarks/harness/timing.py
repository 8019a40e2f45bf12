"""Timing a service: latencies, throughput under concurrent clients, and who used the CPU meanwhile.

* :func:`summarize_ms`: latencies -> percentiles in ms (and a quantile grid for CDFs from the JSON);
* :func:`process_cpu` / :func:`cores_used`: CPU seconds by who used them (this process, a server's
  API and fit workers, PostgreSQL, anything else), and the mean cores each kept busy;
* :func:`run_latency`: one client, pairs one after the other; :func:`run_throughput`: ``clients``
  threads for a fixed window; :func:`combine_throughput`: repeated windows as one row.

Progress bars go to stderr (tqdm); :func:`log` writes past them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.report import percentiles_ms

QUANTILE_GRID = np.linspace(0.0, 100.0, 201)  # every half percentile, for CDFs from the JSON

PairFn = Callable[[], tuple[float, float]]  # one ask+tell -> (ask seconds, tell seconds)


def log(msg: str) -> None:
    try:
        from tqdm import tqdm

        tqdm.write(msg, file=sys.stderr)
    except ImportError:
        print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def progress_bar(total: int, desc: str) -> Iterator[Callable[[int, int], None]]:
    """A tqdm bar over acknowledged tells when tqdm is installed; a no-op otherwise."""
    try:
        from tqdm import tqdm
    except ImportError:
        yield lambda done, total: None
        return
    with tqdm(total=total, desc=desc, unit="pair", leave=False, file=sys.stderr, mininterval=1.0) as bar:
        def update(done: int, _total: int) -> None:
            bar.update(max(0, min(done, total) - bar.n))  # redraws at most once a second

        yield update


def summarize_ms(seconds: list[float]) -> dict[str, Any]:
    """Latencies in seconds -> percentiles in milliseconds (and a quantile grid for CDFs)."""
    return percentiles_ms(seconds, QUANTILE_GRID)


def process_cpu(pgid: int | None = None) -> dict[str, float]:
    """CPU seconds (user + system) used so far, by who used them.

    ``bench``: this process (the load generator, or Optuna in-process); on Linux also
    ``server_api`` / ``server_workers`` (the process group ``pgid`` of a calibo server),
    ``postgresql`` (every process named postgres), ``machine`` (all cores, from /proc/stat) and
    ``others`` (the machine less all of these: anything else running at the same time).
    """
    t = os.times()
    out = {"bench": t.user + t.system}
    try:
        tick = os.sysconf("SC_CLK_TCK")
        cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        busy = sum(int(cpu[i]) for i in (0, 1, 2, 5, 6, 7))  # user nice system irq softirq steal
    except (OSError, ValueError, IndexError):
        return out
    out["server_api"] = out["server_workers"] = out["postgresql"] = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.find("(") + 1:text.rfind(")")]
        fields = text[text.rfind(")") + 2:].split()  # state ppid pgrp ... utime(11) stime(12)
        used = (int(fields[11]) + int(fields[12])) / tick
        if pgid is not None and int(fields[2]) == pgid:
            out["server_api" if int(stat.parent.name) == pgid else "server_workers"] += used
        elif comm == "postgres":
            out["postgresql"] += used
    if pgid is None:
        del out["server_api"], out["server_workers"]
    out["machine"] = busy / tick
    return out


def cores_used(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Mean cores busy between two :func:`process_cpu` readings, with ``others`` = machine less ours.

    A process that exited in between (a server's fit worker replaced) is missing from ``after``;
    such counts are only approximate.
    """
    used = {k: max(0.0, after[k] - before.get(k, 0.0)) / seconds for k in after}
    if "machine" in used:
        used["others"] = max(0.0, used["machine"] - sum(v for k, v in used.items() if k != "machine"))
    return {k: round(v, 3) for k, v in used.items()}


def run_latency(pair: PairFn, pairs: int, warmup: int, desc: str,
                cpu: Callable[[], dict[str, float]] = process_cpu) -> dict[str, Any]:
    """``warmup`` untimed pairs, then ``pairs`` timed ones, one after the other."""
    from tqdm import tqdm

    for _ in range(warmup):
        pair()
    asks, tells = [], []
    cpu0 = cpu()
    t0 = time.perf_counter()
    for _ in tqdm(range(pairs), desc=desc, leave=False, file=sys.stderr):
        a, t = pair()
        asks.append(a)
        tells.append(t)
    wall = time.perf_counter() - t0
    cpu1 = cpu()
    return {"kind": "latency", "pairs": pairs, "warmup_pairs": warmup, "wall_s": wall,
            "cpu_cores_used": cores_used(cpu0, cpu1, wall),
            "ask": summarize_ms(asks), "tell": summarize_ms(tells),
            "raw_ms": {"ask": [round(1000 * a, 3) for a in asks], "tell": [round(1000 * t, 3) for t in tells]}}


def run_throughput(make_pair: Callable[[int], PairFn], clients: int, duration: float, warmup: float,
                   desc: str, cpu: Callable[[], dict[str, float]] = process_cpu) -> dict[str, Any]:
    """``clients`` threads doing ask+tell pairs; counted over ``duration`` after ``warmup`` seconds.

    ``make_pair(i)`` runs in thread ``i`` before the start (connections, loading
    the study) and returns that thread's pair function. A pair counts when it
    ends inside the window; its latencies count when it lies wholly inside.
    """
    from tqdm import tqdm

    stop = threading.Event()
    barrier = threading.Barrier(clients + 1)
    records: list[list[tuple[float, float, float, float]]] = [[] for _ in range(clients)]
    errors: list[list[str]] = [[] for _ in range(clients)]
    setup_errors: list[str] = []

    def worker(i: int) -> None:
        try:
            pair = make_pair(i)
        except Exception as e:  # reported; the barrier is broken so the run stops
            setup_errors.append(f"{type(e).__name__}: {e}")
            barrier.abort()
            return
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                a, t = pair()
            except Exception as e:  # an error is a failed pair, counted and reported
                errors[i].append(f"{type(e).__name__}: {str(e)[:200]}")
                continue
            records[i].append((t0, time.perf_counter(), a, t))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True, name=f"bench-{i}")
               for i in range(clients)]
    for th in threads:
        th.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        stop.set()
        raise RuntimeError(f"throughput setup failed: {setup_errors[:3]}") from None
    start = time.perf_counter()
    lo, hi = start + warmup, start + warmup + duration
    cpu0 = cpu1 = None
    try:
        with tqdm(total=round(warmup + duration), desc=desc, unit="s", leave=False, file=sys.stderr) as bar:
            for until in (lo, hi):
                while (left := until - time.perf_counter()) > 0:
                    time.sleep(min(1.0, left))
                    bar.n = min(bar.total, round(time.perf_counter() - start))
                    bar.refresh()
                if cpu0 is None:
                    cpu0 = cpu()
            cpu1 = cpu()
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=120)
    alive = sum(th.is_alive() for th in threads)
    flat = [r for rs in records for r in rs]
    done = [r for r in flat if lo <= r[1] < hi]
    inside = [r for r in flat if r[0] >= lo and r[1] < hi]
    errs = [e for es in errors for e in es]
    kinds: dict[str, int] = {}
    for e in errs:
        k = e.split(":")[0]
        kinds[k] = kinds.get(k, 0) + 1
    return {"kind": "throughput", "clients": clients, "duration_s": duration, "warmup_s": warmup,
            "pairs_in_window": len(done), "pairs_per_s": len(done) / duration,
            "pairs_total": len(flat), "errors": len(errs), "error_kinds": kinds,
            "error_examples": errs[:5], "threads_stuck": alive,
            "cpu_cores_used": cores_used(cpu0, cpu1, duration),
            "ask": summarize_ms([r[2] for r in inside]), "tell": summarize_ms([r[3] for r in inside]),
            "_raw": ([r[2] for r in inside], [r[3] for r in inside])}


def combine_throughput(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated throughput runs -> one row: median pairs/s (every run kept), latencies pooled."""
    asks = [a for r in runs for a in r["_raw"][0]]
    tells = [t for r in runs for t in r["_raw"][1]]
    per_run = []
    for r in runs:
        r.pop("_raw")
        per_run.append({k: r[k] for k in ("pairs_per_s", "pairs_in_window", "errors", "cpu_cores_used",
                                          "status_before", "status_after") if k in r}
                       | {"ask_p50": r["ask"].get("p50"), "ask_p99": r["ask"].get("p99"),
                          "tell_p50": r["tell"].get("p50"), "tell_p99": r["tell"].get("p99")})
    rates = [r["pairs_per_s"] for r in runs]
    cpu_keys = {k for r in runs for k in r.get("cpu_cores_used", {})}
    kinds: dict[str, int] = {}
    for r in runs:
        for k, v in r["error_kinds"].items():
            kinds[k] = kinds.get(k, 0) + v
    first = runs[0]
    return {"kind": "throughput", "clients": first["clients"], "duration_s": first["duration_s"],
            "warmup_s": first["warmup_s"], "repeats": len(runs),
            "pairs_per_s": float(np.median(rates)), "pairs_per_s_min": min(rates), "pairs_per_s_max": max(rates),
            "pairs_in_window": sum(r["pairs_in_window"] for r in runs),
            "pairs_total": sum(r["pairs_total"] for r in runs),
            "errors": sum(r["errors"] for r in runs), "error_kinds": kinds,
            "error_examples": [e for r in runs for e in r["error_examples"]][:5],
            "threads_stuck": sum(r["threads_stuck"] for r in runs),
            "cpu_cores_used": {k: round(float(np.mean([r["cpu_cores_used"].get(k, 0.0) for r in runs])), 3)
                               for k in sorted(cpu_keys)},
            "ask": summarize_ms(asks), "tell": summarize_ms(tells), "runs": per_run}
