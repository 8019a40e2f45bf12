"""Service latency and throughput: calibo's REST ask/tell against Optuna's ask/tell on RDB storage.

For every backend (SQLite, PostgreSQL) and every system, on a study that
already holds ``--preload`` finished trials (Hartmann-6, a 6-D float space,
fixed seeds):

* **latency**: one sequential client runs ``--pairs`` ask+tell pairs; each ask
  and each tell is timed on its own (``time.perf_counter`` around the call);
* **throughput**: ``--clients`` concurrent clients run ask+tell pairs for
  ``--duration`` seconds after ``--warmup`` seconds, ``--load-repeats`` times,
  each on its own freshly preloaded study; the median pairs/s (and every run),
  and the ask/tell latencies seen under that load, are reported. A faster
  system's study grows further during the window (calibo: from 500 to ~5000
  trials in 25 s), so its later pairs run on more trials than Optuna's.

calibo runs as ``calibo serve --workers 1`` (a subprocess on a fresh
database, its fits in one worker process) with ``n_candidates=2000``; it is
timed over HTTP with plain ``httpx.Client`` objects holding keep-alive
connections, so a calibo figure is the server's work plus a loopback HTTP
round trip (client-side JSON included). Two sequential modes, each on its own
preloaded study:

* ``crowd``: study setting ``ask_wait_seconds=0``: an ask serves from the
  newest stored snapshot at once (what every ask of a crowd of workers gets);
* ``fresh``: the default ``ask_wait_seconds`` (5 s): each ask of a sequential
  user waits for the refit after the previous tell, so its latency includes a
  whole surrogate fit at ~500 observations.

The throughput study uses the default settings (with other trials running,
asks never wait). The servers run a frozen copy of ``service/`` and
``migrations/`` (``--code worktree``, the default, ``--code head`` or ``--code <revision>``), so edits
to the checkout during a run cannot mix code versions; its git commit and a
hash are recorded. The CPU time of the server's API process, its fit workers,
PostgreSQL, this process and everything else is recorded per row, so a row
disturbed by other work on the machine shows it.

Optuna has no server: its ask/tell runs *in-process* against its RDB storage
(``RDBStorage`` on a SQLite file, or PostgreSQL through psycopg), with
``TPESampler`` (and ``GPSampler``, the closest peer to calibo's GP surrogate,
for the latency row only: it refits a GP at every ask). Its throughput uses
``--clients`` threads in one process, each with its own ``optuna.load_study``
(own storage, own connections). The load generator shares the machine's cores
with the system under test in both cases.

    python benchmarks/service.py                                  # everything
    python benchmarks/service.py --quick                          # smoke run, a minute or two
    python benchmarks/service.py --backends sqlite --systems calibo,optuna_tpe --pairs 100
    python benchmarks/service.py --merge a.json b.json             # combine runs (later rows win)
    python benchmarks/service.py --systems calibo --objectives 2 --out benchmarks/results/service_mo.json

Writes benchmarks/results/service.json and service.png.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.tasks import TASKS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TASK = TASKS["hartmann6"]
OBJECTIVES = 1  # --objectives 2: calibo's studies are multi-objective (Hartmann-6 and a distance)


def told(params: dict[str, Any]) -> dict[str, Any]:
    """A tell's body: the value, or with ``--objectives 2`` two values (Hartmann-6 and the squared
    distance to the centre of the space, which pull apart)."""
    v = float(TASK.objective(params))
    if OBJECTIVES == 1:
        return {"value": v}
    return {"values": [v, float(sum((params[k] - 0.5) ** 2 for k in sorted(params)))]}
BACKENDS = ("sqlite", "postgresql")
SYSTEMS = ("calibo", "optuna_tpe", "optuna_gp")
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
AIMS = {"ask_p50_ms": 20.0, "ask_p99_ms": 100.0, "tell_p50_ms": 10.0, "pairs_per_s": 300.0}
OTHERS_WARN = 0.2  # cores busy with other work during a row, beyond which the table flags it
QUANTILE_GRID = np.linspace(0.0, 100.0, 201)  # every half percentile, for CDFs from the JSON

PairFn = Callable[[], tuple[float, float]]  # one ask+tell -> (ask seconds, tell seconds)


def log(msg: str) -> None:
    from tqdm import tqdm

    tqdm.write(msg, file=sys.stderr)


def _terminate(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# ------------------------------------------------------------------ summaries
def summarize_ms(seconds: list[float]) -> dict[str, Any]:
    """Latencies in seconds -> percentiles in milliseconds (and a quantile grid for CDFs)."""
    if not seconds:
        return {"n": 0}
    ms = 1000.0 * np.asarray(seconds, dtype=float)
    return {
        "n": int(ms.size),
        "p50": float(np.percentile(ms, 50)),
        "p90": float(np.percentile(ms, 90)),
        "p99": float(np.percentile(ms, 99)),
        "mean": float(ms.mean()),
        "min": float(ms.min()),
        "max": float(ms.max()),
        "grid": [round(float(v), 3) for v in np.percentile(ms, QUANTILE_GRID)],
    }


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


# ------------------------------------------------------------------ harnesses
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


# ------------------------------------------------------------------ resources
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def pg_database(name: str) -> Iterator[str]:
    """A fresh PostgreSQL database, dropped (WITH FORCE) afterwards; yields its URL."""
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        for attempt in range(5):  # the server may hold every connection slot for a moment longer
            try:
                with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except Exception as e:  # reported, never masks the run's own error
                if attempt == 4:
                    log(f"could not drop database {name}: {e!r}; drop it by hand")
                else:
                    time.sleep(2.0)


@contextlib.contextmanager
def database(backend: str, tmp: Path, label: str) -> Iterator[str]:
    """A fresh database URL for ``backend`` (SQLAlchemy form, driver-less for PostgreSQL)."""
    if backend == "sqlite":
        path = tmp / f"{label}.db"
        yield f"sqlite:///{path}"
    else:
        with pg_database(f"calibo_bench_{label}_{os.getpid()}_{uuid.uuid4().hex[:6]}") as url:
            yield url


# The repository's folders and the names they install under (pyproject.toml's package-dir):
# a frozen copy is laid out as the installed namespace, so `python -m calibo.server.cli` run from it
# imports the frozen code, not the checkout's.
NAMESPACE = (("client", "calibo"), ("service", "calibo/server"), ("service/engine", "calibo/engine"),
             ("service/optuna", "calibo/optuna"), ("migrations", "calibo/server/migrations"))
FROZEN = ("service", "client", "migrations", "pyproject.toml")


def freeze_code(dest: Path, source: str) -> dict[str, Any]:
    """Copy the server's code to ``dest``, laid out as the ``calibo`` namespace; servers then run from it.

    ``source="head"``: as committed at HEAD (``git archive``), or at any other revision given;
    ``"worktree"``: the files as they are now. Either way, edits made to the checkout while the
    benchmark runs do not reach its servers. A revision from before the ``calibo`` namespace keeps
    its ``service`` / ``migrations`` layout (``cli_module`` says which to run).
    """
    import hashlib
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    tree = dest / ".tree"
    if source != "worktree":  # "head", or any revision git knows
        rev = "HEAD" if source == "head" else source
        listed = subprocess.run(["git", "ls-tree", "--name-only", rev], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.split()
        archive = subprocess.run(["git", "archive", rev, *[p for p in FROZEN if p in listed]], cwd=ROOT,
                                 capture_output=True, check=True)
        tree.mkdir()
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    else:
        for p in FROZEN:
            if (ROOT / p).is_dir():
                shutil.copytree(ROOT / p, tree / p, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(ROOT / p, tree / p)
    if '"calibo.server" = "service"' in (tree / "pyproject.toml").read_text():  # the calibo namespace
        for folder, package in NAMESPACE:
            inner = {f.rsplit("/", 1)[1] for f, _ in NAMESPACE if f.startswith(folder + "/")}  # engine, optuna
            if (tree / folder).is_dir():
                shutil.copytree(tree / folder, dest / package, dirs_exist_ok=True,
                                ignore=lambda d, names, top=tree / folder, inner=inner:
                                {n for n in names if n in ("__pycache__",) or n.endswith(".pyc")
                                 or (Path(d) == top and n in inner)})
    else:
        for p in ("service", "migrations"):
            shutil.move(str(tree / p), str(dest / p))
    shutil.rmtree(tree)
    digest = hashlib.sha256()
    files = sorted(f for f in dest.rglob("*") if f.is_file())
    for f in files:
        digest.update(str(f.relative_to(dest)).encode() + b"\0" + f.read_bytes())
    info: dict[str, Any] = {"source": source, "files": len(files), "sha256": digest.hexdigest()}
    if source in ("head", "worktree"):
        return info | git_state(FROZEN)
    rev = subprocess.run(["git", "rev-parse", source], cwd=ROOT, capture_output=True, text=True, timeout=10)
    return info | {"git_commit": rev.stdout.strip()}


def cli_module(code: Path | None) -> str:
    """The module that runs ``calibo`` from frozen ``code`` (or the checkout's install)."""
    return "service.cli" if code is not None and (code / "service").is_dir() else "calibo.server.cli"


def git_state(paths: tuple[str, ...] = FROZEN) -> dict[str, Any]:
    """The checkout's commit, and whether ``paths`` differ from it (empty when git cannot say)."""
    info: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        git = ["git", "-C", str(ROOT)]
        info["git_commit"] = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                                            timeout=10).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--", *paths], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
        info["worktree_differs_from_head"] = bool(changed)
    return info


