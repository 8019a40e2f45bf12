"""Hyperparameter importance: calibo's surrogate decomposition against Optuna's fANOVA and PED-ANOVA.

Every method reads the same trials and ranks the parameters; reported are the Spearman and Kendall
rank correlations of each ranking with the true ranking and the wall time of one evaluation.

Functions with known first-order importances (uniform inputs; the truth is each parameter's
first-order Sobol' index, from its closed form or from a 2**17-point Saltelli estimate):

* ``ishigami``: Ishigami (a = 7, b = 0.1) in x0..x2 plus 2 dummy parameters (first-order 0.314,
  0.442, 0: x2 acts only through its interaction with x0).
* ``linear8``: sum of a_i x_i with a = 5, 4, 3, 2, 1, 0, 0, 0 on [0, 1]: shares in proportion to a_i**2.
* ``gfun6``: Sobol's G-function with a = 0, 1, 4.5, 9, 99, 99 (strong interactions).
* ``mixed5``: a categorical of 3 choices shifting the value, two floats with an interaction and
  two dummies.
* held out (not looked at while the method was built): ``friedman10`` (Friedman #1 in x0..x4 and
  5 dummies) and ``morris_like6`` (an additive-plus-product function of 6 inputs, 2 of them dummies).

Real tuning tasks (scikit-learn, 3-fold CV loss, ``benchmarks.harness.tasks``): ``knn_wine``,
``enet_diabetes`` and ``gbr_diabetes``. Their truth is model-free: each parameter's first-order
share (binned between-group variance, less its chance share) on a reference sample of
``--reference`` random configurations, drawn independently of the trials ranked.

Trials: ``--trials`` (default 50, 100, 200) from random sampling and from an Optuna TPE run
(``--samplers random tpe``), ``--seeds`` seeds each; real tasks at 50 and 100 random trials.
calibo: ``calibo.engine.importance.importance`` (first-order fANOVA of the quantile-GBM
surrogate, 8 bootstrap fits: its time includes the bootstrap). Optuna:
``FanovaImportanceEvaluator(seed=seed)`` and ``PedAnovaImportanceEvaluator()``.

    python -m benchmarks.importance
    python -m benchmarks.importance --seeds 1 --trials 50 --functions ishigami

Writes benchmarks/results/importance.json and importance.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from scipy.stats import kendalltau, spearmanr  # noqa: E402
from tqdm import tqdm  # noqa: E402

from calibo.engine.importance import importance  # noqa: E402
from calibo.engine.space import SearchSpace  # noqa: E402

RESULTS = Path(__file__).parent / "results"
METHODS = ("calibo", "optuna_fanova", "optuna_ped_anova")


@dataclass(frozen=True)
class Function:
    name: str
    space: dict[str, dict[str, Any]]
    f: Callable[[dict[str, Any]], float]
    truth: dict[str, float] | None = None  # None: a Saltelli estimate
    heldout: bool = False
    kind: str = "function"


def _unit(names: list[str], low: float = 0.0, high: float = 1.0) -> dict[str, dict[str, Any]]:
    return {n: {"type": "float", "low": low, "high": high} for n in names}


def _ishigami(p: dict[str, Any]) -> float:
    return float(np.sin(p["x0"]) + 7 * np.sin(p["x1"]) ** 2 + 0.1 * p["x2"] ** 4 * np.sin(p["x0"]))


_A8 = [5, 4, 3, 2, 1, 0, 0, 0]
_G = [0.0, 1.0, 4.5, 9.0, 99.0, 99.0]


def _gfun(p: dict[str, Any]) -> float:
    return float(np.prod([(abs(4 * p[f"x{i}"] - 2) + a) / (1 + a) for i, a in enumerate(_G)]))


def _mixed(p: dict[str, Any]) -> float:
    shift = {"a": 0.0, "b": 1.5, "c": -1.0}[p["kind"]]
    return shift + 2 * p["x0"] + 3 * p["x0"] * p["x1"] ** 2


def _friedman(p: dict[str, Any]) -> float:
    x = [p[f"x{i}"] for i in range(5)]
    return float(10 * np.sin(np.pi * x[0] * x[1]) + 20 * (x[2] - 0.5) ** 2 + 10 * x[3] + 5 * x[4])


def _morris(p: dict[str, Any]) -> float:
    x = [p[f"x{i}"] for i in range(6)]
    return float(3 * x[0] + 2 * x[1] ** 2 + np.exp(x[2]) + 4 * x[0] * x[3])


def _g_truth() -> dict[str, float]:
    v = [1 / (3 * (1 + a) ** 2) for a in _G]
    return {f"x{i}": vi for i, vi in enumerate(v)}


FUNCTIONS = {
    "ishigami": Function("ishigami", _unit([f"x{i}" for i in range(5)], -np.pi, np.pi), _ishigami,
                         {"x0": 0.3139, "x1": 0.4424, "x2": 0.0, "x3": 0.0, "x4": 0.0}),
    "linear8": Function("linear8", _unit([f"x{i}" for i in range(8)]),
                        lambda p: float(sum(a * p[f"x{i}"] for i, a in enumerate(_A8))),
                        {f"x{i}": a * a / 12 for i, a in enumerate(_A8)}),
    "gfun6": Function("gfun6", _unit([f"x{i}" for i in range(6)]), _gfun, _g_truth()),
    "mixed5": Function("mixed5", {"kind": {"type": "categorical", "choices": ["a", "b", "c"]},
                                  **_unit(["x0", "x1", "x2", "x3"])}, _mixed),
    "friedman10": Function("friedman10", _unit([f"x{i}" for i in range(10)]), _friedman, heldout=True),
    "morris_like6": Function("morris_like6", _unit([f"x{i}" for i in range(6)]), _morris, heldout=True),
}
REAL = ("knn_wine", "enet_diabetes", "gbr_diabetes")


def _configs(space: SearchSpace, n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return space.from_unit(space.sample_uniform(n, rng))


def saltelli_truth(fn: Function, n: int = 2**17, seed: int = 12345) -> dict[str, float]:
    """First-order Sobol' indices by Saltelli's pick-freeze estimator (uniform inputs)."""
    space = SearchSpace.from_dict(fn.space)
    rng = np.random.default_rng(seed)
    a, b = space.sample_uniform(n, rng), space.sample_uniform(n, rng)
    fa = np.array([fn.f(c) for c in space.from_unit(a)])
    fb = np.array([fn.f(c) for c in space.from_unit(b)])
    var = np.var(np.concatenate([fa, fb]))
    out = {}
    for j, p in enumerate(space.params):
        ab = a.copy()
        ab[:, j] = b[:, j]
        fab = np.array([fn.f(c) for c in space.from_unit(ab)])
        out[p.name] = max(0.0, float(np.mean(fb * (fab - fa)) / var))
    return out


def binned_truth(space: SearchSpace, configs: list[dict[str, Any]], y: np.ndarray, bins: int = 10) -> dict[str, float]:
    """Model-free first-order shares of a large sample: between-bin variance of y per parameter."""
    from calibo.engine.importance import _bins, _shares

    s = _shares((y - y.mean()) / (y.std() or 1.0), _bins(space, space.to_unit(configs), bins))
    return {p.name: float(v) for p, v in zip(space.params, s, strict=True)}


def _distributions(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for name, d in space.items():
        if d["type"] == "float":
            out[name] = FloatDistribution(d["low"], d["high"], log=d.get("log", False))
        elif d["type"] == "int":
            out[name] = IntDistribution(d["low"], d["high"], log=d.get("log", False))
        else:
            out[name] = CategoricalDistribution(d["choices"])
    return out


def optuna_study(space: dict[str, dict[str, Any]], configs: list[dict[str, Any]], y: list[float]):
    import optuna

    dists = _distributions(space)
    study = optuna.create_study(direction="minimize")
    study.add_trials([optuna.trial.create_trial(params=c, distributions=dists, value=v)
                      for c, v in zip(configs, y, strict=True)])
    return study


def tpe_trials(fn: Callable[[dict[str, Any]], float], space: dict[str, dict[str, Any]], n: int, seed: int):
    import optuna

    dists = _distributions(space)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(lambda t: fn({k: t._suggest(k, d) for k, d in dists.items()}), n_trials=n)
    return [t.params for t in study.trials], [float(t.value) for t in study.trials]


def rank_methods(space: dict[str, dict[str, Any]], configs: list[dict[str, Any]], y: list[float],
                 truth: dict[str, float], seed: int) -> dict[str, dict[str, float]]:
    from optuna.importance import (
        FanovaImportanceEvaluator,
        PedAnovaImportanceEvaluator,
        get_param_importances,
    )

    names = list(space)
    t = np.array([truth[n] for n in names])
    study = optuna_study(space, configs, y)
    out = {}
    for method in METHODS:
        t0 = time.perf_counter()
        if method == "calibo":
            r = importance(list(zip(configs, y, strict=True)), SearchSpace.from_dict(space), seed=seed)
            got = {p["param"]: p["importance"] for p in r.params}
        else:
            ev = FanovaImportanceEvaluator(seed=seed) if method == "optuna_fanova" else PedAnovaImportanceEvaluator()
            got = get_param_importances(study, evaluator=ev, normalize=False)
        seconds = time.perf_counter() - t0
        g = np.array([got.get(n, 0.0) for n in names])
        out[method] = {"spearman": float(np.nan_to_num(spearmanr(g, t)[0])),
                       "kendall": float(np.nan_to_num(kendalltau(g, t)[0])), "seconds": seconds}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--functions", nargs="*", default=list(FUNCTIONS))
    ap.add_argument("--real", nargs="*", default=list(REAL))
    ap.add_argument("--trials", nargs="*", type=int, default=[50, 100, 200])
    ap.add_argument("--samplers", nargs="*", default=["random", "tpe"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--reference", type=int, default=500)
    ap.add_argument("--out", default=str(RESULTS / "importance.json"))
    args = ap.parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore")
    rows: list[dict[str, Any]] = []
    cases = [(f, s, n, seed) for f in args.functions for s in args.samplers for n in args.trials
             for seed in range(args.seeds)]
    truths = {f: FUNCTIONS[f].truth or saltelli_truth(FUNCTIONS[f]) for f in args.functions}
    for f, sampler, n, seed in tqdm(cases, desc="functions"):
        fn = FUNCTIONS[f]
        space = SearchSpace.from_dict(fn.space)
        if sampler == "random":
            configs = _configs(space, n, seed)
            y = [fn.f(c) for c in configs]
        else:
            configs, y = tpe_trials(fn.f, fn.space, n, seed)
        for method, m in rank_methods(fn.space, configs, y, truths[f], seed).items():
            rows.append({"task": f, "kind": "function", "heldout": fn.heldout, "sampler": sampler,
                         "trials": n, "seed": seed, "method": method, **m})
    if args.real:
        from benchmarks.harness.tasks import TASKS

        for name in tqdm(args.real, desc="real tasks"):
            task = TASKS[name]
            space = SearchSpace.from_dict(task.space)
            ref = _configs(space, args.reference, 10_000)
            truths[name] = binned_truth(space, ref, np.array([task.objective(c) for c in ref]))
            for n in (50, 100):
                for seed in range(args.seeds):
                    configs = _configs(space, n, seed)
                    y = [task.objective(c) for c in configs]
                    for method, m in rank_methods(task.space, configs, y, truths[name], seed).items():
                        rows.append({"task": name, "kind": "real", "heldout": False, "sampler": "random",
                                     "trials": n, "seed": seed, "method": method, **m})
    summary = summarise(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "truth": truths, "summary": summary,
                                          "args": vars(args)}, indent=1))
    print_table(summary)
    plot(summary, Path(args.out).with_suffix(".png"))


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        group = "held-out functions" if r["heldout"] else ("real tasks" if r["kind"] == "real" else "functions")
        groups.setdefault((group, r["trials"], r["method"]), []).append(r)
    return [{"group": g, "trials": n, "method": m, "cases": len(rs),
             "spearman": float(np.mean([r["spearman"] for r in rs])),
             "kendall": float(np.mean([r["kendall"] for r in rs])),
             "seconds": float(np.median([r["seconds"] for r in rs]))}
            for (g, n, m), rs in sorted(groups.items())]


def print_table(summary: list[dict[str, Any]]) -> None:
    print(f"{'group':<20}{'trials':>7}  {'method':<18}{'cases':>6}{'spearman':>10}{'kendall':>9}{'median s':>10}")
    for s in summary:
        print(f"{s['group']:<20}{s['trials']:>7}  {s['method']:<18}{s['cases']:>6}{s['spearman']:>10.3f}"
              f"{s['kendall']:>9.3f}{s['seconds']:>10.3f}")


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.harness.report import save_figure

    groups = sorted({s["group"] for s in summary})
    fig, axes = plt.subplots(1, len(groups) + 1, figsize=(4.2 * (len(groups) + 1), 3.6))
    for ax, g in zip(axes, groups, strict=False):
        for m in METHODS:
            pts = sorted((s["trials"], s["spearman"]) for s in summary if s["group"] == g and s["method"] == m)
            ax.plot(*zip(*pts, strict=True), marker="o", label=m)
        ax.set_title(g)
        ax.set_xlabel("trials")
        ax.set_ylabel("Spearman with the truth")
    ax = axes[-1]
    for m in METHODS:
        pts = sorted((s["trials"], s["seconds"]) for s in summary if s["group"] == "functions" and s["method"] == m)
        ax.plot(*zip(*pts, strict=True), marker="o", label=m)
    ax.set_yscale("log")
    ax.set_title("time per evaluation (functions)")
    ax.set_xlabel("trials")
    ax.set_ylabel("median seconds")
    axes[0].legend(fontsize=8)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
