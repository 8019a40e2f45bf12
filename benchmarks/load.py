"""Load and faults: a crowd of clients on one study of ``calibo serve``, SQLite and PostgreSQL.

Every row runs ``calibo serve --workers 1`` (a subprocess, one fit worker) on a
fresh database and a crowd from ``benchmarks/crowd/``: ``--clients``
threads, each with its own keep-alive ``httpx.Client``, share ``--trials``
ask -> evaluate (Hartmann-6) -> tell pairs on one study; the first ``--warm``
are told by one client so the crowd runs on a fitted surrogate. Every request
is timed and its outcome counted; on a 503 (honouring Retry-After) or a
connection error a client retries the same request until a 60 s deadline (an
ask with its same Idempotency-Key, a tell as is); a 500 is not retried. At the
end the study is read back through the API and the invariants checked: lost
tells, tells answered 409 (duplicated), asks returning params of a trial still
running, repeated params, gaps in the numbers.

Rows, for each backend:

* ``load``: the crowd (64 clients and 16 for comparison, 2000 trials in total);
* ``kill``: ``--fault-clients`` / ``--fault-trials``; the API is killed (SIGKILL)
  at 25 % of the trials with the crowd running and restarted on the same
  database and port (the crowd retries through it), then again at 60 % with the
  crowd paused: the study's adaptive state, counts and best trial read just
  before must read the same just after;
* ``outage`` (PostgreSQL only): at 30 % the database refuses connections
  (``ALLOW_CONNECTIONS false`` and every session terminated) for
  ``--outage-seconds``, then comes back. Recorded: the answers during it (503
  expected, never 500), ``/healthz`` every 0.1 s, the recovery time (from
  connections allowed again to the end of the first ask+tell pair whose ask was
  answered after that) and requests that failed permanently.

The servers run a frozen copy of ``service/`` and ``migrations/`` (``--code``),
recorded with the git commit, the machine and the versions.

    python -m benchmarks.load                       # everything, ~5 min on 2 cores
    python -m benchmarks.load --quick               # smoke run, about a minute
    python -m benchmarks.load --backends sqlite --rows load

Writes benchmarks/results/load.json and load.png; exits 2 when an invariant broke.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.crowd import (
    TASK,
    CaliboServer,
    run_kill,
    run_load,
    run_outage,
)
from benchmarks.harness import report
from benchmarks.harness.servers import PG_ADMIN, database, freeze_code, terminate, versions
from benchmarks.harness.timing import QUANTILE_GRID, cores_used, log, process_cpu, progress_bar

BACKENDS = ("sqlite", "postgresql")
ROWS = ("load", "kill", "outage")


def _server(url: str, tmp: Path, label: str, args: argparse.Namespace) -> CaliboServer:
    logdir = Path(args.log_dir) if args.log_dir else tmp
    return CaliboServer(url, logdir / f"server-{label}.log", workers=1, code=tmp / "code")


def bench_row(kind: str, backend: str, clients: int, trials: int, args: argparse.Namespace,
              tmp: Path) -> dict[str, Any]:
    label = f"{kind}-{backend}-{clients}"
    common = {"seed": args.seed, "warm": args.warm, "timeout": args.timeout}
    with database(backend, tmp, label.replace("-", "_")) as url:
        srv = _server(url, tmp, label, args)
        srv.start()
        try:
            with progress_bar(trials, f"{kind}/{backend}/{clients} clients") as bar:
                pgid = srv.proc.pid if srv.proc else None
                cpu0, t0 = process_cpu(pgid), time.perf_counter()
                if kind == "load":
                    res = run_load(srv.url, clients=clients, trials=trials, progress=bar, **common)
                elif kind == "kill":
                    res = run_kill(srv, clients=clients, trials=trials, progress=bar, **common)
                else:
                    dbname = url.rsplit("/", 1)[1]
                    res = run_outage(srv.url, PG_ADMIN, dbname, clients=clients, trials=trials,
                                     outage_s=args.outage_seconds, progress=bar, **common)
                wall = time.perf_counter() - t0
                if kind != "kill":  # a killed server's group is gone: its CPU cannot be counted
                    res["cpu_cores_used"] = cores_used(cpu0, process_cpu(pgid), wall)
        finally:
            srv.stop()
            res_log = srv.tail(60)
    res.update({"kind": kind, "backend": backend})
    if res.get("problems"):
        res["server_log_tail"] = res_log
    return res


# ------------------------------------------------------------------ report
def _ms(r: dict[str, Any], what: str, q: str) -> str:
    v = r.get(f"{what}_ms", {}).get(q)
    return f"{v:.0f}" if v is not None else "-"


def print_table(rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    dirty = meta["server_code"].get("source") == "worktree" and meta["server_code"].get("worktree_differs_from_head")
    print(f"\ncalibo under a crowd ({meta['task']}; git {meta['server_code'].get('git_commit', '?')[:10]}"
          f"{' + uncommitted changes' if dirty else ''}; "
          f"{meta['cpu_count']} cores; {meta['date']})")
    head = (f"{'row':<22}{'clients':>8}{'trials':>7}{'pairs/s':>9}{'ask p50':>8}{'p99':>6}{'tell p50':>9}"
            f"{'p99':>6}{'retries':>8}{'5xx':>5}{'503':>5}{'500':>5}{'conn':>6}{'failed':>7}{'lost':>5}"
            f"{'409':>5}{'dup':>5}{'gaps':>5}{'recov s':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        inv = r.get("invariants", {})
        rec = r.get("recovery_s")
        name = f"{r['kind']} {r['backend']}"
        print(f"{name:<22}{r['clients']:>8}{r['trials_total']:>7}{r['pairs_per_s']:>9.0f}"
              f"{_ms(r, 'ask', 'p50'):>8}{_ms(r, 'ask', 'p99'):>6}{_ms(r, 'tell', 'p50'):>9}"
              f"{_ms(r, 'tell', 'p99'):>6}{r['retries']['total']:>8}{r['errors_5xx']:>5}{r['answers_503']:>5}"
              f"{r['answers_500']:>5}{r['transport_errors']:>6}{r['failed_permanently']['total']:>7}"
              f"{inv.get('lost', '-'):>5}{inv.get('duplicated_409', '-'):>5}"
              f"{inv.get('dup_running', 0) + inv.get('dup_params', 0):>5}{inv.get('gaps', '-'):>5}"
              f"{rec if rec is not None else '-':>8}")
    print("pairs/s: acknowledged tells over the crowd's wall time (faults included); latencies (ms) of the "
          "answered attempts; conn: connection errors; failed: requests given up (deadline, or a final "
          "error); dup: asks returning params of a running trial + repeated params; recov: outage end -> "
          "first ask+tell pair.")
    for r in rows:
        if r["kind"] == "kill":
            print(f"kill {r['backend']}: restarts {r.get('hot_restart_s')} s (hot) / {r.get('quiet_restart_s')} s "
                  f"(quiet); state equal across the quiet kill: {r.get('state_equal')}")
        if r["kind"] == "outage":
            print(f"outage {r['backend']}: {r['outage_s']} s; answers during it {r.get('outcomes_during_outage')}; "
                  f"/healthz during it {r.get('healthz_during')}, ok again after {r.get('healthz_recovery_s')} s")
    bad = [r for r in rows if r.get("problems")]
    for r in bad:
        print(f"PROBLEMS {r['kind']} {r['backend']} {r['clients']} clients:")
        for p in r["problems"]:
            print(f"  - {p[:400]}")
    for f in meta.get("failures", []):
        print(f"FAILED {f}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    import numpy as np

    fig, axes = report.figure(2, 2, figsize=(16, 10))
    cmap = matplotlib.colormaps["tab10"]
    names = [f"{r['kind']}\n{r['backend']}\n{r['clients']} clients" for r in rows]
    colors = {"load": cmap(0), "kill": cmap(1), "outage": cmap(3)}

    ax = axes[0, 0]
    bars = ax.bar(range(len(rows)), [r["pairs_per_s"] for r in rows], color=[colors[r["kind"]] for r in rows])
    for b, r in zip(bars, rows, strict=True):
        note = f"{r['pairs_per_s']:.0f}"
        if r.get("problems"):
            note += f"\n{len(r['problems'])} problems"
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), note, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), names, fontsize=7)
    ax.set_ylabel("acknowledged ask+tell pairs / s")
    ax.set_title("throughput (faults included in the wall time)")

    ax = axes[0, 1]
    q = QUANTILE_GRID / 100.0
    for i, r in enumerate(x for x in rows if x["kind"] == "load"):
        for what, ls in (("ask", "-"), ("tell", "--")):
            g = r[f"{what}_ms"].get("grid")
            if g:
                ax.plot(np.maximum(g, 1e-3), q, ls, color=cmap(i % 10), lw=1.5,
                        label=f"{what} {r['backend']} {r['clients']} clients")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log)")
    ax.set_ylabel("fraction of answered requests")
    ax.set_title("load rows: ask (solid) and tell (dashed) latency CDF")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")

    for ax, kind in ((axes[1, 0], "outage"), (axes[1, 1], "kill")):
        r = next((x for x in rows if x["kind"] == kind and x.get("timeline")), None)
        if r is None:
            ax.axis("off")
            continue
        tl = r["timeline"]
        step = tl["step"]
        for key, color in (("200", "tab:green"), ("503", "tab:orange"), ("500", "tab:red"),
                           ("transport", "tab:purple")):
            counts = tl["counts"].get(key)
            if counts:
                ax.plot(np.arange(len(counts)) * step, np.asarray(counts) / step, color=color, lw=1.2,
                        label=f"{key} ({sum(counts)})")
        others = sorted(set(tl["counts"]) - {"200", "503", "500", "transport"})
        for key in others:
            counts = tl["counts"][key]
            ax.plot(np.arange(len(counts)) * step, np.asarray(counts) / step, lw=1, label=f"{key} ({sum(counts)})")
        if kind == "outage" and r.get("outage_window"):
            a, b = r["outage_window"]
            ax.axvspan(a, b, color="tab:red", alpha=0.12, label="database refusing connections")
            downs = [t for t, s, d in r.get("healthz", []) if s != 200]
            if downs:
                ax.plot(downs, [0] * len(downs), "|", color="k", ms=10, label="/healthz not 200")
            title = (f"PostgreSQL outage ({r['outage_s']} s), {r['clients']} clients: recovery "
                     f"{r.get('recovery_s')} s")
        else:
            for key, lab in (("hot_kill_t", "kill -9 (crowd running)"), ("quiet_kill_t", "kill -9 (crowd paused)")):
                if r.get(key) is not None:
                    ax.axvline(r[key], color="k", ls=":", lw=1)
                    ax.text(r[key], ax.get_ylim()[1] * 0.95, " " + lab, fontsize=8, va="top")
            title = f"kill -9 and restart ({r['backend']}), {r['clients']} clients"
        ax.set_xlabel("seconds since the crowd started")
        ax.set_ylabel("answers / s (by when they ended)")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
    report.save_figure(fig, path)


# ----------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--rows", default=",".join(ROWS), help="which scenarios: load, kill, outage")
    ap.add_argument("--clients", default="64,16", help="crowd sizes of the load rows")
    ap.add_argument("--trials", type=int, default=2000, help="trials in total per load row")
    ap.add_argument("--fault-clients", type=int, default=32)
    ap.add_argument("--fault-trials", type=int, default=1000)
    ap.add_argument("--outage-seconds", type=float, default=4.0)
    ap.add_argument("--warm", type=int, default=16, help="trials told by one client before the crowd starts")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a crowd may take")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--code", choices=("worktree", "head"), default="worktree",
                    help="server code: the checkout's files at the start (frozen), or HEAD")
    ap.add_argument("--log-dir", default=None, help="keep the server logs here (default: discarded)")
    ap.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    ap.add_argument("--out", default=None,
                    help="default benchmarks/results/load.json (a --quick run: a file in the temp dir)")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.trials = "16", 300
        args.fault_clients, args.fault_trials, args.outage_seconds = 16, 300, 2.0
    backends = [b for b in args.backends.split(",") if b]
    kinds = [k for k in args.rows.split(",") if k]
    for b in backends:
        if b not in BACKENDS:
            ap.error(f"unknown backend {b!r}")
    for k in kinds:
        if k not in ROWS:
            ap.error(f"unknown row {k!r}")
    sizes = [int(c) for c in args.clients.split(",") if c]
    signal.signal(signal.SIGTERM, terminate)
    if args.out is None:
        args.out = str(Path(tempfile.gettempdir()) / "calibo-load-quick.json" if args.quick
                       else report.RESULTS / "load.json")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)

    plan: list[tuple[str, str, int, int]] = []
    for backend in backends:
        if "load" in kinds:
            plan += [("load", backend, c, args.trials) for c in sizes]
        if "kill" in kinds:
            plan.append(("kill", backend, args.fault_clients, args.fault_trials))
        if "outage" in kinds and backend == "postgresql":
            plan.append(("outage", backend, args.fault_clients, args.fault_trials))

    t0 = time.time()
    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "task": TASK.name,
        "args": {k: v for k, v in vars(args).items() if k not in ("out", "log_dir")},
        "cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg_at_start": os.getloadavg(),
        "server": "calibo serve --workers 1 (subprocess, fresh database per row)",
        "retry_policy": "503 and connection errors retried until a 60 s deadline (Retry-After honoured, "
                        "+ jitter; asks keep their Idempotency-Key); 500 and 4xx not retried",
        "timing": "time.perf_counter around each attempt; httpx.Client keep-alive over loopback",
        "versions": versions(),
    }
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="calibo-bench-load-") as tmpdir:
            tmp = Path(tmpdir)
            meta["server_code"] = freeze_code(tmp / "code", args.code)
            log(f"servers run {args.code} code frozen in {tmp / 'code'}: {meta['server_code']}")
            for kind, backend, clients, trials in plan:
                try:
                    r = bench_row(kind, backend, clients, trials, args, tmp)
                    rows.append(r)
                    log(f"{kind} {backend} {clients} clients: {r['pairs_per_s']:.0f} pairs/s, "
                        f"outcomes {r['outcomes']}, {len(r['problems'])} problems")
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # a row failing is reported, the others still run
                    msg = f"{kind}/{backend}/{clients} failed: {type(e).__name__}: {str(e)[:2000]}"
                    failures.append(msg)
                    log(msg)
                out.with_suffix(".partial.json").write_text(report.dumps({"meta": meta, "rows": rows}))
    except KeyboardInterrupt:
        log(f"interrupted: partial rows in {out.with_suffix('.partial.json')}")
        sys.exit(130)
    meta["wall_seconds"] = round(time.time() - t0, 1)
    meta["loadavg_at_end"] = os.getloadavg()
    meta["failures"] = failures
    print_table(rows, meta)
    report.write_json(out, {"meta": meta, "rows": rows})
    if rows:
        plot(rows, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))
    if failures:
        sys.exit(1)
    if any(r.get("problems") for r in rows):
        sys.exit(2)


if __name__ == "__main__":
    main()
