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

    python -m benchmarks.service                                  # everything
    python -m benchmarks.service --quick                          # smoke run, a minute or two
    python -m benchmarks.service --backends sqlite --systems calibo,optuna_tpe --pairs 100
    python -m benchmarks.service --merge a.json b.json             # combine runs (later rows win)
    python -m benchmarks.service --systems calibo --objectives 2 --out benchmarks/results/service_mo.json

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
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import report
from benchmarks.harness.servers import (
    Calibo,
    calibo_server,
    database,
    fit_status,
    freeze_code,
    server_env,
    terminate,
    versions,
)
from benchmarks.harness.tasks import TASKS
from benchmarks.harness.timing import (
    QUANTILE_GRID,
    PairFn,
    combine_throughput,
    log,
    process_cpu,
    run_latency,
    run_throughput,
)

TASK = TASKS["hartmann6"]
OBJECTIVES = 1  # --objectives 2: calibo's studies are multi-objective (Hartmann-6 and a distance)
BACKENDS = ("sqlite", "postgresql")
SYSTEMS = ("calibo", "optuna_tpe", "optuna_gp")
AIMS = {"ask_p50_ms": 20.0, "ask_p99_ms": 100.0, "tell_p50_ms": 10.0, "pairs_per_s": 300.0}
OTHERS_WARN = 0.2  # cores busy with other work during a row, beyond which the table flags it
def bench_calibo(backend: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with database(backend, tmp, "calibo") as url, \
            calibo_server(url, Path(args.log_dir) if args.log_dir else tmp, backend,
                          args.server_workers, tmp / "code", server_env(args)) as (base, logfile, pid):
        cb = Calibo(base, TASK, OBJECTIVES)
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
                before = fit_status(cb.wait_fitted(sid))
                with cb.client() as http:
                    res = run_latency(cb.pair_fn(http, sid, f"bench-{mode}"), args.pairs, args.latency_warmup,
                                      f"calibo/{backend}: {mode} latency", lambda: process_cpu(pid))
                after = fit_status(cb.view(sid))
                rows.append({**common, **res, "mode": mode, "mode_desc": desc, "note": note,
                             "preload_s": preload_s[mode], "status_before": before, "status_after": after})
                log(_row_line(rows[-1]))
            runs = []
            for k in range(args.load_repeats):
                sid = ids[f"load{k}"]
                before = fit_status(cb.wait_fitted(sid))
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
                runs.append({**res, "status_before": before, "status_after": fit_status(cb.view(sid))})
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
    fig, grid = report.figure(1, 3, figsize=(18, 5.6), gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    axes = grid[0]
    styles = {"sqlite": "-", "postgresql": "--"}
    keys = sorted({(r["system"], r["mode"]) for r in rows})
    colors = report.colors(keys)
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
    report.save_figure(fig, path)


# ----------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
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
    args = ap.parse_args(argv)
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

    signal.signal(signal.SIGTERM, terminate)
    warnings.filterwarnings("ignore", module="optuna")
    with contextlib.suppress(ImportError):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    if args.out is None:
        args.out = str(Path(tempfile.gettempdir()) / "calibo-service-quick.json" if args.quick
                       else report.RESULTS / "service.json")
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
        "clients": args.clients, "load_repeats": args.load_repeats, "objectives": OBJECTIVES, "preload": args.preload,
        "preload_batch": args.preload_batch,
        "candidates": args.candidates, "server_workers": args.server_workers, "seed": args.seed,
        "quick": args.quick, "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "aims": AIMS, "server_env": server_env(args),
        "loadavg_at_start": os.getloadavg(),
        "seeds": {"calibo_studies": {"crowd": args.seed, "fresh": args.seed + 1, "load": args.seed + 2},
                  "optuna_preload_rng": args.seed, "optuna_sampler": args.seed,
                  "optuna_load_threads": f"{args.seed + 1}..{args.seed + args.clients}"},
        "timing": "time.perf_counter around each call; calibo: httpx.Client keep-alive over loopback "
                  "(server + HTTP); optuna: in-process study.ask / study.tell on RDBStorage",
        "versions": versions(),
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
        report.write_json(out, {"meta": meta, "rows": rows, "aims": checks})
        plot(rows, out.with_suffix(".png"))
        report.wrote(out, out.with_suffix(".png"))
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
                    out.with_suffix(".partial.json").write_text(report.dumps({"meta": meta, "rows": rows}))
    except KeyboardInterrupt:
        log("interrupted: servers stopped, databases dropped; partial rows in "
            f"{out.with_suffix('.partial.json')}")
        sys.exit(130)
    report.write_results(out, meta, rows, failures, t0, aims, print_table, plot)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
