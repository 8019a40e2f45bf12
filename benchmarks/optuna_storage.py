"""What a trial costs Optuna code on each storage: ``study.optimize`` with ``TPESampler(seed)`` on
Optuna's in-memory storage, its RDB storage (SQLite, PostgreSQL), ``calibo.optuna.CaliboStorage``
over a calibo server (SQLite, PostgreSQL), and Optuna's ``GrpcStorageProxy`` in front of a
``CaliboStorage`` (``calibo optuna-grpc``'s proxy, in a thread of this process).

The objective costs nothing (Branin, two floats, minimised), so the time per trial is the storage's
and the sampler's. One trial is in flight at a time (``study.optimize`` with ``n_jobs=1``). Every
storage runs every seed, side by side in one run, interleaved by seed (seed 0 of every storage, then
seed 1...) so that the machine's load drift falls on all alike. The same seed gives TPE the same
trials on every faithful storage: each run's trials are stored as a digest of their parameters and
values, and a storage whose digest differs from the in-memory storage's for some seed is flagged
(``same_as_inmemory``).

Reported per storage (medians over seeds): ms per trial (the wall time of ``optimize``), the p50 and
p90 of each trial's time after the first 10 (TPE's random start), and, for the calibo rows, HTTP
requests per trial (the server's ``/metrics`` request count before and after). The calibo servers run
the checkout's code (``calibo serve``, one fit worker, their surrogate fitting on the trials Optuna
writes, as any study's).

    python -m benchmarks.optuna_storage                       # 3 seeds x 100 trials
    python -m benchmarks.optuna_storage --seeds 1 --trials 30 --storages inmemory,calibo-sqlite
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report  # noqa: E402
from benchmarks.harness.servers import calibo_server, database, free_port, git_state, versions  # noqa: E402
from benchmarks.harness.timing import log  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "optuna_storage.json"
STORAGES = ("inmemory", "rdb-sqlite", "rdb-postgresql", "calibo-sqlite", "calibo-postgresql", "grpc-calibo-sqlite")
START = 10  # TPE's random start: the percentiles are of the trials after it


def branin(trial: Any) -> float:
    x, y = trial.suggest_float("x", -5, 10), trial.suggest_float("y", 0, 15)
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


def digest(trials: list[Any]) -> str:
    """A run's trials (parameters and values, in order) as a short hash: equal on two storages exactly
    when TPE made the same trials on both (the per-trial values need not be stored to compare them)."""
    import hashlib
    import json

    text = json.dumps([[t.params, t.value] for t in trials], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def requests_served(url: str) -> float:
    """HTTP requests the server has answered so far (its /metrics latency histogram's count)."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30, trust_env=False).text
    return sum(float(m.group(1)) for m in
               re.finditer(r"^calibo_http_request_duration_seconds_count\{.*\} (\S+)$", text, re.M))


@contextlib.contextmanager
def grpc_proxy(url: str) -> Iterator[tuple[str, int]]:
    """Optuna's gRPC proxy around a CaliboStorage, in a thread of this process."""
    from optuna.storages._grpc.server import make_server

    from calibo.optuna import CaliboStorage

    port = free_port()
    server = make_server(CaliboStorage(url), "127.0.0.1", port)
    server.start()
    try:
        yield "127.0.0.1", port
    finally:
        server.stop(5).wait()


def run(storage: Any, name: str, seed: int, trials: int, url: str | None) -> dict[str, Any]:
    import optuna

    stamps: list[float] = []
    study = optuna.create_study(study_name=name, storage=storage, sampler=optuna.samplers.TPESampler(seed=seed))
    before = requests_served(url) if url else None
    t0 = time.perf_counter()
    study.optimize(branin, n_trials=trials, callbacks=[lambda s, t: stamps.append(time.perf_counter())])
    wall = time.perf_counter() - t0
    served = requests_served(url) - before - 1 if url and before is not None else None  # less its own scrape
    per = np.diff([t0, *stamps])
    values = [t.value for t in study.trials]
    return {"ms_per_trial": 1000 * wall / trials, "p50_ms": 1000 * float(np.percentile(per[START:], 50)),
            "p90_ms": 1000 * float(np.percentile(per[START:], 90)), "best": float(min(values)),
            "trials_digest": digest(study.trials), "requests_per_trial": None if served is None else served / trials}


def summarize(rows: list[dict[str, Any]], labels: list[str]) -> list[dict[str, Any]]:
    base = {r["seed"]: r["trials_digest"] for r in rows if r["storage"] == "inmemory"}
    out = []
    for label in labels:
        mine = [r for r in rows if r["storage"] == label]
        if not mine:
            continue
        req = [r["requests_per_trial"] for r in mine if r["requests_per_trial"] is not None]
        same = [r["trials_digest"] == base[r["seed"]] for r in mine if r["seed"] in base]
        out.append({"storage": label, "ms_per_trial": float(np.median([r["ms_per_trial"] for r in mine])),
                    "ms_per_trial_min": min(r["ms_per_trial"] for r in mine),
                    "ms_per_trial_max": max(r["ms_per_trial"] for r in mine),
                    "p50_ms": float(np.median([r["p50_ms"] for r in mine])),
                    "p90_ms": float(np.median([r["p90_ms"] for r in mine])),
                    "requests_per_trial": float(np.median(req)) if req else None,
                    "best": float(np.median([r["best"] for r in mine])),
                    "same_as_inmemory": all(same) if same else None})
    inmem = next((s["ms_per_trial"] for s in out if s["storage"] == "inmemory"), None)
    for s in out:
        s["x_inmemory"] = s["ms_per_trial"] / inmem if inmem else None
    return out


def print_summary(summary: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    report.print_table(
        f"Optuna TPE on each storage: {meta['trials']} trials, seeds {meta['seeds']}, 1 in flight (medians)",
        ["ms/trial", "p50", "p90", "x inmem", "req/trial", "best", "same trials"],
        [[s["storage"], s["ms_per_trial"], s["p50_ms"], s["p90_ms"], s["x_inmemory"], s["requests_per_trial"],
          s["best"], s["same_as_inmemory"]] for s in summary])


def plot(summary: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path, meta: dict[str, Any]) -> None:
    fig, axes = report.figure(1, 1, size=(max(6.0, 0.9 * len(summary) + 2.0), 4.4))
    ax = axes[0][0]
    report.ms_bars(ax, summary, "storage", rows)
    ax.set_title(f"Optuna TPE, Branin: {meta['trials']} trials, {len(meta['seeds'])} seed(s), 1 in flight "
                 "(bar: median, whiskers: range, dots: seeds)", fontsize=9)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--storages", default=",".join(STORAGES), help=f"a subset of {','.join(STORAGES)}")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    wanted = [s.strip() for s in args.storages.split(",") if s.strip()]
    if not wanted or (bad := [s for s in wanted if s not in STORAGES]):
        sys.exit(f"--storages: unknown {bad if wanted else 'empty'}; choose from {','.join(STORAGES)}")
    if args.seeds < 1 or args.trials <= START + 1:
        sys.exit(f"--seeds must be >= 1 and --trials > {START + 1}")
    labels = [s for s in STORAGES if s in wanted]

    import optuna
    from optuna.storages import GrpcStorageProxy, RDBStorage

    from calibo.optuna import CaliboStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = list(range(args.seeds))
    meta: dict[str, Any] = {"objective": "Branin (x in [-5, 10], y in [0, 15]), minimize, zero cost",
                            "sampler": "TPESampler(seed)", "trials": args.trials, "seeds": seeds, "in_flight": 1,
                            "storages": labels, "percentiles_after": START, "cpu_count": os.cpu_count(),
                            "server": "calibo serve (the checkout's code), 1 fit worker",
                            "loadavg_at_start": os.getloadavg(), "versions": versions(), **git_state(),
                            "command": " ".join(sys.argv)}
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        tmp = Path(d)
        urls: dict[str, str] = {}
        for backend in ("sqlite", "postgresql"):
            if f"calibo-{backend}" in labels or (backend == "sqlite" and "grpc-calibo-sqlite" in labels):
                db = stack.enter_context(database(backend, tmp, f"calibo-{backend}"))
                urls[backend], _, _ = stack.enter_context(calibo_server(db, tmp, f"calibo-{backend}", workers=1))
        rdb: dict[str, Any] = {}
        for backend in ("sqlite", "postgresql"):
            if f"rdb-{backend}" in labels:
                rdb[backend] = stack.enter_context(database(backend, tmp, f"rdb-{backend}"))
        proxy = stack.enter_context(grpc_proxy(urls["sqlite"])) if "grpc-calibo-sqlite" in labels else None
        bar = tqdm(total=len(seeds) * len(labels), desc="optuna storages", unit="run")
        for seed in seeds:
            for label in labels:
                name = f"{label}-{seed}-{int(time.time() * 1000) % 10**8}"
                url = None
                if label == "inmemory":
                    storage: Any = optuna.storages.InMemoryStorage()
                elif label.startswith("rdb-"):
                    backend = label.split("-", 1)[1]
                    storage = RDBStorage(rdb[backend] if backend == "sqlite"
                                         else rdb[backend].replace("postgresql://", "postgresql+psycopg://", 1))
                elif label.startswith("calibo-"):
                    url = urls[label.split("-", 1)[1]]
                    storage = CaliboStorage(url)
                else:
                    assert proxy is not None
                    url = urls["sqlite"]
                    storage = GrpcStorageProxy(host=proxy[0], port=proxy[1])
                try:
                    r = run(storage, name, seed, args.trials, url)
                except Exception as e:  # noqa: BLE001 - one failed cell is reported, the others still run
                    log(f"{label} seed {seed}: {type(e).__name__}: {e}")
                    meta.setdefault("failures", []).append(f"{label} seed {seed}: {type(e).__name__}: {e}")
                    bar.update()
                    continue
                finally:
                    if isinstance(storage, GrpcStorageProxy):
                        storage.close()
                rows.append({"storage": label, "seed": seed, **r})
                bar.set_postfix_str(f"{label}: {r['ms_per_trial']:.1f} ms/trial")
                bar.update()
        bar.close()
    meta["wall_seconds"] = time.time() - t0
    meta["loadavg_at_end"] = os.getloadavg()
    summary = summarize(rows, labels)
    print_summary(summary, meta)
    report.write_json(args.out, {"meta": meta, "summary": summary, "rows": rows})
    plot(summary, rows, args.out.with_suffix(".png"), meta)
    report.wrote(args.out, args.out.with_suffix(".png"))


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
