"""Failures as information: how many trials crash, and the best value reached, with crash regions of
several shapes and sizes (and none), calibo against Optuna's TPE and GP samplers, SMAC3 and random
search, side by side in one run.

A real tuning run crashes: out of memory past some model size, a learning rate that diverges, a
combination a library refuses. Each task below is minimised and *raises* (or returns NaN) inside
its crash region; a crashed trial has no value. Every method is told of the crash in its own way:

* ``calibo``: the in-process ``Optimizer``, ``tell(params, state="failed")``: it learns where trials
  fail (``engine.failures``); ``calibo_ignore``: the same with ``learn_failures=False``, which only
  never proposes a failed configuration again (how calibo treated failures before);
* ``optuna_tpe`` / ``optuna_gp``: ``study.tell(trial, state=TrialState.FAIL)`` (what ``optimize``
  does with ``catch``);
* ``smac``: SMAC3's HPO facade, ``TrialValue(status=CRASHED, cost=...)`` charged a crash cost: the
  worst cost it has seen so far (SMAC's own default, an infinite cost, does not fit its model);
* ``random``: nothing to tell.

Tasks (``d`` parameters; the share of the space that crashes, measured on 20,000 uniform points, is
printed in the first table):

* ``branin_square`` (2): Branin, crashing in a square beside the minimum at (pi, 2.275).
* ``hartmann6_halfspace`` (6): Hartmann-6, crashing where x0 + x1 > 1.1 (two of six parameters).
* ``hartmann6_hole`` (6): Hartmann-6 with a crash hole (a box) next to its minimum.
* ``memory_limit`` (4): a synthetic network whose loss falls with width and depth and batch, and which
  runs out of memory when width^2 x depth x batch passes a limit: the best models sit at the edge.
* ``divergent_lr`` (4): a synthetic training run whose loss is best just below the learning rate at
  which it diverges (NaN); that rate falls with momentum and rises with warm-up.
* ``refused_combos`` (4): two categorical choices of which 5 of 12 combinations raise (a library
  refusing a solver / penalty pair), the best in an allowed one next to refused ones.
* ``branin_none``, ``hartmann6_none``: the same functions without crashes (the aim there: no change).

Reported per method: failures per run (mean, and per task), the mean rank of the best value at the
checkpoints (a run with no success yet ranks last; ties share), the mean best value per task, and
sign tests of calibo against each peer. With ``--in-flight K`` every method asks K trials, all are
evaluated, then all are told (a batch-synchronous crowd of K workers).

    python -m benchmarks.failures --workers 2                       # everything
    python -m benchmarks.failures --tasks branin_square --seeds 2 --trials 30

Writes benchmarks/results/failures.json and failures.png (``--out`` elsewhere).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import peers, report, runner  # noqa: E402
from benchmarks.harness.functions import branin, hartmann6  # noqa: E402

METHODS = ("calibo", "optuna_gp", "optuna_tpe", "smac", "random")
IGNORE = "calibo_ignore"  # calibo with learn_failures=False
AT = (20, 40, 60)


class Crash(RuntimeError):
    """The objective failed: no value."""


@dataclass(frozen=True)
class Task:
    name: str
    space: dict[str, dict[str, Any]]
    objective: Callable[[dict[str, Any]], float]  # raises Crash (or returns NaN) in the crash region
    crashes: bool = True


def _f(low: float, high: float, log: bool = False) -> dict[str, Any]:
    return {"type": "float", "low": low, "high": high, "log": log}


def _i(low: int, high: int, log: bool = False) -> dict[str, Any]:
    return {"type": "int", "low": low, "high": high, "log": log}


BRANIN = {"x1": _f(-5.0, 10.0), "x2": _f(0.0, 15.0)}
UNIT6 = {f"x{i}": _f(0.0, 1.0) for i in range(6)}


def branin_square(p: dict[str, Any]) -> float:
    if 3.4 <= p["x1"] <= 6.5 and p["x2"] <= 5.0:  # the minimum (pi, 2.275) lies 0.26 to its left
        raise Crash("square")
    return branin(p)


def hartmann6_halfspace(p: dict[str, Any]) -> float:
    if p["x0"] + p["x1"] > 1.1:
        raise Crash("half-space")
    return hartmann6(p)


def hartmann6_hole(p: dict[str, Any]) -> float:
    # the minimum is near (0.20, 0.15, 0.48, 0.28, 0.31, 0.66); the hole is a box beside it in x2, x5
    if 0.55 <= p["x2"] <= 0.95 and 0.3 <= p["x5"] <= 0.62:
        raise Crash("hole")
    return hartmann6(p)


MEMORY = {"width": _i(16, 2048, log=True), "depth": _i(1, 16), "batch": _i(8, 1024, log=True),
          "lr": _f(1e-4, 1.0, log=True)}


def memory_limit(p: dict[str, Any]) -> float:
    w, d, b, lr = p["width"], p["depth"], p["batch"], p["lr"]
    if w * w * d * b > 2.0e9:  # activations and weights past the device's memory
        raise Crash("out of memory")
    capacity = math.log2(w) + 1.5 * math.log2(d)
    best_lr = 3e-3 * math.sqrt(b / 64)  # the square-root scaling rule
    return (2.0 * math.exp(-0.35 * capacity) + 0.15 * (math.log10(lr) - math.log10(best_lr)) ** 2
            + 0.02 * abs(math.log2(b / 256)))


DIVERGENT = {"lr": _f(1e-5, 10.0, log=True), "momentum": _f(0.0, 0.99), "weight_decay": _f(1e-6, 1e-1, log=True),
             "warmup": _f(0.0, 0.3)}


def divergent_lr(p: dict[str, Any]) -> float:
    effective = p["lr"] / (1.0 - p["momentum"])  # the step size heavy-ball momentum amounts to
    limit = 0.5 * (1.0 + 8.0 * p["warmup"])  # warm-up lets a larger rate survive
    if effective > limit:
        return float("nan")  # diverged
    u = math.log10(effective / limit)  # <= 0; best at 0.7 of the limit, just below divergence
    return ((u + 0.15) ** 2 + 0.05 * (math.log10(p["weight_decay"]) + 4.0) ** 2 + 0.3 * p["warmup"]
            + 0.2 * (1 - p["momentum"]) ** 2)


REFUSED = {"solver": {"type": "categorical", "choices": ["lbfgs", "liblinear", "saga", "newton"]},
           "penalty": {"type": "categorical", "choices": ["l1", "l2", "elasticnet"]},
           "C": _f(1e-3, 1e3, log=True), "l1_ratio": _f(0.0, 1.0)}
_ALLOWED = {("lbfgs", "l2"), ("liblinear", "l1"), ("liblinear", "l2"), ("saga", "l1"), ("saga", "l2"),
            ("saga", "elasticnet"), ("newton", "l2")}
_BASE = {("lbfgs", "l2"): 0.30, ("liblinear", "l1"): 0.18, ("liblinear", "l2"): 0.28, ("saga", "l1"): 0.12,
         ("saga", "l2"): 0.27, ("saga", "elasticnet"): 0.05, ("newton", "l2"): 0.29}


def refused_combos(p: dict[str, Any]) -> float:
    pair = (p["solver"], p["penalty"])
    if pair not in _ALLOWED:
        raise Crash(f"solver {pair[0]} does not support penalty {pair[1]}")
    shape = 0.04 * (math.log10(p["C"]) - 0.5) ** 2
    if pair[1] == "elasticnet":
        shape += 0.3 * (p["l1_ratio"] - 0.35) ** 2
    return _BASE[pair] + shape


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("branin_square", BRANIN, branin_square),
    Task("hartmann6_halfspace", UNIT6, hartmann6_halfspace),
    Task("hartmann6_hole", UNIT6, hartmann6_hole),
    Task("memory_limit", MEMORY, memory_limit),
    Task("divergent_lr", DIVERGENT, divergent_lr),
    Task("refused_combos", REFUSED, refused_combos),
    Task("branin_none", BRANIN, branin, crashes=False),
    Task("hartmann6_none", UNIT6, hartmann6, crashes=False),
)}


def evaluate(task: Task, params: dict[str, Any]) -> float | None:
    """The objective's value, or None where the trial crashed (raised, or NaN)."""
    try:
        v = float(task.objective(params))
    except Crash:
        return None
    return None if math.isnan(v) else v