@contextlib.contextmanager
def calibo_process(args: list[str], logfile: Path, what: str, ready: Callable[[], bool],
                   code: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120.0,
                   prefix: tuple[str, ...] = ()) -> Iterator[subprocess.Popen]:
    """``calibo <args>`` in its own process group, output to ``logfile``, once ``ready()`` says so;
    stopped (group and all) on exit. Its environment has no ``CALIBO_*`` but ``env``.

    ``code``: a directory holding a frozen ``calibo`` package to run (see :func:`freeze_code`); it
    shadows the checkout's because the process starts there (``python -m``
    puts its working directory first on ``sys.path``, and spawned fit workers inherit it).
    ``prefix``: a command it runs under (``nice -n 10``).
    """
    cmd = [*prefix, sys.executable, "-m", cli_module(code), *args]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CALIBO_")} | (env or {})
    with open(logfile, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=code or ROOT, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}:\n{_tail(logfile)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready in {timeout:g} s:\n{_tail(logfile)}")
            time.sleep(0.2)
        yield proc
    finally:
        _stop_group(proc)


@contextlib.contextmanager
def calibo_server(url: str, tmp: Path, label: str, workers: int, code: Path | None = None,
                  env: dict[str, str] | None = None) -> Iterator[tuple[str, Path, int]]:
    """``calibo serve`` on a free port (see :func:`calibo_process`), ready once /healthz answers 200.

    ``env``: variables added to the server's environment, e.g. ``{"CALIBO_WORKER_MODE": "queue"}``.
    """
    import httpx

    port = free_port()
    logfile = tmp / f"server-{label}.log"
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=2.0, trust_env=False) as c:
        def healthy() -> bool:
            try:
                return c.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--database-url", url, "--workers", str(workers)]
        with calibo_process(args, logfile, "calibo serve", healthy, code, env) as proc:
            yield base, logfile, proc.pid


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server (uvicorn shuts down, and its fit pool), then SIGKILL to what is left of its group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            log("calibo serve ignored SIGTERM for 20 s; killing it")
    with contextlib.suppress(ProcessLookupError):  # fit workers left behind, if any
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------- calibo
class Calibo:
    """A running calibo server, driven over HTTP."""

    def __init__(self, base: str) -> None:
        import httpx

        self.base = base
        self.http = httpx.Client(base_url=base, timeout=120.0, trust_env=False)

    def client(self):
        import httpx

        return httpx.Client(base_url=self.base, timeout=120.0, trust_env=False)

    def close(self) -> None:
        self.http.close()

    def create(self, name: str, seed: int, candidates: int, **settings: Any) -> int:
        body = {"name": name, "space": TASK.space, "seed": seed, "settings": {"n_candidates": candidates, **settings},
                **({"direction": TASK.direction} if OBJECTIVES == 1 else {"directions": ["minimize"] * OBJECTIVES})}
        r = self.http.post("/v1/studies", json=body)
        _check(r)
        return int(r.json()["id"])

    def view(self, sid: int) -> dict[str, Any]:
        r = self.http.get(f"/v1/studies/{sid}")
        _check(r)
        return r.json()

    def preload(self, sid: int, n: int, batch: int, desc: str) -> float:
        from tqdm import tqdm

        t0 = time.perf_counter()
        with tqdm(total=n, desc=desc, leave=False, file=sys.stderr) as bar:
            done = 0
            while done < n:
                r = self.http.post(f"/v1/studies/{sid}/ask",
                                   json={"count": min(batch, n - done), "worker_id": "preload"})
                _check(r)
                for t in r.json()["trials"]:
                    _check(self.http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json=told(t["params"])))
                    done += 1
                    bar.update()
        return time.perf_counter() - t0

    def wait_fitted(self, sid: int, timeout: float = 300.0) -> dict[str, Any]:
        """Until the newest fit covers every completed trial and no fit is running or queued."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.view(sid)
            s = v["surrogate_status"]
            if s["fitted_on"] >= v["trials"]["complete"] and not s["fitting"] and not s["queued"]:
                return v
            if time.monotonic() > deadline:
                raise RuntimeError(f"study {sid}: no fit covering {v['trials']['complete']} trials "
                                   f"after {timeout:.0f} s: {s}")
            time.sleep(0.1)

    def pair_fn(self, http: Any, sid: int, worker_id: str) -> PairFn:
        ask_path = f"/v1/studies/{sid}/ask"
        body = {"count": 1, "worker_id": worker_id}

        def pair() -> tuple[float, float]:
            t = time.perf_counter()
            r = http.post(ask_path, json=body)
            a = time.perf_counter() - t
            _check(r)
            trial = r.json()["trials"][0]
            result = told(trial["params"])
            t = time.perf_counter()
            r = http.post(f"/v1/studies/{sid}/trials/{trial['id']}/tell", json=result)
            b = time.perf_counter() - t
            _check(r)
            return a, b

        return pair


def _check(r: Any) -> None:
    if r.status_code >= 400:
        raise RuntimeError(f"{r.request.method} {r.request.url.path} -> {r.status_code}: {r.text[:300]}")


def _fit_status(view: dict[str, Any]) -> dict[str, Any]:
    s = view["surrogate_status"]
    return {"complete": view["trials"]["complete"], "running": view["trials"]["running"],
            "fitted_on": s["fitted_on"], "fit_seconds": s["fit_seconds"], "method": s["method"],
            "last_error": s["last_error"]}


def server_env(args: argparse.Namespace) -> dict[str, str]:
    """``--server-env KEY=VALUE`` (repeatable): settings of the calibo server, e.g.
    ``CALIBO_RATE_LIMIT=100000/second`` to time every request through the rate limiter."""
    return parse_server_env(args.server_env)


def parse_server_env(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("CALIBO_"):
            sys.exit(f"--server-env {item!r}: expected CALIBO_NAME=value")
        out[key] = value
    return out


def bench_calibo(backend: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with database(backend, tmp, "calibo") as url, \
            calibo_server(url, Path(args.log_dir) if args.log_dir else tmp, backend,
                          args.server_workers, tmp / "code", server_env(args)) as (base, logfile, pid):
        cb = Calibo(base)
        try:
            ids = {
                "crowd": cb.create("bench-crowd", args.seed, args.candidates, ask_wait_seconds=0),
                "fresh": cb.create("bench-fresh", args.seed + 1, args.candidates),
                **{f"load{k}": cb.create(f"bench-load-{k}", args.seed + 2 + k, args.candidates)
                   for k in range(args.load_repeats)},
            }
            preload_s = {}
            for mode, sid in ids.items():
                preload_s[mode] = cb.preload(sid, args.preload, args.preload_batch,
                                             f"calibo/{backend}: preload {mode}")
            common = {"system": "calibo", "backend": backend, "in_process": False,
                      "n_candidates": args.candidates, "preload": args.preload}
            for mode, desc, note in (
                ("crowd", "sequential, ask_wait_seconds=0",
                 "asks served from the newest stored snapshot (stale-tolerant)"),
                ("fresh", "sequential, ask_wait_seconds=5 (default)",
                 "each ask waits for the refit after the previous tell: includes a fit"),
            ):
                sid = ids[mode]
                before = _fit_status(cb.wait_fitted(sid))
                with cb.client() as http:
                    res = run_latency(cb.pair_fn(http, sid, f"bench-{mode}"), args.pairs, args.latency_warmup,
                                      f"calibo/{backend}: {mode} latency", lambda: process_cpu(pid))
                after = _fit_status(cb.view(sid))
                rows.append({**common, **res, "mode": mode, "mode_desc": desc, "note": note,
                             "preload_s": preload_s[mode], "status_before": before, "status_after": after})
                log(_row_line(rows[-1]))
            runs = []
            for k in range(args.load_repeats):
                sid = ids[f"load{k}"]
                before = _fit_status(cb.wait_fitted(sid))
                clients: list[Any] = []

                def make_pair(i: int, sid: int = sid, clients: list[Any] = clients) -> PairFn:
                    http = cb.client()
                    clients.append(http)
                    return cb.pair_fn(http, sid, f"bench-load-{i}")

                try:
                    res = run_throughput(make_pair, args.clients, args.duration, args.warmup,
                                         f"calibo/{backend}: {args.clients} clients ({k + 1}/{args.load_repeats})",
                                         lambda: process_cpu(pid))
                finally:
                    for h in clients:
                        h.close()
                runs.append({**res, "status_before": before, "status_after": _fit_status(cb.view(sid))})
            rows.append({**common, **combine_throughput(runs), "mode": "load",
                         "mode_desc": f"{args.clients} concurrent HTTP clients",
                         "note": "default study settings; asks with trials running never wait; "
                                 "each repeat on its own freshly preloaded study",
                         "preload_s": float(np.mean([preload_s[f"load{k}"] for k in range(args.load_repeats)]))})
            log(_row_line(rows[-1]))
        finally:
            cb.close()
    server_log = logfile.read_text(errors="replace") if logfile.exists() else ""
    errors = [ln for ln in server_log.splitlines() if " ERROR " in ln or "Traceback" in ln]
    if errors:
        log(f"calibo/{backend}: the server logged {len(errors)} error lines, e.g. {errors[:3]}")
    for r in rows:
        r["server_error_lines"] = len(errors)
    return rows


# --------------------------------------------------------------------- optuna
def _optuna_url(url: str) -> str:
    return "postgresql+psycopg://" + url[len("postgresql://"):] if url.startswith("postgresql://") else url


def _distributions() -> dict[str, Any]:
    import optuna

    return {k: optuna.distributions.FloatDistribution(v["low"], v["high"], log=bool(v.get("log", False)))
            for k, v in TASK.space.items()}


def _preload_trials(n: int, seed: int) -> list[Any]:
    """``n`` finished trials at uniformly random configurations (the same for every Optuna study)."""
    import optuna

    dists = _distributions()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = {k: float(rng.uniform(d.low, d.high)) for k, d in dists.items()}
        out.append(optuna.trial.create_trial(params=p, distributions=dists, value=float(TASK.objective(p))))
    return out


def _sampler(kind: str, seed: int) -> Any:
    import optuna

    if kind == "optuna_tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.GPSampler(seed=seed)


def _optuna_pair(study: Any) -> PairFn:
    dists = _distributions()

    def pair() -> tuple[float, float]:
        t = time.perf_counter()
        trial = study.ask(dists)
        a = time.perf_counter() - t
        v = float(TASK.objective(trial.params))
        t = time.perf_counter()
        study.tell(trial, v)
        return a, time.perf_counter() - t

    return pair


def _optuna_storage(url: str, opened: list[Any]) -> Any:
    """An ``RDBStorage`` of its own (own engine and connections), remembered for :func:`_close_all`."""
    import optuna

    storage = optuna.storages.RDBStorage(url)
    opened.append(storage)
    return storage


def _close_all(opened: list[Any]) -> None:
    """Dispose of every engine opened (else PostgreSQL runs out of connections between repeats)."""
    while opened:
        with contextlib.suppress(Exception):
            opened.pop().engine.dispose()


def _optuna_study(url: str, name: str, sampler: Any, preload: list[Any], opened: list[Any]
                  ) -> tuple[Any, float]:
    import optuna

    study = optuna.create_study(storage=_optuna_storage(url, opened), study_name=name, sampler=sampler,
                                direction=TASK.direction)
    t0 = time.perf_counter()
    study.add_trials(preload)
    return study, time.perf_counter() - t0


def bench_optuna(system: str, backend: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    import optuna

    rows: list[dict[str, Any]] = []
    preload = _preload_trials(args.preload, args.seed)
    common = {"system": system, "backend": backend, "in_process": True, "preload": args.preload,
              "sampler": "TPESampler" if system == "optuna_tpe" else "GPSampler"}
    opened: list[Any] = []
    with database(backend, tmp, system) as raw, contextlib.ExitStack() as stack:
        stack.callback(_close_all, opened)  # before the database is dropped
        url = _optuna_url(raw)
        pairs = args.pairs if system == "optuna_tpe" else args.gp_pairs
        study, pre_s = _optuna_study(url, "bench-latency", _sampler(system, args.seed), preload, opened)
        res = run_latency(_optuna_pair(study), pairs, args.latency_warmup, f"{system}/{backend}: latency")
        rows.append({**common, **res, "mode": "sequential", "mode_desc": "sequential, in-process",
                     "note": "in-process study.ask/tell on RDBStorage (no server, no HTTP)", "preload_s": pre_s})
        log(_row_line(rows[-1]))
        del study
        _close_all(opened)
        if system == "optuna_tpe" and args.clients > 0:
            runs, pre = [], []
            for k in range(args.load_repeats):
                name = f"bench-load-{k}"
                _, pre_s = _optuna_study(url, name, _sampler(system, args.seed), preload, opened)
                pre.append(pre_s)
                lock = threading.Lock()

                def make_pair(i: int, name: str = name, lock: threading.Lock = lock) -> PairFn:
                    with lock:
                        storage = _optuna_storage(url, opened)
                    s = optuna.load_study(study_name=name, storage=storage,
                                          sampler=_sampler(system, args.seed + 1 + i))
                    return _optuna_pair(s)

                try:
                    runs.append(run_throughput(make_pair, args.clients, args.duration, args.warmup,
                                               f"{system}/{backend}: {args.clients} threads "
                                               f"({k + 1}/{args.load_repeats})"))
                finally:
                    _close_all(opened)
            rows.append({**common, **combine_throughput(runs), "mode": "load",
                         "mode_desc": f"{args.clients} threads, own load_study each",
                         "note": "in-process threads of one Python process, each with its own RDBStorage; "
                                 "each repeat on its own freshly preloaded study",
                         "preload_s": float(np.mean(pre))})
            log(_row_line(rows[-1]))
    return rows


# ------------------------------------------------------------------ reporting
def _fmt(v: float | None, w: int = 8, d: int = 1) -> str:
    return f"{v:>{w}.{d}f}" if v is not None else f"{'-':>{w}}"


def _p(row: dict[str, Any], what: str, q: str) -> float | None:
    return row.get(what, {}).get(q)


def _row_line(r: dict[str, Any]) -> str:
    tput = _fmt(r.get("pairs_per_s"), 9)
    spread = (f"{r['pairs_per_s_min']:.0f}-{r['pairs_per_s_max']:.0f}" if "pairs_per_s_min" in r
              else "-" if r["kind"] == "latency" else "")
    n = r["pairs"] if r["kind"] == "latency" else r["pairs_in_window"]
    err = r.get("errors", 0)
    return (f"{r['system']:<11}{r['backend']:<11}{r['mode']:<11}{n:>6} "
            f"{_fmt(_p(r, 'ask', 'p50'))}{_fmt(_p(r, 'ask', 'p99'))}"
            f"{_fmt(_p(r, 'tell', 'p50'))}{_fmt(_p(r, 'tell', 'p99'))}{tput}{spread:>10}{err:>7}")


HEADER = (f"{'system':<11}{'backend':<11}{'mode':<11}{'pairs':>6} {'ask p50':>8}{'ask p99':>8}"
          f"{'tell p50':>8}{'tell p99':>8}{'pairs/s':>9}{'min-max':>10}{'errors':>7}")


PEERS_OF = {"crowd": ("optuna_tpe", "optuna_gp"), "fresh": ("optuna_tpe", "optuna_gp"), "load": ("optuna_tpe",)}


def aims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's aims on every calibo row, and every calibo row against the Optuna rows of its kind."""
    out = []
    for r in rows:
        if r["system"] != "calibo":
            continue
        where = f"calibo {r['backend']} {r['mode']}"
        checks = [("ask p50 <= 20 ms", _p(r, "ask", "p50"), AIMS["ask_p50_ms"]),
                  ("ask p99 <= 100 ms", _p(r, "ask", "p99"), AIMS["ask_p99_ms"]),
                  ("tell p50 <= 10 ms", _p(r, "tell", "p50"), AIMS["tell_p50_ms"])]
        if r["kind"] == "throughput":
            checks.append((">= 300 pairs/s", r["pairs_per_s"], AIMS["pairs_per_s"]))
        for name, v, lim in checks:
            if v is not None:
                met = v >= lim if name.startswith(">=") else v <= lim
                out.append({"aim": name, "row": where, "value": v, "met": bool(met)})
        for o in rows:
            if o["system"] not in PEERS_OF.get(r["mode"], ()) or o["backend"] != r["backend"] \
                    or o["kind"] != r["kind"]:
                continue
            vs = f"{o['system']} {o['mode']}"
            for what, q in (("ask", "p50"), ("ask", "p99"), ("tell", "p50"), ("tell", "p99")):
                a, b = _p(r, what, q), _p(o, what, q)
                if a is not None and b is not None:
                    out.append({"aim": f"ahead of Optuna: {what} {q}", "row": where, "peer_row": vs,
                                "value": a, "peer": b, "met": bool(a < b)})
            if r["kind"] == "throughput":
                out.append({"aim": "ahead of Optuna: pairs/s", "row": where, "peer_row": vs,
                            "value": r["pairs_per_s"], "peer": o["pairs_per_s"],
                            "met": bool(r["pairs_per_s"] > o["pairs_per_s"])})
    return out


