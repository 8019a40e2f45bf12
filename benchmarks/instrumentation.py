"""What request ids, metrics and logging cost the crowd ask/tell path: interleaved A/B.

``benchmarks/service.py`` run twice (before / after) differs by more from one
run to the next on this 2-core machine (ask p50 5.4 vs 6.6 ms for the same
code) than instrumentation can cost. This script runs both versions at once
and alternates between them, so drift hits both alike:

* ``before``: the server code of ``--before`` (a git commit), ``after``: HEAD;
  each ``calibo serve --workers 1`` from a frozen copy, on its own fresh
  database (``--backends``: SQLite and PostgreSQL), with service.py's crowd
  study (Hartmann-6, ``--preload`` 500 trials, 2000 candidates,
  ``ask_wait_seconds=0``);
* ``--blocks`` (20) rounds: ``--block`` (25) sequential ask+tell pairs on one
  server, then on the other (which goes first alternates);
* per server: ask and tell p50 / p90 / p99 over all pairs, and the ratio
  after / before, against the aim (<= 1.10).

Writes ``benchmarks/results/instrumentation.json``.

    .venv/bin/python benchmarks/instrumentation.py --before 434ddbe
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.service import Calibo, calibo_server, database, freeze_code  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
AIM = 1.10


def pct(xs: list[float]) -> dict[str, float]:
    a = 1000 * np.asarray(xs)
    return {q: float(np.percentile(a, int(q[1:]))) for q in ("p50", "p90", "p99")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git commit of the code without the instrumentation")
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--blocks", type=int, default=20)
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--preload", type=int, default=500)
    ap.add_argument("--candidates", type=int, default=2000)
    ap.add_argument("--out", default=str(RESULTS / "instrumentation.json"))
    args = ap.parse_args()
    from tqdm import tqdm

    out: dict[str, Any] = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": vars(args),
                                    "in_flight": 1}, "rows": []}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        out["meta"]["code"] = {"before": freeze_code(tmp / "before", args.before),
                               "after": freeze_code(tmp / "after", "head")}
        for backend in args.backends.split(","):
            with ExitStack() as stack:
                cbs, sids = {}, {}
                for side in ("before", "after"):
                    url = stack.enter_context(database(backend, tmp, f"instr-{side}"))
                    base, _, _ = stack.enter_context(calibo_server(url, tmp, f"{backend}-{side}", 1, tmp / side))
                    cb = cbs[side] = Calibo(base)
                    stack.callback(cb.close)
                    sids[side] = cb.create("bench-crowd", 0, args.candidates, ask_wait_seconds=0)
                    cb.preload(sids[side], args.preload, 50, f"{backend}/{side}: preload")
                    cb.wait_fitted(sids[side])
                times: dict[str, dict[str, list[float]]] = {s: {"ask": [], "tell": []} for s in cbs}
                with cbs["before"].client() as hb, cbs["after"].client() as ha:
                    pairs = {"before": cbs["before"].pair_fn(hb, sids["before"], "ab"),
                             "after": cbs["after"].pair_fn(ha, sids["after"], "ab")}
                    for side in cbs:  # untimed warm-up
                        for _ in range(10):
                            pairs[side]()
                    for b in tqdm(range(args.blocks), desc=f"{backend}: A/B blocks"):
                        for side in (("before", "after") if b % 2 == 0 else ("after", "before")):
                            for _ in range(args.block):
                                a, t = pairs[side]()
                                times[side]["ask"].append(a)
                                times[side]["tell"].append(t)
                row = {"backend": backend, **{s: {k: pct(v) for k, v in times[s].items()} for s in times}}
                row["ratio"] = {k: row["after"][k]["p50"] / row["before"][k]["p50"] for k in ("ask", "tell")}
                out["rows"].append(row)
                print(f"{backend}: ask p50 {row['before']['ask']['p50']:.2f} -> {row['after']['ask']['p50']:.2f} ms "
                      f"(x{row['ratio']['ask']:.3f}), p99 {row['before']['ask']['p99']:.1f} -> "
                      f"{row['after']['ask']['p99']:.1f}; tell p50 {row['before']['tell']['p50']:.2f} -> "
                      f"{row['after']['tell']['p50']:.2f} (x{row['ratio']['tell']:.3f}); aim <= x{AIM}: "
                      + ("met" if max(row["ratio"].values()) <= AIM else "MISSED"))
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
