"""Crowd ask latency of two versions of the server, interleaved: a change timed against its base.

``benchmarks.service`` times one server after another; on a 2-core machine whose load drifts by
more than the change being measured, two such runs disagree by 10-20% with the same code. This
script starts both servers at once (this checkout's code, frozen, with ``--server-env`` settings,
or the code at ``--change``; and the code at ``--base``), each on its own database (``--backend``
SQLite, or a fresh PostgreSQL database at 127.0.0.1:5432) with one fit worker and a study
preloaded with ``--preload`` Hartmann-6 trials, ``ask_wait_seconds=0`` (the crowd row of
``service.py``: every ask serves the newest snapshot, every tell queues a refit), then runs ask+tell
pairs in alternating blocks, the side going first swapped every round, so that drift and the other
side's refits fall on both alike.

    python -m benchmarks.service_ab --base 44ea576 --server-env CALIBO_RATE_LIMIT=100000/second
    python -m benchmarks.service_ab --base 4b97b54 --change c307659 --backend postgresql

Prints ask and tell p50 / p99 per side and the ratio of the ask p50s with a bootstrap interval over
blocks, and the CPU time each side's API process spent per ask+tell pair (user + system, from
/proc; its fit worker apart): on a loaded machine latency moves with the load, CPU time much less, so
it tells a change in the server's own cost from a change of load. Writes
benchmarks/results/service_ab.json and .png.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import report
from benchmarks.harness.servers import (
    Calibo,
    calibo_server,
    database,
    freeze_code,
    parse_server_env,
)
from benchmarks.harness.timing import summarize_ms


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision of the server to compare against")
    ap.add_argument("--change", default="worktree",
                    help="the server timed against the base: worktree (this checkout's files, frozen at the "
                    "start; the default) or a git revision")
    ap.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--server-env", action="append", default=[], metavar="CALIBO_NAME=VALUE",
                    help="a setting of this checkout's server (repeatable); the base runs with none")
    ap.add_argument("--preload", type=int, default=500)
    ap.add_argument("--candidates", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=20, help="rounds; each runs one block per side")
    ap.add_argument("--block", type=int, default=20, help="ask+tell pairs per block")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(report.RESULTS / "service_ab.json"))
    args = ap.parse_args(argv)
    env = parse_server_env(args.server_env)
    from tqdm import tqdm

    sides = {"change": (args.change, env), "base": (args.base, {})}
    import psutil

    timed: dict[str, dict[str, list[float]]] = {s: {"ask": [], "tell": [], "block_ask_p50": [], "api_cpu": [],
                                                    "fit_cpu": []} for s in sides}
    meta: dict[str, Any] = {"base": args.base, "server_env": env, "preload": args.preload,
                            "candidates": args.candidates, "rounds": args.rounds, "block": args.block,
                            "seed": args.seed, "task": "hartmann6", "mode": "crowd (ask_wait_seconds 0)",
                            "backend": args.backend}
    with tempfile.TemporaryDirectory(prefix="calibo-ab-") as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        bench: dict[str, tuple[Calibo, int, Any]] = {}
        procs: dict[str, psutil.Process] = {}
        for side, (code, side_env) in sides.items():
            meta[f"{side}_code"] = freeze_code(tmp / side / "code", code)
            url = stack.enter_context(database(args.backend, tmp, side))
            base, _, pid = stack.enter_context(calibo_server(url, tmp / side, side, 1, tmp / side / "code", side_env))
            procs[side] = psutil.Process(pid)
            cb = Calibo(base)
            stack.callback(cb.close)
            sid = cb.create("ab-crowd", args.seed, args.candidates, ask_wait_seconds=0)
            cb.preload(sid, args.preload, 50, f"preload {side}")
            cb.wait_fitted(sid)
            http = stack.enter_context(cb.client())
            pair = cb.pair_fn(http, sid, f"ab-{side}")
            for _ in range(5):  # untimed
                pair()
            bench[side] = (cb, sid, pair)
        order = list(sides)
        for r in tqdm(range(args.rounds), desc="rounds", file=sys.stderr):
            for side in (order if r % 2 == 0 else order[::-1]):
                asks = []
                api0, fit0 = _cpu(procs[side])
                for _ in range(args.block):
                    a, t = bench[side][2]()
                    asks.append(a)
                    timed[side]["tell"].append(t)
                timed[side]["ask"] += asks
                timed[side]["block_ask_p50"].append(float(np.median(asks)))
                api1, fit1 = _cpu(procs[side])
                timed[side]["api_cpu"].append((api1 - api0) / args.block)
                timed[side]["fit_cpu"].append((fit1 - fit0) / args.block)
    rows = {s: {"ask": summarize_ms(v["ask"]), "tell": summarize_ms(v["tell"]),
                "api_cpu_ms_per_pair": 1000 * float(np.median(v["api_cpu"])),
                "fit_cpu_ms_per_pair": 1000 * float(np.median(v["fit_cpu"]))} for s, v in timed.items()}
    rng = np.random.default_rng(args.seed)
    ch, bs = np.array(timed["change"]["block_ask_p50"]), np.array(timed["base"]["block_ask_p50"])
    boots = [np.median(rng.choice(ch, ch.size)) / np.median(rng.choice(bs, bs.size)) for _ in range(2000)]
    ca, ba = np.array(timed["change"]["api_cpu"]), np.array(timed["base"]["api_cpu"])
    cpu_boots = [np.median(rng.choice(ca, ca.size)) / np.median(rng.choice(ba, ba.size)) for _ in range(2000)]
    ratio = {"p50_ratio": rows["change"]["ask"]["p50"] / rows["base"]["ask"]["p50"],
             "api_cpu_ratio": float(np.median(ca) / np.median(ba)),
             "api_cpu_ci95": [float(np.percentile(cpu_boots, 2.5)), float(np.percentile(cpu_boots, 97.5))],
             "block_median_ratio": float(np.median(ch) / np.median(bs)),
             "ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]}
    print(f"crowd ask+tell pairs on {args.backend}, {args.preload} trials preloaded, {args.rounds} rounds x "
          f"{args.block} pairs per side, interleaved; one trial in flight per side; ms")
    print(f"{'side':<8}{'code':<14}{'ask p50':>9}{'ask p99':>9}{'tell p50':>9}{'tell p99':>9}{'API cpu':>9}"
          f"{'fit cpu':>9}")
    for s, (code, _) in sides.items():
        a, t = rows[s]["ask"], rows[s]["tell"]
        print(f"{s:<8}{code:<14}{a['p50']:>9.2f}{a['p99']:>9.2f}{t['p50']:>9.2f}{t['p99']:>9.2f}"
              f"{rows[s]['api_cpu_ms_per_pair']:>9.2f}{rows[s]['fit_cpu_ms_per_pair']:>9.2f}")
    print(f"ask p50 change / base: {ratio['p50_ratio']:.3f} (block medians {ratio['block_median_ratio']:.3f}, "
          f"95% bootstrap over blocks {ratio['ci95'][0]:.3f}-{ratio['ci95'][1]:.3f}); server env {env}")
    print(f"API process CPU per pair change / base: {ratio['api_cpu_ratio']:.3f} (95% bootstrap over blocks "
          f"{ratio['api_cpu_ci95'][0]:.3f}-{ratio['api_cpu_ci95'][1]:.3f}); CPU columns: ms per ask+tell pair")
    out = report.write_json(args.out, {"meta": meta, "rows": rows, "ratio": ratio,
                                       "block_ask_p50": {s: v["block_ask_p50"] for s, v in timed.items()}})
    plot(timed, out.with_suffix(".png"), env, args.backend)
    report.wrote(out, out.with_suffix(".png"))


def _cpu(proc: Any) -> tuple[float, float]:
    """CPU seconds (user + system) of a server's API process, and of its children (the fit pool)."""
    t = proc.cpu_times()
    kids = 0.0
    for c in proc.children(recursive=True):
        try:
            ct = c.cpu_times()
        except Exception:  # a child that exited between the listing and the read
            continue
        kids += ct.user + ct.system
    return t.user + t.system, kids


def plot(timed: dict[str, dict[str, list[float]]], path: Path, env: dict[str, str], backend: str) -> None:
    fig, axes = report.figure(figsize=(7, 4))
    ax = axes[0][0]
    for side, v in timed.items():
        ms = np.sort(np.asarray(v["ask"]) * 1000.0)
        ax.plot(ms, np.linspace(0, 1, ms.size), label=side)
    ax.set_xscale("log")
    ax.set_xlabel(f"crowd ask latency (ms), {backend}, one trial in flight per side")
    ax.set_ylabel("fraction of asks")
    ax.set_title(f"interleaved A/B; change with {env or 'no settings'}", fontsize=9)
    ax.legend()
    report.save_figure(fig, path, dpi=110)


if __name__ == "__main__":
    main()
