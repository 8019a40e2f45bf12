"""Multi-objective search: calibo against Optuna's NSGAIISampler, TPESampler and GPSampler (log-EHVI)
and random search; the hypervolume of the front after 25, 50 and 100 completed trials (200 for
DTLZ2), sequentially and with trials in flight.

Problems (every objective minimised; the reference point of each is fixed, so hypervolumes compare):

* ``zdt1``, ``zdt2``, ``zdt3``: Zitzler, Deb and Thiele (2000), 6 variables in [0, 1]; reference
  (1.1, 10): the worst ``g`` of a 6-D ZDT is 10.
* ``dtlz2``: Deb et al. (2002), 3 objectives, 6 variables in [0, 1], 200 trials; reference (2, 2, 2).
* ``branin_currin``: Branin and Currin's exponential function on [0, 1]^2 (Belakaria et al. 2019,
  BoTorch's test problem); reference (18, 6).
* ``mlp_size``: an MLP (60 epochs at most) on breast_cancer, standardised, 3-fold CV error against
  the log10 of its parameter count: hidden layers 1-3 of 4-128 units, L2 penalty, learning rate;
  reference (0.5, 5).
* ``gbm_time``: scikit-learn's HistGradientBoostingClassifier on breast_cancer, 3-fold CV error
  against the CPU seconds its three fits took on one thread (``OMP_NUM_THREADS=1``; a measured,
  hence noisy, objective); reference (0.15, 0.5).

Every method runs every (problem, seed) for the problem's trials, side by side in one run, with
``--in-flight`` K trials running at once on the harness's virtual clock (``runner.simulate``)
(K = 1: sequential). calibo is the in-process Optimizer with the problem's directions (EHVI for two
objectives, ParEGO for three); Optuna's samplers get the same directions (TPE with constant_liar).
Hypervolume is moocore's, on the values of the first t completed trials.

Reported per K: mean rank of the hypervolume (1 = largest; ties share) over problems x seeds at each
checkpoint, per-problem mean hypervolume at the end, sign tests of calibo against each peer at 50
and 100 trials (wins / losses / ties over problem x seed, two-sided binomial p), and calibo's
per-objective calibration after conformalization: for each objective, the mean over interval pairs
of |empirical coverage - nominal| over the trials predicted by a conformalized model.

    python -m benchmarks.multi_objective --workers 2                 # everything
    python -m benchmarks.multi_objective --problems zdt1 --seeds 2 --in-flight 1 --trials 40

Writes benchmarks/results/multi_objective.json and multi_objective.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from functools import cache  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import peers, report, runner  # noqa: E402

METHODS = ("calibo", "optuna_gp", "optuna_tpe", "optuna_nsga2", "random")
AT = (25, 50, 100, 200)
SIGN_AT = (50, 100)


@dataclass(frozen=True)
class Problem:
    name: str
    space: dict[str, dict[str, Any]]
    objective: Callable[[dict[str, Any]], list[float]]
    ref: tuple[float, ...]
    trials: int = 100
    directions: tuple[str, ...] = field(default=())

    @property
    def m(self) -> int:
        return len(self.ref)

    def dirs(self) -> list[str]:
        return list(self.directions or ("minimize",) * self.m)


def _unit(n: int) -> dict[str, dict[str, Any]]:
    return {f"x{i}": {"type": "float", "low": 0.0, "high": 1.0} for i in range(n)}


def _x(p: dict[str, Any]) -> np.ndarray:
    return np.array([p[f"x{i}"] for i in range(len(p))], dtype=float)


def zdt(kind: int) -> Callable[[dict[str, Any]], list[float]]:
    def f(p: dict[str, Any]) -> list[float]:
        x = _x(p)
        g = 1.0 + 9.0 * x[1:].mean()
        r = x[0] / g
        h = {1: 1.0 - math.sqrt(r), 2: 1.0 - r * r, 3: 1.0 - math.sqrt(r) - r * math.sin(10 * math.pi * x[0])}[kind]
        return [float(x[0]), float(g * h)]
    return f


def dtlz2(p: dict[str, Any]) -> list[float]:
    x = _x(p)
    g = float(np.sum((x[2:] - 0.5) ** 2))
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b), (1 + g) * math.sin(a)]


def branin_currin(p: dict[str, Any]) -> list[float]:
    u, v = p["x0"], p["x1"]
    x1, x2 = 15 * u - 5, 15 * v
    b = ((x2 - 5.1 / (4 * math.pi**2) * x1**2 + 5 / math.pi * x1 - 6) ** 2
         + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x1) + 10)
    v = max(v, 1e-10)
    c = ((1 - math.exp(-1 / (2 * v))) * (2300 * u**3 + 1900 * u**2 + 2092 * u + 60)
         / (100 * u**3 + 500 * u**2 + 4 * u + 20))
    return [b, c]


@cache
def _data(name: str):
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import StratifiedKFold

    X, y = (load_breast_cancer if name == "breast_cancer" else load_digits)(return_X_y=True)
    return X, y, list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))


def mlp_size(p: dict[str, Any]) -> list[float]:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y, folds = _data("breast_cancer")
    layers = tuple([int(p["units"])] * int(p["layers"]))
    errs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for tr, te in folds:
            model = make_pipeline(StandardScaler(), MLPClassifier(layers, alpha=p["alpha"], learning_rate_init=p["lr"],
                                                                  max_iter=60, random_state=0))
            errs.append(1.0 - model.fit(X[tr], y[tr]).score(X[te], y[te]))
    sizes = (X.shape[1], *layers, 1)
    n_params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    return [float(np.mean(errs)), math.log10(n_params)]


def gbm_time(p: dict[str, Any]) -> list[float]:
    from sklearn.ensemble import HistGradientBoostingClassifier

    X, y, folds = _data("breast_cancer")
    errs, seconds = [], 0.0
    for tr, te in folds:
        model = HistGradientBoostingClassifier(max_iter=int(p["max_iter"]), max_leaf_nodes=int(p["max_leaf_nodes"]),
                                               learning_rate=p["learning_rate"], max_bins=int(p["max_bins"]),
                                               early_stopping=False, random_state=0)
        t = time.process_time()
        model.fit(X[tr], y[tr])
        seconds += time.process_time() - t
        errs.append(1.0 - model.score(X[te], y[te]))
    return [float(np.mean(errs)), seconds]


PROBLEMS: dict[str, Problem] = {
    "zdt1": Problem("zdt1", _unit(6), zdt(1), (1.1, 10.0)),
    "zdt2": Problem("zdt2", _unit(6), zdt(2), (1.1, 10.0)),
    "zdt3": Problem("zdt3", _unit(6), zdt(3), (1.1, 10.0)),
    "dtlz2": Problem("dtlz2", _unit(6), dtlz2, (2.0, 2.0, 2.0), trials=200),
    "branin_currin": Problem("branin_currin", _unit(2), branin_currin, (18.0, 6.0)),
    "mlp_size": Problem("mlp_size", {
        "layers": {"type": "int", "low": 1, "high": 3},
        "units": {"type": "int", "low": 4, "high": 128, "log": True},
        "alpha": {"type": "float", "low": 1e-6, "high": 1.0, "log": True},
        "lr": {"type": "float", "low": 1e-4, "high": 0.1, "log": True}}, mlp_size, (0.5, 5.0)),
    "gbm_time": Problem("gbm_time", {
        "max_iter": {"type": "int", "low": 5, "high": 150, "log": True},
        "max_leaf_nodes": {"type": "int", "low": 4, "high": 64, "log": True},
        "learning_rate": {"type": "float", "low": 0.01, "high": 0.5, "log": True},
        "max_bins": {"type": "int", "low": 16, "high": 255, "log": True}}, gbm_time, (0.15, 0.5)),
}


# ------------------------------------------------------------------ runs
def calibration(records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Per objective: coverage per interval pair over the trials a conformalized model predicted, and
    the mean |coverage - nominal| over the pairs."""
    from calibo.engine import metrics as M

    recs = [r["objectives"] for r in records if r.get("objectives") and r["objectives"][0]["method"] != "raw"]
    if not recs:
        return None
    out = []
    for j in range(len(recs[0])):
        cov = np.mean([r[j]["covered"] for r in recs], axis=0)
        nominal = np.asarray(recs[0][j]["coverage"])
        out.append({"n": len(recs), "coverage": cov.tolist(), "nominal": nominal.tolist(),
                    "gap": M.coverage_gap(cov, nominal)})
    return out