def crash_share(task: Task, n: int = 20_000, seed: int = 12345) -> float:
    return float(np.mean([evaluate(task, p) is None for p in peers.random_configs(task.space, n, seed)]))


# ------------------------------------------------------------------ methods
class _Smac(peers.SmacPeer):
    """SMAC3 told of a crash with a finite crash cost: the worst cost seen so far (plus a margin)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.costs: list[float] = []

    def tell(self, handle: Any, value: float | list[float]) -> None:
        self.costs.append(float(value))
        super().tell(handle, value)

    def fail(self, handle: Any) -> None:
        from smac.runhistory.dataclasses import TrialValue
        from smac.runner.abstract_runner import StatusType

        worst = max(self.costs) if self.costs else 1.0
        span = (max(self.costs) - min(self.costs)) if len(self.costs) > 1 else 1.0
        self.smac.tell(handle, TrialValue(cost=worst + 0.1 * span, status=StatusType.CRASHED))


def _fail(method: str, peer: Any, handle: Any) -> None:
    if peers.is_calibo(method) or method == IGNORE:
        peer.opt.tell(handle, state="failed")
    elif method.startswith("optuna_"):
        from optuna.trial import TrialState

        peer.study.tell(handle, state=TrialState.FAIL)
    elif method == "smac":
        peer.fail(handle)
    # random: nothing to tell


def run_one(method: str, task_name: str, trials: int, seed: int, in_flight: int = 1) -> dict[str, Any]:
    task = TASKS[task_name]
    if method == "smac":
        peer = _Smac(task.space, ["minimize"], seed, trials)
    elif method == IGNORE:
        peer = peers.make("calibo", task.space, ["minimize"], seed, trials)
        peer.opt.learn_failures = False
    else:
        peer = peers.make(method, task.space, ["minimize"], seed, trials)
    values: list[float | None] = []
    t0 = time.perf_counter()
    spent = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while len(values) < trials:
            batch = peer.ask(min(in_flight, trials - len(values)))
            results = []
            for handle, params in batch:
                t = time.perf_counter()
                results.append((handle, evaluate(task, params)))
                spent += time.perf_counter() - t
            for handle, v in results:
                values.append(v)
                if v is None:
                    _fail(method, peer, handle)
                else:
                    peer.tell(handle, v)
    wall = time.perf_counter() - t0
    return {"method": method, "task": task_name, "seed": seed, "in_flight": in_flight, "values": values,
            "wall_s": wall, "overhead_s": wall - spent}


# ----------------------------------------------------------------- analysis
def best_curve(values: list[float | None], trials: int) -> np.ndarray:
    """Best successful value after each trial (inf before the first success)."""
    best, out = math.inf, []
    for v in values[:trials]:
        if v is not None and v < best:
            best = v
        out.append(best)
    return np.array(out + [best] * (trials - len(out)))


def summarize(runs: list[dict[str, Any]], trials: int) -> dict[str, Any]:
    methods = [m for m in (*METHODS, IGNORE) if any(r["method"] == m for r in runs)]
    methods += sorted({r["method"] for r in runs} - set(methods))
    curves = {(r["method"], r["task"], r["seed"]): best_curve(r["values"], trials) for r in runs}
    fails = {(r["method"], r["task"], r["seed"]): sum(v is None for v in r["values"][:trials]) for r in runs}
    cells = sorted({(t, s) for _, t, s in curves if all((m, t, s) in curves for m in methods)})
    tasks = sorted({t for t, _ in cells}, key=list(TASKS).index)
    crashing = [t for t in tasks if TASKS[t].crashes]
    at = report.checkpoints(AT, trials)

    def ranks_over(cs: list[tuple]) -> dict[str, dict[str, float]]:
        r = report.mean_ranks(curves, methods, cs)
        return {m: {str(t): report.value_at(r[m], t) for t in at} for m in r}

    def mean(xs: list[float]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    return {
        "methods": methods, "tasks": tasks, "cells": len(cells), "trials": trials, "at": at,
        "crash_share": {t: crash_share(TASKS[t]) for t in tasks},
        "failures": {m: {t: mean([fails[(m, t, s)] for tt, s in cells if tt == t]) for t in tasks} for m in methods},
        "failures_crashing": {m: mean([fails[(m, t, s)] for t, s in cells if t in crashing]) for m in methods},
        "rank_at": ranks_over(cells),
        "rank_at_crashing": ranks_over([c for c in cells if c[0] in crashing]),
        "rank_at_none": ranks_over([c for c in cells if c[0] not in crashing]),
        "rank_curve": report.mean_ranks(curves, methods, cells),
        "best": {m: {t: mean([curves[(m, t, s)][-1] for tt, s in cells if tt == t]) for t in tasks} for m in methods},
        "sign_tests": {str(t): {f"calibo vs {b}": report.sign_test(curves, "calibo", b, cells, t)
                                for b in methods if b != "calibo"} for t in at if "calibo" in methods},
        "overhead_ms_per_trial": {m: 1000 * mean([r["overhead_s"] / max(len(r["values"]), 1)
                                                  for r in runs if r["method"] == m]) for m in methods},
    }


def print_tables(s: dict[str, Any], in_flight: int) -> None:
    ms = s["methods"]
    flight = f"{in_flight} in flight" if in_flight > 1 else "sequential"
    report.print_table(f"failures per run of {s['trials']} trials ({flight}; crash share of the space by "
                       "uniform sampling)", ["task", "crash share", *ms],
                       [[t, s["crash_share"][t], *(s["failures"][m][t] for m in ms)] for t in s["tasks"]]
                       + [["tasks with crashes", "", *(s["failures_crashing"][m] for m in ms)]], first=22, width=12)
    for key, what in (("rank_at", "all tasks"), ("rank_at_crashing", "tasks with crashes"),
                      ("rank_at_none", "tasks without")):
        if s[key]:
            report.print_table(f"mean rank of the best value, {what} (1 = best)",
                               ["method", *(f"@{t}" for t in s["at"])],
                               [[m, *(s[key][m][str(t)] for t in s["at"])] for m in ms], first=22, width=12)
    report.print_table(f"mean best value at {s['trials']} trials", ["task", *ms],
                       [[t, *(s["best"][m][t] for m in ms)] for t in s["tasks"]], first=22, width=12, digits=3)
    for t, tests in s["sign_tests"].items():
        for pair, r in tests.items():
            print(f"  @{t:<4} {pair:<24} {r['wins']:>3}/{r['losses']:<3}/{r['ties']:<3} p={r['p']:.3g}")


def plot(s: dict[str, Any], path: Path, in_flight: int) -> None:
    fig, axes = report.figure(1, 2, size=(13, 4.6))
    a, b = axes[0]
    col = report.colors(s["methods"])
    for m, r in s["rank_curve"].items():
        a.plot(np.arange(1, len(r) + 1), r, label=m, color=col[m], lw=2.4 if m == "calibo" else 1.2)
    a.set_title(f"mean rank of the best value ({s['cells']} task x seed cells, {in_flight} in flight)", fontsize=9)
    a.set_xlabel("trial")
    a.legend(fontsize=8)
    crashing = [t for t in s["tasks"] if s["crash_share"][t] > 0]
    width = 0.8 / len(s["methods"])
    for i, m in enumerate(s["methods"]):
        b.bar(np.arange(len(crashing)) + i * width, [s["failures"][m][t] for t in crashing], width, label=m,
              color=col[m])
    b.set_xticks(np.arange(len(crashing)) + 0.4, crashing, rotation=20, fontsize=8)
    b.set_title(f"failed trials per run of {s['trials']}", fontsize=9)
    b.legend(fontsize=8)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--in-flight", type=int, default=1, help="trials asked together, then told together")
    runner.add_run_arguments(ap, report.RESULTS / "failures.json", tasks=",".join(TASKS), seeds=5, trials=60)
    args = ap.parse_args(argv)
    methods = peers.parse_methods(args.methods)
    peers.check_methods([m for m in methods if m != IGNORE])
    tasks = args.tasks.split(",")
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise SystemExit(f"unknown tasks {unknown}: use {', '.join(TASKS)}")
    jobs = [(m, t, args.trials, s, args.in_flight) for s in runner.seeds_of(args) for t in tasks for m in methods]
    jobs.sort(key=lambda j: (j[0] not in ("optuna_gp", "smac") and not peers.is_calibo(j[0]), j))
    t0 = time.time()
    runs, meta = runner.collect(args, jobs, run_one, lambda r: (r["method"], r["task"], r["seed"]),
                                lambda j: (j[0], j[1], j[3]), "failure runs",
                                {"tasks": tasks, "seeds": args.seeds, "seed_offset": args.seed_offset,
                                 "trials": args.trials, "in_flight": args.in_flight, "methods": methods})
    summary = summarize(runs, meta["trials"])
    print_tables(summary, args.in_flight)
    meta["wall_seconds"] = time.time() - t0
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs})
    plot(summary, out.with_suffix(".png"), args.in_flight)
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
