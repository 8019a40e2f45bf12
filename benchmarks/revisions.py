"""The default's search quality at two revisions, side by side: a refactor checked against its base.

Runs calibo's default through the quality suites (``search``, ``real_tuning``, ``multi_objective``)
twice in one invocation: on this checkout's code and on ``--base`` (a git revision), each frozen as
the ``calibo`` namespace (``harness.servers.freeze_code``) so that edits made meanwhile reach
neither. The suites, tasks and seeds are this checkout's; only the engine differs. Prints, per
suite, the mean final best (or hypervolume) of each side and how many runs gave identical values
trial by trial; writes ``benchmarks/results/revisions.json`` and ``.png``.

    python -m benchmarks.revisions --base 669d257 --seeds 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import report
from benchmarks.harness.report import read_json
from benchmarks.harness.servers import ROOT, freeze_code

# the real-tuning suite's quicker models (a plateau task among them): its forests and boosted models
# take most of its hours and test the same engine
REAL = "dt_breast_cancer,svc_breast_cancer,knn_iris,enet_poly_diabetes,sgd_wine"
# (suite, its arguments, what the runs' final value is): calibo's default only
SUITES: dict[str, tuple[list[str], str]] = {
    "search (sequential)": (["benchmarks.search", "--no-timings"], "best"),
    "real_tuning (sequential)": (["benchmarks.real_tuning", "--in-flight", "1", "--tasks", REAL], "best"),
    "real_tuning (8 in flight)": (["benchmarks.real_tuning", "--in-flight", "8", "--tasks", REAL], "best"),
    "multi_objective (sequential)": (["benchmarks.multi_objective", "--in-flight", "1"], "hypervolume"),
    "multi_objective (8 in flight)": (["benchmarks.multi_objective", "--in-flight", "8"], "hypervolume"),
}
# what a run measured of the machine rather than of the search: not compared
TIMING_KEYS = ("wall_s", "cpu_s", "overhead_s", "timings", "objective_s", "fit_s", "select_s", "warnings")


def _run_suite(code: Path, suite: list[str], out: Path, seeds: int, trials: int | None, workers: int) -> None:
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", *suite, "--methods", "calibo", "--seeds", str(seeds), "--workers", str(workers),
           "--out", str(out)]
    if trials is not None:
        cmd += ["--trials", str(trials)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def _comparable(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in TIMING_KEYS}


def _final(run: dict[str, Any], kind: str) -> float | None:
    """A run's final best (minimised), or the hypervolume of all its trials."""
    if kind == "hypervolume":
        from benchmarks.multi_objective import hv_curve

        return float(hv_curve(run)[-1])
    direction = "maximize" if run.get("direction") == "maximize" else "minimize"
    return float(report.best_so_far(run, direction, report.n_values(run))[-1])


def compare(base: dict[str, Any], change: dict[str, Any], kind: str) -> dict[str, Any]:
    def key(r: dict[str, Any]) -> tuple:
        return (r.get("task") or r.get("problem"), r.get("seed"), r.get("in_flight", r.get("k")))

    b = {key(r): r for r in base["runs"]}
    c = {key(r): r for r in change["runs"]}
    shared = sorted(set(b) & set(c), key=str)
    same = [k for k in shared if _comparable(b[k]) == _comparable(c[k])]
    fb = [_final(b[k], kind) for k in shared]
    fc = [_final(c[k], kind) for k in shared]
    ok = [i for i, (x, y) in enumerate(zip(fb, fc, strict=True)) if x is not None and y is not None]
    return {"runs": len(shared), "identical": len(same), "differ": [str(k) for k in shared if k not in same],
            "base_final": [fb[i] for i in ok], "change_final": [fc[i] for i in ok],
            "base_mean": float(np.mean([fb[i] for i in ok])) if ok else None,
            "change_mean": float(np.mean([fc[i] for i in ok])) if ok else None}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision to compare this checkout's engine with")
    ap.add_argument("--suites", default=",".join(SUITES), help="comma-separated names of SUITES")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--trials", type=int, default=None, help="default: each suite's own")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--real-tasks", default=REAL, help="the real-tuning suite's tasks to run (comma-separated)")
    ap.add_argument("--out", default=str(report.RESULTS / "revisions.json"))
    args = ap.parse_args(argv)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    t0 = time.time()
    out: dict[str, Any] = {"meta": {"base": args.base, "seeds": args.seeds, "trials": args.trials,
                                    "suites": suites, "real_tasks": args.real_tasks,
                                    "method": "calibo (default settings)"}, "suites": {}}
    with tempfile.TemporaryDirectory(prefix="calibo-rev-") as tmp_name:
        tmp = Path(tmp_name)
        sides = {"base": args.base, "change": "worktree"}
        for side, source in sides.items():
            out["meta"][f"{side}_code"] = freeze_code(tmp / side / "code", source)
        for name in suites:
            suite, kind = SUITES[name]
            suite = [args.real_tasks if a == REAL else a for a in suite]
            got = {}
            for side in sides:
                path = tmp / side / (name.split()[0] + "_" + str(len(got)) + ".json")
                print(f"== {name}: {side}", flush=True)
                _run_suite(tmp / side / "code", suite, path, args.seeds, args.trials, args.workers)
                got[side] = read_json(path)
            out["suites"][name] = compare(got["base"], got["change"], kind) | {"final": kind}
    out["meta"]["wall_seconds"] = time.time() - t0
    path = Path(args.out)
    if path.exists():  # suites run before (with the same base) that this invocation left out stay
        before = read_json(path)
        if before.get("meta", {}).get("base") == args.base:
            out["suites"] = {**{k: v for k, v in before.get("suites", {}).items() if k not in out["suites"]},
                             **out["suites"]}
            out["suites"] = {k: out["suites"][k] for k in SUITES if k in out["suites"]}
    print(f"\ncalibo's default at {args.base} (base) and in this checkout (change), {args.seeds} seeds per task;"
          " runs identical in every value but timings")
    print(f"{'suite':32s} {'runs':>5s} {'identical':>10s} {'base mean':>12s} {'change mean':>12s}")
    for name, r in out["suites"].items():
        bm = "-" if r["base_mean"] is None else f"{r['base_mean']:.5g}"
        cm = "-" if r["change_mean"] is None else f"{r['change_mean']:.5g}"
        print(f"{name:32s} {r['runs']:5d} {r['identical']:10d} {bm:>12s} {cm:>12s}")
    report.write_json(path, out)
    _plot(out, path.with_suffix(".png"))
    print(f"wrote {path} and {path.with_suffix('.png')}")


def _plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(out["suites"])
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        r = out["suites"][name]
        x, y = np.asarray(r["base_final"], float), np.asarray(r["change_final"], float)
        if x.size:
            lo, hi = float(min(x.min(), y.min())), float(max(x.max(), y.max()))
            ax.plot([lo, hi], [lo, hi], color="0.7", lw=1)
            ax.scatter(x, y, s=14)
        ax.set_title(f"{name}\n{r['identical']}/{r['runs']} runs identical", fontsize=8)
        ax.set_xlabel(f"base ({out['meta']['base']}): final {r['final']}", fontsize=7)
        ax.set_ylabel("this checkout", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.suptitle("calibo's default, sequential unless said (8 in flight)", fontsize=9)
    fig.tight_layout()
    report.save_figure(fig, path)


if __name__ == "__main__":
    main()