def make(method: str, prob: Problem, seed: int) -> peers.Peer:
    """calibo (``calibo:key=value[,key=value]``: engine settings), Optuna's GP / TPE (constant liar) /
    NSGA-II, or random search, with the problem's directions."""
    return peers.make(method, prob.space, prob.dirs(), seed, prob.trials)


def run_one(method: str, problem: str, k: int, seed: int, trials: int | None = None) -> dict[str, Any]:
    prob = PROBLEMS[problem]
    n = trials or prob.trials
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = make(method, prob, seed)
        t0 = time.perf_counter()
        sim = runner.simulate(opt, prob.objective, runner.durations(problem, seed, k, n), k, n)
    wall = time.perf_counter() - t0
    extra = {"calibration": calibration(opt.opt.records)} if isinstance(opt, peers.CaliboPeer) else {}
    return {"method": method, "problem": problem, "seed": seed, "k": k, "trials": n, **sim, "wall_s": wall,
            "overhead_s": wall - sim["objective_s"], **extra}


# ------------------------------------------------------------------ analysis
def hv_curve(run: dict[str, Any]) -> np.ndarray:
    """The hypervolume of the first t completed trials, t = 1..n (moocore; minimised values)."""
    import moocore

    prob = PROBLEMS[run["problem"]]
    signs = np.array([1.0 if d == "minimize" else -1.0 for d in prob.dirs()])
    ref = np.asarray(prob.ref, dtype=float)
    out = np.zeros(report.n_values(run))
    front = np.empty((0, prob.m))
    hv = 0.0
    points = dict(report.front_points(run))  # a point no earlier one dominated (the rest add nothing)
    for t in range(len(out)):
        if t in points:
            both = np.vstack([front, np.asarray(points[t], dtype=float)[None, :] * signs])
            front = both[moocore.is_nondominated(both)]
            inside = front[np.all(front < ref, axis=1)]
            hv = float(moocore.hypervolume(inside, ref=ref)) if len(inside) else 0.0
        out[t] = hv
    return out


