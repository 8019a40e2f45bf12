"""What a learning-curve report costs as a study's curves pile up, before and after a change.

Each code version (``--before`` a git revision, and HEAD) is frozen (``calibo.server.freeze_code``) and
run in its own process: a SQLite study of ``--trials`` (300) running trials, each reporting
``step = 1..27`` through ``StudyService.report`` (the service layer, no HTTP) the value
``a + 1 / step`` (``a`` drawn per trial, fixed seed) until told to stop. The mean and p90 latency
of the reports of the last third of the trials is printed per pruner and written to
``benchmarks/results/report_latency.json`` / ``.png``. One trial in flight.

    .venv/bin/python benchmarks/report_latency.py --before 8d82018
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.service import freeze_code  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PRUNERS = ("none", "median", "sh", "sh+")

MEASURE = r"""
import json, sys, tempfile, time
import numpy as np
from calibo.server.config import Settings
from calibo.server.storage import Storage
from calibo.server.studies import StudyService

pruner, n = sys.argv[1], int(sys.argv[2])
url = f"sqlite:///{tempfile.mkdtemp()}/r.db"
st = Storage(url)
svc = StudyService(Settings(database_url=url), st, None)
info, _ = svc.create("r", {"x": {"type": "float", "low": 0, "high": 1}},
                     pruner={"name": pruner, "max_resource": 27})
with st.locked(info.id) as tx:
    rows = tx.add_trials([{"params": {"x": i / n}, "ukey": f"{i:08x}"} for i in range(n)])
rng = np.random.default_rng(0)
times = []
for k, r in enumerate(rows):
    a = rng.random()
    for step in range(1, 28):
        t = time.perf_counter()
        prune = svc.report(info.id, r["id"], step, float(a + 1 / step))
        if k >= 2 * n // 3:
            times.append(time.perf_counter() - t)
        if prune:
            break
print(json.dumps({"reports": len(times), "mean_ms": 1000 * float(np.mean(times)),
                  "p90_ms": 1000 * float(np.percentile(times, 90))}))
"""


def measure(code: Path, pruner: str, trials: int) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, pruner, str(trials)], cwd=code, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision to compare HEAD with")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--out", default=str(RESULTS / "report_latency.json"))
    args = ap.parse_args()
    from tqdm import tqdm

    res: dict = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": vars(args), "in_flight": 1},
                 "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        codes = {"before": Path(tmp) / "before", "after": Path(tmp) / "after"}
        res["meta"]["code"] = {"before": freeze_code(codes["before"], args.before),
                               "after": freeze_code(codes["after"], "head")}
        for pruner in tqdm(PRUNERS, desc="pruners"):
            res["rows"].append({"pruner": pruner, **{side: measure(code, pruner, args.trials)
                                                     for side, code in codes.items()}})
    print(f"\nreport latency, service layer on SQLite, {args.trials} trials x up to 27 steps "
          f"(the last third's reports)")
    print(f"{'pruner':8s} {'before mean':>12s} {'p90':>7s} {'after mean':>11s} {'p90':>7s} {'reports':>8s}")
    for r in res["rows"]:
        b, a = r["before"], r["after"]
        print(f"{r['pruner']:8s} {b['mean_ms']:12.2f} {b['p90_ms']:7.2f} {a['mean_ms']:11.2f} {a['p90_ms']:7.2f} "
              f"{a['reports']:8d}")
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(res["rows"]))
    ax.bar([x - 0.2 for x in xs], [r["before"]["mean_ms"] for r in res["rows"]], 0.4, label="before")
    ax.bar([x + 0.2 for x in xs], [r["after"]["mean_ms"] for r in res["rows"]], 0.4, label="after")
    ax.set_xticks(list(xs), [r["pruner"] for r in res["rows"]])
    ax.set_ylabel("mean report latency (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
