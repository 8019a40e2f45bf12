"""Outcome constraints: calibo against Optuna's GPSampler and TPESampler with ``constraints_func``, and
random search, on constrained problems; the best *feasible* value at 25, 50 and 100 trials.

Problems (each minimised, feasible when every constraint value is <= 0):

* ``gardner``: Gardner et al. (2014), "Bayesian optimization with inequality constraints", the toy
  problem: min cos(2x) cos(y) + sin(x) subject to cos(x) cos(y) - sin(x) sin(y) <= 0.5 on [0, 6]^2.
* ``branin_disk``: Branin restricted to the disk (x1 - 2.5)^2 + (x2 - 7.5)^2 <= 50, which keeps out two
  of its three global minima.
* ``welded_beam``: the welded beam design problem (Coello 2000): cost of a welded beam, 4 variables,
  seven constraints on shear stress, bending stress, geometry, end deflection and buckling load (each
  normalised by its bound); best known cost about 1.7249.
* ``pressure_vessel``: the pressure vessel design problem (Sandgren 1990), 4 variables, 4 constraints
  (normalised); best known cost about 5885.3 with continuous thicknesses.
* ``rf_size``: a random forest on breast_cancer, 3-fold CV error, under a model-size limit: at most
  2,000 tree nodes in all when fitted on the whole dataset (deterministic, random_state 0).

Every method runs every (problem, seed) for ``--trials`` trials, sequentially, side by side in one
run: calibo (the in-process Optimizer with the problem's constraints), Optuna GPSampler and
TPESampler with ``constraints_func``, and random search. Reported: mean rank of the best feasible
value (a run with no feasible trial yet ranks last; ties share), mean best feasible value per problem,
the fraction of suggestions after the first 15 that were feasible, and sign tests of calibo against
each peer at 100 trials.

    python -m benchmarks.constrained --workers 2                   # everything (about 20 minutes)
    python -m benchmarks.constrained --problems gardner --seeds 2 --trials 40

Writes benchmarks/results/constrained.json and constrained.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import cache  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report, runner  # noqa: E402
from benchmarks.harness.functions import branin  # noqa: E402
from benchmarks.harness.peers import optuna_params, random_configs  # noqa: E402

METHODS = ("calibo", "optuna_gp", "optuna_tpe", "random")
AT = (25, 50, 100)
WARM = 15  # suggestions after this many count towards the feasible fraction


@dataclass(frozen=True)
class Problem:
    name: str
    space: dict[str, dict[str, Any]]
    evaluate: Callable[[dict[str, Any]], tuple[float, list[float]]]  # -> (objective, constraints)
    n_constraints: int
    best_known: float | None = None


def _f(low: float, high: float, log: bool = False) -> dict[str, Any]:
    return {"type": "float", "low": low, "high": high, "log": log}


def gardner(p: dict[str, Any]) -> tuple[float, list[float]]:
    x, y = p["x"], p["y"]
    return math.cos(2 * x) * math.cos(y) + math.sin(x), [math.cos(x) * math.cos(y) - math.sin(x) * math.sin(y) - 0.5]


def branin_disk(p: dict[str, Any]) -> tuple[float, list[float]]:
    return branin(p), [((p["x1"] - 2.5) ** 2 + (p["x2"] - 7.5) ** 2 - 50.0) / 50.0]


def welded_beam(p: dict[str, Any]) -> tuple[float, list[float]]:
    h, l, t, b = p["h"], p["l"], p["t"], p["b"]  # noqa: E741 - the problem's own names
    P, L, E, G = 6000.0, 14.0, 30e6, 12e6
    tau_max, sigma_max, delta_max = 13600.0, 30000.0, 0.25
    tau1 = P / (math.sqrt(2) * h * l)
    M = P * (L + l / 2)
    R = math.sqrt(l**2 / 4 + ((h + t) / 2) ** 2)
    J = 2 * (math.sqrt(2) * h * l * (l**2 / 12 + ((h + t) / 2) ** 2))
    tau2 = M * R / J
    tau = math.sqrt(tau1**2 + 2 * tau1 * tau2 * l / (2 * R) + tau2**2)
    sigma = 6 * P * L / (b * t**2)
    delta = 4 * P * L**3 / (E * t**3 * b)
    pc = 4.013 * E * math.sqrt(t**2 * b**6 / 36) / L**2 * (1 - t / (2 * L) * math.sqrt(E / (4 * G)))
    cost = 1.10471 * h**2 * l + 0.04811 * t * b * (14.0 + l)
    return cost, [tau / tau_max - 1, sigma / sigma_max - 1, (h - b) / 2.0,
                  (0.10471 * h**2 + 0.04811 * t * b * (14 + l)) / 5.0 - 1, (0.125 - h) / 0.125,
                  delta / delta_max - 1, 1 - pc / P]


def pressure_vessel(p: dict[str, Any]) -> tuple[float, list[float]]:
    ts, th, r, length = p["ts"], p["th"], p["r"], p["l"]
    cost = 0.6224 * ts * r * length + 1.7781 * th * r**2 + 3.1661 * ts**2 * length + 19.84 * ts**2 * r
    volume = math.pi * r**2 * length + 4.0 / 3.0 * math.pi * r**3
    return cost, [(0.0193 * r - ts) / 0.1, (0.00954 * r - th) / 0.1, 1.0 - volume / 1_296_000.0, length / 240.0 - 1]


@cache
def _breast_cancer():
    from sklearn.datasets import load_breast_cancer

    return load_breast_cancer(return_X_y=True)


def rf_size(p: dict[str, Any]) -> tuple[float, list[float]]:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    X, y = _breast_cancer()

    def model():
        return RandomForestClassifier(n_estimators=p["n_estimators"], max_depth=p["max_depth"],
                                      min_samples_leaf=p["min_samples_leaf"], max_features=p["max_features"],
                                      n_jobs=1, random_state=0)

    err = 1.0 - float(cross_val_score(model(), X, y, cv=StratifiedKFold(3, shuffle=True, random_state=0)).mean())
    nodes = sum(est.tree_.node_count for est in model().fit(X, y).estimators_)
    return err, [nodes / 2000.0 - 1.0]


PROBLEMS: dict[str, Problem] = {p.name: p for p in (
    Problem("gardner", {"x": _f(0.0, 6.0), "y": _f(0.0, 6.0)}, gardner, 1),
    Problem("branin_disk", {"x1": _f(-5.0, 10.0), "x2": _f(0.0, 15.0)}, branin_disk, 1, 0.397887),
    Problem("welded_beam", {"h": _f(0.1, 2.0), "l": _f(0.1, 10.0), "t": _f(0.1, 10.0), "b": _f(0.1, 2.0)},
            welded_beam, 7, 1.7249),
    Problem("pressure_vessel", {"ts": _f(0.0625, 6.1875), "th": _f(0.0625, 6.1875), "r": _f(10.0, 200.0),
                                "l": _f(10.0, 200.0)}, pressure_vessel, 4, 5885.3),
    Problem("rf_size", {"n_estimators": {"type": "int", "low": 5, "high": 150, "log": True},
                        "max_depth": {"type": "int", "low": 2, "high": 20},
                        "min_samples_leaf": {"type": "int", "low": 1, "high": 30, "log": True},
                        "max_features": _f(0.05, 1.0)}, rf_size, 1),
)}


# ------------------------------------------------------------------ methods
def run_one(method: str, problem: str, trials: int, seed: int) -> dict[str, Any]:
    prob = PROBLEMS[problem]
    out: list[tuple[float, list[float]]] = []
    t0 = time.perf_counter()
    eval_s = 0.0

    def evaluate(params: dict[str, Any]) -> tuple[float, list[float]]:
        nonlocal eval_s
        t = time.perf_counter()
        v, c = prob.evaluate(params)
        eval_s += time.perf_counter() - t
        out.append((float(v), [float(x) for x in c]))
        return v, c

    if method == "calibo":
        from calibo.engine import Optimizer

        opt = Optimizer(prob.space, seed=seed, constraints=[f"c{j}" for j in range(prob.n_constraints)])
        for _ in range(trials):
            s = opt.ask()[0]
            v, c = evaluate(s.params)
            opt.tell(s.params, v, constraints=c)
    elif method in ("optuna_gp", "optuna_tpe"):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)

        def constraints_func(trial):
            return trial.user_attrs["constraints"]

        kw = {"seed": seed, "constraints_func": constraints_func}
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # constraints_func is deprecated in favour of set_constraint
            sampler = (optuna.samplers.GPSampler(**kw) if method == "optuna_gp"
                       else optuna.samplers.TPESampler(**kw))
        study = optuna.create_study(sampler=sampler)

        def objective(trial) -> float:
            v, c = evaluate(optuna_params(trial, prob.space))
            trial.set_user_attr("constraints", c)
            return v

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.optimize(objective, n_trials=trials)
    elif method == "random":
        for p in random_configs(prob.space, trials, seed):
            evaluate(p)
    else:
        raise ValueError(f"unknown method {method!r}")
    wall = time.perf_counter() - t0
    return {"method": method, "problem": problem, "seed": seed, "values": [v for v, _ in out],
            "constraints": [c for _, c in out], "wall_s": wall, "overhead_s": wall - eval_s}


# ----------------------------------------------------------------- analysis
def best_feasible(run: dict[str, Any], trials: int) -> np.ndarray:
    """Best feasible value after each trial (inf before the first feasible one)."""
    best, out = math.inf, []
    for v, c in zip(run["values"][:trials], run["constraints"][:trials], strict=True):
        if all(x <= 0 for x in c) and v < best:
            best = v
        out.append(best)
    out += [best] * (trials - len(out))
    return np.array(out)


def summarize(runs: list[dict[str, Any]], trials: int) -> dict[str, Any]:
    from scipy.stats import binomtest, rankdata

    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    curves = {(r["method"], r["problem"], r["seed"]): best_feasible(r, trials) for r in runs}
    cells = sorted({(p, s) for _, p, s in curves if all((m, p, s) in curves for m in methods)})
    ranks = {m: np.zeros(trials) for m in methods}
    for p, s in cells:
        mat = np.stack([curves[(m, p, s)] for m in methods])
        r = np.apply_along_axis(rankdata, 0, mat)
        for i, m in enumerate(methods):
            ranks[m] += r[i]
    ranks = {m: (v / max(len(cells), 1)).tolist() for m, v in ranks.items()}
    problems = sorted({p for p, _ in cells})
    best = {m: {p: float(np.mean([curves[(m, p, s)][-1] for pp, s in cells if pp == p])) for p in problems}
            for m in methods}
    feasible = {m: float(np.mean([np.mean([all(x <= 0 for x in c) for c in r["constraints"][WARM:trials]])
                                  for r in runs if r["method"] == m])) for m in methods}
    feasible_by = {m: {p: float(np.mean([np.mean([all(x <= 0 for x in c) for c in r["constraints"][WARM:trials]])
                                         for r in runs if r["method"] == m and r["problem"] == p]))
                       for p in problems} for m in methods}
    signs = {}
    for t in AT:
        if t > trials:
            continue
        for b in methods[1:]:
            pairs = [(curves[("calibo", p, s)][t - 1], curves[(b, p, s)][t - 1]) for p, s in cells]
            w = int(sum(x < y for x, y in pairs))
            lo = int(sum(x > y for x, y in pairs))
            signs.setdefault(str(t), {})[f"calibo vs {b}"] = {
                "wins": w, "losses": lo, "ties": len(pairs) - w - lo,
                "p": float(binomtest(w, w + lo).pvalue) if w + lo else 1.0}
    return {"methods": methods, "problems": problems, "cells": len(cells), "trials": trials,
            "rank_curve": ranks,
            "rank_at": {m: {str(t): r[t - 1] for t in AT if t <= trials} for m, r in ranks.items()},
            "mean_best_feasible": best, "feasible_fraction": feasible, "feasible_fraction_by_problem": feasible_by,
            "sign_tests": signs,
            "overhead_ms_per_trial": {m: 1000 * float(np.mean([r["overhead_s"] / max(len(r["values"]), 1)
                                                                for r in runs if r["method"] == m])) for m in methods}}


def print_tables(s: dict[str, Any]) -> None:
    at = [t for t in AT if t <= s["trials"]]
    print(f"\nmean rank of the best feasible value over {s['cells']} problem x seed cells (1 = best)")
    print(f"{'method':<14}" + "".join(f"{'@' + str(t):>8}" for t in at) + f"{'feasible':>10}{'ms/trial':>10}")
    for m in sorted(s["methods"], key=lambda m: s["rank_at"][m][str(at[-1])]):
        print(f"{m:<14}" + "".join(f"{s['rank_at'][m][str(t)]:>8.2f}" for t in at)
              + f"{s['feasible_fraction'][m]:>10.2f}{s['overhead_ms_per_trial'][m]:>10.1f}")
    print(f"\nmean best feasible value at {s['trials']} trials (inf: none feasible in some run)")
    print(f"{'problem':<18}" + "".join(f"{m:>14}" for m in s["methods"]))
    for p in s["problems"]:
        print(f"{p:<18}" + "".join(f"{s['mean_best_feasible'][m][p]:>14.5g}" for m in s["methods"]))
    print("\nsign tests (wins/losses/ties over problem x seed, two-sided binomial p)")
    for t, tests in s["sign_tests"].items():
        for pair, r in tests.items():
            print(f"  @{t:<4} {pair:<24} {r['wins']:>3}/{r['losses']:<3}/{r['ties']:<3} p={r['p']:.3g}")


def plot(s: dict[str, Any], path: Path) -> None:
    fig, axes = report.figure(1, 2, figsize=(13, 4.6))
    a, b = axes[0]
    for m, r in s["rank_curve"].items():
        a.plot(np.arange(1, len(r) + 1), r, label=m, lw=2.4 if m == "calibo" else 1.2)
    a.set_title(f"constrained problems: mean rank of the best feasible value ({s['cells']} cells)", fontsize=9)
    a.set_xlabel("trial")
    a.legend(fontsize=8)
    width = 0.8 / len(s["methods"])
    for i, m in enumerate(s["methods"]):
        b.bar(np.arange(len(s["problems"])) + i * width,
              [s["feasible_fraction_by_problem"][m][p] for p in s["problems"]], width, label=m)
    b.set_xticks(np.arange(len(s["problems"])) + 0.4, s["problems"], rotation=20, fontsize=8)
    b.set_title(f"fraction of feasible suggestions after the first {WARM}", fontsize=9)
    b.legend(fontsize=8)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    runner.add_run_arguments(ap, report.RESULTS / "constrained.json", seeds=5)
    args = ap.parse_args(argv)
    problems = args.problems.split(",")
    jobs = [(m, p, args.trials, s) for s in runner.seeds_of(args) for p in problems for m in args.methods.split(",")]
    jobs.sort(key=lambda j: (j[0] != "optuna_gp", j[1] != "rf_size", j))
    t0 = time.time()
    runs, meta = runner.collect(args, jobs, run_one, lambda r: (r["method"], r["problem"], r["seed"]),
                                lambda j: (j[0], j[1], j[3]), "constrained runs",
                                {"problems": problems, "seeds": args.seeds, "seed_offset": args.seed_offset,
                                 "trials": args.trials, "in_flight": 1})
    summary = summarize(runs, meta["trials"])
    print_tables(summary)
    meta["wall_seconds"] = time.time() - t0
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs})
    plot(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