def _ranks(vals: dict[str, float]) -> dict[str, float]:
    from scipy.stats import rankdata

    names = list(vals)
    r = rankdata([-vals[m] for m in names], method="average")  # 1 = largest hypervolume
    return dict(zip(names, map(float, r), strict=True))


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    from scipy.stats import binomtest

    out: dict[str, Any] = {}
    for k in sorted({r["k"] for r in runs}):
        block = [r for r in runs if r["k"] == k]
        curves = {(r["method"], r["problem"], r["seed"]): hv_curve(r) for r in block}
        methods = [m for m in METHODS if any(mm == m for mm, _, _ in curves)]
        methods += sorted({m for m, _, _ in curves if m.startswith("calibo:")})  # variants, after the peers
        cells = sorted({(p, s) for _, p, s in curves if all((m, p, s) in curves for m in methods)})
        ranks: dict[str, dict[str, float]] = {}
        for t in AT:
            rs = []
            for p, s in cells:
                n = min(len(curves[(m, p, s)]) for m in methods)
                if t > n:
                    continue
                rs.append(_ranks({m: curves[(m, p, s)][t - 1] for m in methods}))
            if rs:
                ranks[str(t)] = {m: float(np.mean([r[m] for r in rs])) for m in methods}
        end = {m: {p: float(np.mean([curves[(m, p, s)][-1] for pp, s in cells if pp == p]))
                   for p in sorted({p for p, _ in cells})} for m in methods}
        signs = {}
        for t in SIGN_AT if "calibo" in methods else ():  # a peers-only part has no sign tests
            for peer in methods[1:]:
                w = l_ = ties = 0
                for p, s in cells:
                    if t > len(curves[("calibo", p, s)]):
                        continue
                    a, b = curves[("calibo", p, s)][t - 1], curves[(peer, p, s)][t - 1]
                    w, l_, ties = w + int(a > b), l_ + int(a < b), ties + int(a == b)
                pv = binomtest(w, w + l_).pvalue if w + l_ else 1.0
                signs[f"{t}:{peer}"] = {"wins": w, "losses": l_, "ties": ties, "p": float(pv)}
        cal_by_problem: dict[str, list[list[dict[str, Any]]]] = {}  # calibo's calibration, one per run
        for r in block:
            if r["method"] == "calibo" and r.get("calibration"):  # the default's (variants: see their runs)
                cal_by_problem.setdefault(r["problem"], []).append(r["calibration"])
        cal = [c for cs in cal_by_problem.values() for c in cs]

        def gap(cs: list[list[dict[str, Any]]], j: int) -> float:  # objective j over the runs that have it
            return float(np.mean([c[j]["gap"] for c in cs if len(c) > j]))

        gaps = [gap(cal, j) for j in range(max(len(c) for c in cal))] if cal else None  # DTLZ2 has a third
        gap_by_problem = {p: [gap(cs, j) for j in range(PROBLEMS[p].m)] for p, cs in sorted(cal_by_problem.items())}
        overhead = {m: float(np.mean([r["overhead_s"] / r["trials"] * 1000 for r in block if r["method"] == m]))
                    for m in methods}
        out[str(k)] = {"methods": methods, "cells": len(cells), "mean_rank": ranks, "mean_hv_end": end,
                       "sign_tests": signs, "calibo_calibration_gap": gaps,
                       "calibo_calibration_gap_by_problem": gap_by_problem, "ms_per_trial": overhead}
    return out