def print_table(rows: list[dict[str, Any]], checks: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    print(f"\nHartmann-6, {meta['preload']} finished trials preloaded, {meta['candidates']} candidates "
          f"(calibo); {meta['cpu_count']} cores.\nLatencies in ms: calibo over HTTP (httpx keep-alive, "
          f"server + loopback), Optuna in-process on RDBStorage.\n'load' rows: {meta['clients']} concurrent "
          f"clients for {meta['duration']:g} s after {meta['warmup']:g} s warm-up, "
          f"{meta.get('load_repeats', 1)} runs (pairs/s: median, min-max); latencies under that load, pooled.")
    print(HEADER)
    for r in rows:
        print(_row_line(r))
    print("\nCPU cores busy while each row ran (API / fit workers: calibo serve; bench: this process, "
          "i.e. the HTTP clients or Optuna itself; others: anything else on the machine):")
    names = {"server_api": "API", "server_workers": "fit", "bench": "bench", "postgresql": "postgres",
             "others": "others"}
    for r in rows:
        used = r.get("cpu_cores_used") or {}
        shown = "  ".join(f"{names[k]} {used[k]:.2f}" for k in names if k in used)
        busy = used.get("others", 0.0) > OTHERS_WARN
        print(f"  {r['system']:<11}{r['backend']:<11}{r['mode']:<11}{shown}"
              + ("  <- other work on the machine" if busy else ""))
    print("calibo crowd: ask_wait_seconds 0 (asks serve the newest snapshot); calibo fresh: default "
          "ask_wait_seconds 5 (each ask waits for the refit after the previous tell);\noptuna sequential: "
          "in-process ask/tell, no server; optuna load: threads of one process, own load_study each.")
    print("\naims (ask p50 <= 20 ms, ask p99 <= 100 ms, tell p50 <= 10 ms, >= 300 pairs/s); "
          "+ met, - missed:")
    rowkeys = list(dict.fromkeys(c["row"] for c in checks))
    for k in rowkeys:
        own = [c for c in checks if c["row"] == k and "peer" not in c]
        print(f"  {k:<26}" + "  ".join(f"{'+' if c['met'] else '-'} {c['aim'].split(' <=')[0].split('>= ')[-1]}"
                                         f" {c['value']:.1f}" for c in own))
    print("calibo ahead of Optuna (calibo vs Optuna; + ahead, - behind):")
    for k in rowkeys:
        for peer in dict.fromkeys(c["peer_row"] for c in checks if c["row"] == k and "peer" in c):
            cs = [c for c in checks if c["row"] == k and c.get("peer_row") == peer]
            print(f"  {k:<26}vs {peer:<22}" + "  ".join(
                f"{'+' if c['met'] else '-'} {c['aim'].removeprefix('ahead of Optuna: ')} "
                f"{c['value']:.1f}/{c['peer']:.1f}" for c in cs))


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.6), gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    styles = {"sqlite": "-", "postgresql": "--"}
    keys = sorted({(r["system"], r["mode"]) for r in rows})
    cmap = plt.get_cmap("tab10")
    colors = {k: cmap(i % 10) for i, k in enumerate(keys)}
    q = QUANTILE_GRID / 100.0
    for ax, what, aims_ms in ((axes[0], "ask", (AIMS["ask_p50_ms"], AIMS["ask_p99_ms"])),
                              (axes[1], "tell", (AIMS["tell_p50_ms"],))):
        for r in rows:
            g = r[what].get("grid")
            if not g:
                continue
            ax.plot(np.maximum(g, 1e-3), q, styles.get(r["backend"], "-"),
                    color=colors[(r["system"], r["mode"])], lw=1.6,
                    label=f"{r['system']} {r['mode']} ({r['backend']})")
        for a in aims_ms:
            ax.axvline(a, color="k", lw=0.7, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel(f"{what} latency (ms, log)")
        ax.set_ylabel("fraction of calls")
        ax.set_title(f"{what} latency CDF (dotted: aims)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7, loc="lower right")
    load = [r for r in rows if r["kind"] == "throughput"]
    if load:
        labels = [f"{r['system']}\n{r['backend']}" for r in load]
        vals = [r["pairs_per_s"] for r in load]
        bars = axes[2].bar(range(len(load)), vals, color=[colors[(r["system"], r["mode"])] for r in load])
        for i, r in enumerate(load):
            pts = [x["pairs_per_s"] for x in r.get("runs", [])]
            axes[2].plot([i] * len(pts), pts, "o", color="k", ms=3)
        for b, v, r in zip(bars, vals, load, strict=True):
            extra = f"\n{r['errors']} errors" if r["errors"] else ""
            top = max([v] + [x["pairs_per_s"] for x in r.get("runs", [])])
            axes[2].text(b.get_x() + b.get_width() / 2, top, f"{v:.0f}{extra}", ha="center", va="bottom",
                         fontsize=8)
        axes[2].axhline(AIMS["pairs_per_s"], color="k", lw=0.7, ls=":")
        axes[2].set_xticks(range(len(load)), labels, fontsize=8)
        axes[2].set_ylabel("ask+tell pairs / s")
        axes[2].set_title(f"throughput, {load[0]['clients']} concurrent clients\n"
                          "(bar: median; dots: each run; dotted: aim)")
    else:
        axes[2].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_results(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]], failures: list[str], t0: float,
                  aims: Callable[[list], list], print_table: Callable[..., None], plot: Callable[..., None]) -> None:
    """The end of a run that wrote ``out``'s ``.partial.json`` as it went: wall time, load and failures
    in ``meta``, the table, ``out`` (JSON with the aims' checks) in place of the partial file, the PNG."""
    meta["wall_seconds"] = time.time() - t0
    meta["loadavg_at_end"] = os.getloadavg()
    meta["failures"] = failures
    if not rows:
        return
    checks = aims(rows)
    print_table(rows, checks, meta)
    out.write_text(json.dumps({"meta": meta, "rows": rows, "aims": checks}))
    out.with_suffix(".partial.json").unlink(missing_ok=True)
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("calibo", "optuna", "sqlalchemy", "psycopg", "httpx", "fastapi", "uvicorn", "torch",
                "numpy", "scikit-learn"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    with contextlib.suppress(Exception):
        import psycopg

        with psycopg.connect(PG_ADMIN) as c:
            out["postgresql_server"] = str(c.execute("SHOW server_version").fetchone()[0])
    import sqlite3

    out["sqlite"] = sqlite3.sqlite_version
    return out


# ----------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--pairs", type=int, default=200, help="timed sequential ask+tell pairs per latency row")
    ap.add_argument("--gp-pairs", type=int, default=None,
                    help="the same for Optuna's GPSampler (about 1 s per ask at 500 trials); default --pairs")
    ap.add_argument("--latency-warmup", type=int, default=5, help="untimed pairs before a latency row")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds counted in a throughput row")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of load before counting starts")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--load-repeats", type=int, default=3,
                    help="throughput runs per row, each on its own preloaded study (the row: their median)")
    ap.add_argument("--preload", type=int, default=500, help="finished trials in every study before timing")
    ap.add_argument("--preload-batch", type=int, default=50, help="calibo preload: trials per ask")
    ap.add_argument("--candidates", type=int, default=2000, help="calibo's n_candidates")
    ap.add_argument("--server-workers", type=int, default=1, help="calibo serve --workers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--code", default="worktree",
                    help="server code to run: worktree (the checkout's files as they are at the start, "
                    "frozen for the whole run), head (as committed at HEAD) or any git revision, to time "
                    "a change before and after on one machine")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="combine the rows of earlier result files (a later file's row replaces an earlier "
                    "one of the same system, backend and mode) instead of running")
    ap.add_argument("--log-dir", default=None, help="keep the calibo server logs here (default: discarded)")
    ap.add_argument("--server-env", action="append", default=[], metavar="CALIBO_NAME=VALUE",
                    help="a setting of the calibo server (repeatable), e.g. CALIBO_RATE_LIMIT=100000/second")
    ap.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    ap.add_argument("--objectives", type=int, choices=(1, 2), default=1,
                    help="2: calibo's studies have two objectives (calibo only; Optuna's rows are one-objective)")
    ap.add_argument("--out", default=None,
                    help="default benchmarks/results/service.json (a --quick run: a file in the temp dir)")
    args = ap.parse_args()
    global OBJECTIVES
    OBJECTIVES = args.objectives
    if OBJECTIVES > 1 and set(args.systems.split(",")) - {"calibo"}:
        ap.error("--objectives 2 is for --systems calibo")
    if args.quick:
        args.pairs, args.gp_pairs, args.latency_warmup = 20, 5, 2
        args.duration, args.warmup, args.preload = 4.0, 1.0, 60
        args.clients, args.load_repeats = min(args.clients, 8), 2
    if args.gp_pairs is None:
        args.gp_pairs = args.pairs
    backends = [b for b in args.backends.split(",") if b]
    systems = [s for s in args.systems.split(",") if s]
    for b in backends:
        if b not in BACKENDS:
            ap.error(f"unknown backend {b!r} (choose from {', '.join(BACKENDS)})")
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r} (choose from {', '.join(SYSTEMS)})")

    signal.signal(signal.SIGTERM, _terminate)
    warnings.filterwarnings("ignore", module="optuna")
    with contextlib.suppress(ImportError):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    if args.out is None:
        args.out = str(Path(tempfile.gettempdir()) / "calibo-service-quick.json" if args.quick
                       else RESULTS / "service.json")
    out = Path(args.out)
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    t0 = time.time()
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    meta: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"), "task": TASK.name, "space_dims": len(TASK.space),
        "backends": backends, "systems": systems, "pairs": args.pairs, "gp_pairs": args.gp_pairs,
        "latency_warmup_pairs": args.latency_warmup, "duration": args.duration, "warmup": args.warmup,
        "clients": args.clients, "load_repeats": args.load_repeats, "objectives": OBJECTIVES, "preload": args.preload, "preload_batch": args.preload_batch,
        "candidates": args.candidates, "server_workers": args.server_workers, "seed": args.seed,
        "quick": args.quick, "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "aims": AIMS, "server_env": server_env(args),
        "loadavg_at_start": os.getloadavg(),
        "seeds": {"calibo_studies": {"crowd": args.seed, "fresh": args.seed + 1, "load": args.seed + 2},
                  "optuna_preload_rng": args.seed, "optuna_sampler": args.seed,
                  "optuna_load_threads": f"{args.seed + 1}..{args.seed + args.clients}"},
        "timing": "time.perf_counter around each call; calibo: httpx.Client keep-alive over loopback "
                  "(server + HTTP); optuna: in-process study.ask / study.tell on RDBStorage",
        "versions": _versions(),
    }
    if args.merge:
        merged: dict[tuple[str, str, str], dict[str, Any]] = {}
        parts = []
        union: dict[str, Any] = {}
        for f in args.merge:
            d = json.loads(Path(f).read_text())
            m = d["meta"]
            union.update(m)
            for r in d["rows"]:
                r["run"] = {"file": Path(f).name, "date": m.get("date"),
                            "server_code": m.get("server_code") if r["system"] == "calibo" else None}
                merged[(r["system"], r["backend"], r["mode"])] = r
            parts.append({"file": Path(f).name, "meta": m})
        order = {(b, s): i for i, (b, s) in enumerate((b, s) for b in BACKENDS for s in SYSTEMS)}
        rows = sorted(merged.values(), key=lambda r: order.get((r["backend"], r["system"]), 99))
        for p in parts:  # which rows each part still provides
            p["rows"] = [f"{r['system']} {r['backend']} {r['mode']}" for r in rows if r["run"]["file"] == p["file"]]
        parts = [p for p in parts if p["rows"]]
        codes = {json.dumps(r["run"]["server_code"], sort_keys=True) for r in rows if r["system"] == "calibo"}
        if len(codes) > 1:
            log(f"warning: the calibo rows come from different server code: {sorted(codes)}")
        meta = {**union, "merged_from": parts, "date": max(p["meta"].get("date", "") for p in parts),
                "backends": sorted({r["backend"] for r in rows}, key=BACKENDS.index),
                "systems": sorted({r["system"] for r in rows}, key=SYSTEMS.index),
                "wall_seconds": sum(p["meta"].get("wall_seconds", 0.0) for p in parts)}
        if len(codes) == 1:
            meta["server_code"] = json.loads(codes.pop())
        checks = aims(rows)
        print_table(rows, checks, meta)
        out.write_text(json.dumps({"meta": meta, "rows": rows, "aims": checks}))
        plot(rows, out.with_suffix(".png"))
        print(f"wrote {out} and {out.with_suffix('.png')}")
        return
    try:
        with tempfile.TemporaryDirectory(prefix="calibo-bench-service-") as tmpdir:
            tmp = Path(tmpdir)
            if "calibo" in systems:
                meta["server_code"] = freeze_code(tmp / "code", args.code)
                log(f"calibo servers run {args.code} code frozen in {tmp / 'code'}: {meta['server_code']}")
            for backend in backends:
                for system in systems:
                    try:
                        if system == "calibo":
                            rows.extend(bench_calibo(backend, args, tmp))
                        else:
                            rows.extend(bench_optuna(system, backend, args, tmp))
                    except KeyboardInterrupt:
                        raise
                    except Exception as e:  # a system failing is reported, the others still run
                        msg = f"{system}/{backend} failed: {type(e).__name__}: {e}"
                        failures.append(msg)
                        log(msg)
                    out.with_suffix(".partial.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    except KeyboardInterrupt:
        log("interrupted: servers stopped, databases dropped; partial rows in "
            f"{out.with_suffix('.partial.json')}")
        sys.exit(130)
    write_results(out, meta, rows, failures, t0, aims, print_table, plot)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
