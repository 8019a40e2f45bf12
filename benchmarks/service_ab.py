"""Crowd ask latency of two versions of the server, interleaved: a change timed against its base.

``benchmarks.service`` times one server after another; on a 2-core machine whose load drifts by
more than the change being measured, two such runs disagree by 10-20% with the same code. This
script starts both servers at once (this checkout's code, frozen, with ``--server-env`` settings,
and the code at ``--base``), each on its own SQLite database with one fit worker and a study
preloaded with ``--preload`` Hartmann-6 trials, ``ask_wait_seconds=0`` (the crowd row of
``service.py``: every ask serves the newest snapshot, every tell queues a refit), then runs ask+tell
pairs in alternating blocks, the side going first swapped every round, so that drift and the other
side's refits fall on both alike.

    python -m benchmarks.service_ab --base 44ea576 --server-env CALIBO_RATE_LIMIT=100000/second

Prints ask and tell p50 / p99 per side and the ratio of the ask p50s with a bootstrap interval over
blocks; writes benchmarks/results/service_ab.json and .png.
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
from benchmarks.harness.servers import Calibo, calibo_server, freeze_code, parse_server_env
from benchmarks.harness.timing import summarize_ms


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision of the server to compare against")
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

    sides = {"change": ("worktree", env), "base": (args.base, {})}
    timed: dict[str, dict[str, list[float]]] = {s: {"ask": [], "tell": [], "block_ask_p50": []} for s in sides}
    meta: dict[str, Any] = {"base": args.base, "server_env": env, "preload": args.preload,
                            "candidates": args.candidates, "rounds": args.rounds, "block": args.block,
                            "seed": args.seed, "task": "hartmann6", "mode": "crowd (ask_wait_seconds 0)"}
    with tempfile.TemporaryDirectory(prefix="calibo-ab-") as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        bench: dict[str, tuple[Calibo, int, Any]] = {}
        for side, (code, side_env) in sides.items():
            meta[f"{side}_code"] = freeze_code(tmp / side / "code", code)
            base, _, _ = stack.enter_context(calibo_server(f"sqlite:///{tmp / side}.db", tmp / side, side, 1,
                                                           tmp / side / "code", side_env))
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
                for _ in range(args.block):
                    a, t = bench[side][2]()
                    asks.append(a)
                    timed[side]["tell"].append(t)
                timed[side]["ask"] += asks
                timed[side]["block_ask_p50"].append(float(np.median(asks)))
    rows = {s: {"ask": summarize_ms(v["ask"]), "tell": summarize_ms(v["tell"])} for s, v in timed.items()}
    rng = np.random.default_rng(args.seed)
    ch, bs = np.array(timed["change"]["block_ask_p50"]), np.array(timed["base"]["block_ask_p50"])
    boots = [np.median(rng.choice(ch, ch.size)) / np.median(rng.choice(bs, bs.size)) for _ in range(2000)]
    ratio = {"p50_ratio": rows["change"]["ask"]["p50"] / rows["base"]["ask"]["p50"],
             "block_median_ratio": float(np.median(ch) / np.median(bs)),
             "ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]}
    print(f"crowd ask+tell pairs on SQLite, {args.preload} trials preloaded, {args.rounds} rounds x {args.block} "
          f"pairs per side, interleaved; one trial in flight per side; ms")
    print(f"{'side':<8}{'code':<14}{'ask p50':>9}{'ask p99':>9}{'tell p50':>9}{'tell p99':>9}")
    for s, (code, _) in sides.items():
        a, t = rows[s]["ask"], rows[s]["tell"]
        print(f"{s:<8}{code:<14}{a['p50']:>9.2f}{a['p99']:>9.2f}{t['p50']:>9.2f}{t['p99']:>9.2f}")
    print(f"ask p50 change / base: {ratio['p50_ratio']:.3f} (block medians {ratio['block_median_ratio']:.3f}, "
          f"95% bootstrap over blocks {ratio['ci95'][0]:.3f}-{ratio['ci95'][1]:.3f}); server env {env}")
    out = report.write_json(args.out, {"meta": meta, "rows": rows, "ratio": ratio,
                                       "block_ask_p50": {s: v["block_ask_p50"] for s, v in timed.items()}})
    plot(timed, out.with_suffix(".png"), env)
    report.wrote(out, out.with_suffix(".png"))


def plot(timed: dict[str, dict[str, list[float]]], path: Path, env: dict[str, str]) -> None:
    fig, axes = report.figure(figsize=(7, 4))
    ax = axes[0][0]
    for side, v in timed.items():
        ms = np.sort(np.asarray(v["ask"]) * 1000.0)
        ax.plot(ms, np.linspace(0, 1, ms.size), label=side)
    ax.set_xscale("log")
    ax.set_xlabel("crowd ask latency (ms), SQLite, one trial in flight per side")
    ax.set_ylabel("fraction of asks")
    ax.set_title(f"interleaved A/B; change with {env or 'no settings'}", fontsize=9)
    ax.legend()
    report.save_figure(fig, path, dpi=110)


if __name__ == "__main__":
    main()
