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
from scipy.stats import binomtest

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
    # the frozen code first; then the checkout (benchmarks), then whatever the caller's path adds
    path = os.pathsep.join(p for p in (str(code), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
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
    better = (lambda c, b: c > b) if kind == "hypervolume" else (lambda c, b: c < b)
    wins = sum(better(fc[i], fb[i]) for i in ok)
    losses = sum(better(fb[i], fc[i]) for i in ok)
    return {"runs": len(shared), "identical": len(same), "differ": [str(k) for k in shared if k not in same],
            # the change against the base, run by run (same task, seed, trials in flight): wins / losses
            # and the two-sided binomial p of wins against losses
            "wins": wins, "losses": losses,
            "p": float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0,
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
    ap.add_argument("--base-code", help="a tree frozen beforehand (harness.servers.freeze_code) to run as the base: "
                    "for a machine without the repository's git history")
    ap.add_argument("--change-code", help="likewise, the change's frozen tree (default: this checkout)")
    args = ap.parse_args(argv)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    t0 = time.time()
    out: dict[str, Any] = {"meta": {"base": args.base, "seeds": args.seeds, "trials": args.trials,
                                    "suites": suites, "real_tasks": args.real_tasks,
                                    "method": "calibo (default settings)"}, "suites": {}}
    with tempfile.TemporaryDirectory(prefix="calibo-rev-") as tmp_name:
        tmp = Path(tmp_name)
        sides = {"base": args.base, "change": "worktree"}
        given = {"base": args.base_code, "change": args.change_code}
        code = {}
        for side, source in sides.items():
            if given[side]:
                code[side] = Path(given[side]).resolve()
                out["meta"][f"{side}_code"] = {"source": "frozen beforehand", "path": given[side]}
            else:
                code[side] = tmp / side / "code"
                out["meta"][f"{side}_code"] = freeze_code(code[side], source)
        for name in suites:
            suite, kind = SUITES[name]
            suite = [args.real_tasks if a == REAL else a for a in suite]
            got = {}
            for side in sides:
                path = tmp / side / (name.split()[0] + "_" + str(len(got)) + ".json")
                path.parent.mkdir(parents=True, exist_ok=True)
                print(f"== {name}: {side}", flush=True)
                _run_suite(code[side], suite, path, args.seeds, args.trials, args.workers)
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
    print_table(out)
    report.write_json(path, out)
    _plot(out, path.with_suffix(".png"))
    print(f"wrote {path} and {path.with_suffix('.png')}")


def print_table(out: dict[str, Any]) -> None:
    print(f"{'suite':32s} {'runs':>5s} {'identical':>10s} {'base mean':>12s} {'change mean':>12s} "
          f"{'change wins/losses':>19s} {'p':>6s}")
    for name, r in out["suites"].items():
        bm = "-" if r["base_mean"] is None else f"{r['base_mean']:.5g}"
        cm = "-" if r["change_mean"] is None else f"{r['change_mean']:.5g}"
        wl = f"{r['wins']}/{r['losses']}" if "wins" in r else "-"
        p = f"{r['p']:.3g}" if "p" in r else "-"
        print(f"{name:32s} {r['runs']:5d} {r['identical']:10d} {bm:>12s} {cm:>12s} {wl:>19s} {p:>6s}")


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