def print_tables(summary: dict[str, Any]) -> None:
    for k, blk in summary.items():
        methods = blk["methods"]
        print(f"\n=== {k} in flight: mean rank of the hypervolume over {blk['cells']} problem x seed cells "
              "(1 = largest)")
        cols = list(blk["mean_rank"])
        w = max(14, *(len(m) + 1 for m in methods))
        print(f"{'method':<{w}}" + "".join(f"{'@' + c:>8}" for c in cols) + f"{'ms/trial':>10}")
        for m in methods:
            print(f"{m:<{w}}" + "".join(f"{blk['mean_rank'][c][m]:8.2f}" for c in cols)
                  + f"{blk['ms_per_trial'][m]:10.1f}")
        probs = list(next(iter(blk["mean_hv_end"].values())))
        print("\nmean hypervolume at the end (100 trials; dtlz2: 200)")
        print(f"{'problem':<16}" + "".join(f"{m:>{w}}" for m in methods))
        for p in probs:
            print(f"{p:<16}" + "".join(f"{blk['mean_hv_end'][m][p]:{w}.5g}" for m in methods))
        print("\nsign tests, calibo against each peer (wins/losses/ties, two-sided binomial p)")
        for key, r in blk["sign_tests"].items():
            t, _, peer = key.partition(":")
            print(f"  @{t:<4} vs {peer:<{w}} {r['wins']:>3}/{r['losses']:<3}/{r['ties']:<3} p={r['p']:.3g}")
        gaps = blk["calibo_calibration_gap"]
        if gaps:
            print("calibo per-objective calibration gap (mean |coverage - nominal|, conformalized): "
                  + ", ".join(f"objective {j}: {g:.3f}" for j, g in enumerate(gaps)))


def plot(summary: dict[str, Any], path: Path) -> None:
    ks = list(summary)
    fig, axes = report.figure(1, len(ks), (6.0, 4.0))
    for ax, k in zip(axes[0], ks, strict=True):
        blk = summary[k]
        cols = list(blk["mean_rank"])
        for m in blk["methods"]:
            ax.plot([int(c) for c in cols], [blk["mean_rank"][c][m] for c in cols], marker="o", label=m,
                    lw=2.5 if m == "calibo" else 1.25)
        ax.set_xlabel("completed trials")
        ax.set_ylabel("mean hypervolume rank (1 = best)")
        ax.set_title(f"{k} in flight, {blk['cells']} problem x seed cells")
        ax.invert_yaxis()
        ax.legend(fontsize=8)
    report.save_figure(fig, path)


def run_key(run: dict[str, Any]) -> tuple[str, str, int, int]:
    return run["method"], run["problem"], run["k"], run["seed"]


def directions(run: dict[str, Any]) -> list[str]:
    return PROBLEMS[run["problem"]].dirs()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--in-flight", default="1,8")
    runner.add_run_arguments(ap, report.RESULTS / "multi_objective.json", seeds=5, trials=0)
    ap.set_defaults(trials=None)  # each problem's own budget; --trials overrides them all (smoke runs)
    args = ap.parse_args(argv)
    t0 = time.time()
    methods, problems = peers.parse_methods(args.methods), args.problems.split(",")
    unknown = [m for m in methods if m not in METHODS and not m.startswith("calibo:")]
    unknown += [p for p in problems if p not in PROBLEMS]
    if unknown and not args.merge:
        raise SystemExit(f"unknown {unknown}: methods {METHODS}, problems {sorted(PROBLEMS)}")
    jobs = [(m, p, int(k), s, args.trials) for s in runner.seeds_of(args) for p in problems
            for k in args.in_flight.split(",") for m in methods]
    # seed by seed (a run cut off leaves whole seeds), the slowest first within a seed
    jobs.sort(key=lambda j: (j[3], j[0] not in ("optuna_gp", "calibo"), j[1] not in ("mlp_size", "gbm_time", "dtlz2")))
    runs, meta = runner.collect(args, jobs, run_one, run_key, lambda j: j[:4], "multi-objective runs",
                                {"methods": methods, "problems": problems, "seeds": args.seeds,
                                 "seed_offset": args.seed_offset, "in_flight": args.in_flight,
                                 "durations": "lognormal(0, 1) virtual clock"})
    meta.pop("trials", None)  # a problem's own budget: no one count for all
    summary = summarize(runs)
    print_tables(summary)
    meta.update(references={p: PROBLEMS[p].ref for p in PROBLEMS}, wall_seconds=time.time() - t0)
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs}, directions)
    plot(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
