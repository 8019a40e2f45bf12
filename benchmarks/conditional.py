"""Conditional search spaces: calibo against Optuna TPE (define-by-run), Optuna GPSampler and random.

Spaces (each minimised, a fixed 3-fold split):

* ``svm``: an SVC on breast_cancer (scaled), 1 - accuracy; ``kernel`` in linear / rbf / poly /
  sigmoid, ``C`` always, ``gamma`` for rbf, poly and sigmoid, ``degree`` for poly only, ``coef0`` for
  poly and sigmoid.
* ``model_choice``: a choice among three scikit-learn models on wine (scaled), balanced error: kNN
  (``n_neighbors``, ``weights``), a random forest (``n_estimators``, ``max_depth``,
  ``max_features``) or logistic regression (``C``): each model's parameters exist only when it is
  chosen.
* ``lgbm_boosting``: LightGBM on breast_cancer, log loss; ``boosting_type`` gbdt / dart / goss with
  shared ``learning_rate``, ``num_leaves`` and ``n_estimators`` and its own parameters: gbdt's
  ``subsample``, dart's ``drop_rate`` and ``skip_drop``, goss's ``top_rate`` and ``other_rate``.

calibo sees the conditional space (``"condition"`` on each sub-parameter); Optuna's samplers get the
same parameters define-by-run (a sub-parameter is suggested only when its parent's value activates
it: TPE models them jointly where trials share them, GPSampler samples those outside its
intersection space independently); random search draws the conditional space uniformly. Every method
runs every (space, seed) for ``--trials`` trials, sequentially, side by side in one run. Reported:
mean rank of the best value at 25, 50 and 100 trials, mean best per space, sign tests of calibo
against each peer.

    python -m benchmarks.conditional --workers 2
    python -m benchmarks.conditional --spaces svm --seeds 2 --trials 40

Writes benchmarks/results/conditional.json and conditional.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report, runner  # noqa: E402
from benchmarks.harness.models import cv_loss, scaled  # noqa: E402
from benchmarks.harness.peers import random_configs  # noqa: E402

METHODS = ("calibo", "optuna_tpe", "optuna_gp", "random")
AT = (25, 50, 100)


def _f(low: float, high: float, log: bool = False, when: tuple[str, list] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "float", "low": low, "high": high, "log": log}
    if when:
        out["condition"] = {"parent": when[0], "values": when[1]}
    return out


def _i(low: int, high: int, log: bool = False, when: tuple[str, list] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "int", "low": low, "high": high, "log": log}
    if when:
        out["condition"] = {"parent": when[0], "values": when[1]}
    return out


def _c(*choices: Any, when: tuple[str, list] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "categorical", "choices": list(choices)}
    if when:
        out["condition"] = {"parent": when[0], "values": when[1]}
    return out


def svm(p: dict[str, Any]) -> float:
    from sklearn.svm import SVC

    kw = {"C": p["C"], "kernel": p["kernel"]}
    kw.update({k: p[k] for k in ("gamma", "degree", "coef0") if k in p})
    return cv_loss(scaled(SVC(**kw)), "breast_cancer", "error")


def model_choice(p: dict[str, Any]) -> float:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier

    if p["model"] == "knn":
        model = KNeighborsClassifier(n_neighbors=p["n_neighbors"], weights=p["weights"])
    elif p["model"] == "rf":
        model = RandomForestClassifier(n_estimators=p["n_estimators"], max_depth=p["max_depth"],
                                       max_features=p["max_features"], n_jobs=1, random_state=0)
    else:
        model = LogisticRegression(C=p["C"], max_iter=300)
    return cv_loss(scaled(model), "wine", "balanced_error")


def lgbm_boosting(p: dict[str, Any]) -> float:
    import lightgbm as lgb

    kw = {"boosting_type": p["boosting_type"], "learning_rate": p["learning_rate"], "num_leaves": p["num_leaves"],
          "n_estimators": p["n_estimators"], "n_jobs": 1, "verbose": -1, "random_state": 0}
    if p["boosting_type"] == "gbdt":
        kw.update(subsample=p["subsample"], subsample_freq=1)
    elif p["boosting_type"] == "dart":
        kw.update(drop_rate=p["drop_rate"], skip_drop=p["skip_drop"])
    else:
        kw.update(top_rate=p["top_rate"], other_rate=p["other_rate"])
    return cv_loss(lgb.LGBMClassifier(**kw), "breast_cancer", "log_loss")


SPACES: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], float]]] = {
    "svm": ({
        "kernel": _c("linear", "rbf", "poly", "sigmoid"),
        "C": _f(1e-3, 1e3, True),
        "gamma": _f(1e-4, 10.0, True, when=("kernel", ["rbf", "poly", "sigmoid"])),
        "degree": _i(2, 5, when=("kernel", ["poly"])),
        "coef0": _f(-1.0, 1.0, when=("kernel", ["poly", "sigmoid"])),
    }, svm),
    "model_choice": ({
        "model": _c("knn", "rf", "logreg"),
        "n_neighbors": _i(1, 60, True, when=("model", ["knn"])),
        "weights": _c("uniform", "distance", when=("model", ["knn"])),
        "n_estimators": _i(5, 60, when=("model", ["rf"])),
        "max_depth": _i(1, 12, when=("model", ["rf"])),
        "max_features": _f(0.05, 1.0, when=("model", ["rf"])),
        "C": _f(1e-4, 1e3, True, when=("model", ["logreg"])),
    }, model_choice),
    "lgbm_boosting": ({
        "boosting_type": _c("gbdt", "dart", "goss"),
        "learning_rate": _f(1e-3, 0.5, True),
        "num_leaves": _i(2, 64, True),
        "n_estimators": _i(5, 100, True),
        "subsample": _f(0.3, 1.0, when=("boosting_type", ["gbdt"])),
        "drop_rate": _f(0.01, 0.5, when=("boosting_type", ["dart"])),
        "skip_drop": _f(0.0, 0.8, when=("boosting_type", ["dart"])),
        "top_rate": _f(0.05, 0.5, when=("boosting_type", ["goss"])),
        "other_rate": _f(0.05, 0.5, when=("boosting_type", ["goss"])),
    }, lgbm_boosting),
}


def activation_order(space: dict[str, Any]) -> list[str]:
    """The parameters, each after its parent: the unconditional ones in the space's order, then the
    conditional ones (the order the engine validates them in, so Optuna suggests them alike)."""
    parent = {n: spec["condition"]["parent"] for n, spec in space.items() if spec.get("condition")}
    conditional: list[str] = []

    def visit(name: str) -> None:
        if name in parent and name not in conditional:
            visit(parent[name])
            conditional.append(name)

    for name in space:
        visit(name)
    return [n for n in space if n not in parent] + conditional


def define_by_run(trial, space: dict[str, Any]) -> dict[str, Any]:
    """The space's parameters suggested the way an Optuna objective would: each only when active."""
    from calibo.engine import SearchSpace

    out: dict[str, Any] = {}
    for name in activation_order(space):
        spec, cond = space[name], space[name].get("condition")
        if cond is not None and (cond["parent"] not in out or out[cond["parent"]] not in cond["values"]):
            continue
        if spec["type"] == "float":
            out[name] = trial.suggest_float(name, spec["low"], spec["high"], log=spec.get("log", False))
        elif spec["type"] == "int":
            out[name] = trial.suggest_int(name, int(spec["low"]), int(spec["high"]), log=spec.get("log", False))
        else:
            out[name] = trial.suggest_categorical(name, list(spec["choices"]))
    return SearchSpace.from_dict(space).validate(out)


def run_one(method: str, name: str, trials: int, seed: int) -> dict[str, Any]:
    space, objective = SPACES[name]
    values: list[float] = []
    t0 = time.perf_counter()
    eval_s = 0.0

    def evaluate(p: dict[str, Any]) -> float:
        nonlocal eval_s
        t = time.perf_counter()
        v = float(objective(p))
        eval_s += time.perf_counter() - t
        values.append(v)
        return v

    if method == "calibo":
        from calibo.engine import Optimizer

        opt = Optimizer(space, seed=seed)
        for _ in range(trials):
            s = opt.ask()[0]
            opt.tell(s.params, evaluate(s.params))
    elif method in ("optuna_tpe", "optuna_gp"):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)  # GPSampler warns at every independent sample
        sampler = (optuna.samplers.TPESampler(seed=seed) if method == "optuna_tpe"
                   else optuna.samplers.GPSampler(seed=seed))
        study = optuna.create_study(sampler=sampler)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.optimize(lambda t: evaluate(define_by_run(t, space)), n_trials=trials)
    elif method == "random":
        for p in random_configs(space, trials, seed):
            evaluate(p)
    else:
        raise ValueError(f"unknown method {method!r}")
    wall = time.perf_counter() - t0
    return {"method": method, "space": name, "seed": seed, "values": values, "wall_s": wall,
            "overhead_s": wall - eval_s}


def summarize(runs: list[dict[str, Any]], trials: int) -> dict[str, Any]:
    from scipy.stats import binomtest, rankdata

    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    curves = {(r["method"], r["space"], r["seed"]): np.minimum.accumulate(
        np.array(r["values"][:trials] + [r["values"][-1]] * (trials - len(r["values"])))) for r in runs}
    cells = sorted({(p, s) for _, p, s in curves if all((m, p, s) in curves for m in methods)})
    ranks = {m: np.zeros(trials) for m in methods}
    for p, s in cells:
        r = np.apply_along_axis(rankdata, 0, np.stack([curves[(m, p, s)] for m in methods]))
        for i, m in enumerate(methods):
            ranks[m] += r[i]
    ranks = {m: (v / max(len(cells), 1)).tolist() for m, v in ranks.items()}
    spaces = sorted({p for p, _ in cells})
    signs = {}
    for t in (t for t in AT if t <= trials):
        for b in methods[1:]:
            pairs = [(curves[("calibo", p, s)][t - 1], curves[(b, p, s)][t - 1]) for p, s in cells]
            w, lo = int(sum(x < y for x, y in pairs)), int(sum(x > y for x, y in pairs))
            signs.setdefault(str(t), {})[f"calibo vs {b}"] = {
                "wins": w, "losses": lo, "ties": len(pairs) - w - lo,
                "p": float(binomtest(w, w + lo).pvalue) if w + lo else 1.0}
    return {"methods": methods, "spaces": spaces, "cells": len(cells), "trials": trials, "rank_curve": ranks,
            "rank_at": {m: {str(t): r[t - 1] for t in AT if t <= trials} for m, r in ranks.items()},
            "mean_best": {m: {p: float(np.mean([curves[(m, p, s)][-1] for pp, s in cells if pp == p]))
                              for p in spaces} for m in methods},
            "sign_tests": signs,
            "overhead_ms_per_trial": {m: 1000 * float(np.mean([r["overhead_s"] / max(len(r["values"]), 1)
                                                                for r in runs if r["method"] == m])) for m in methods}}


def print_tables(s: dict[str, Any]) -> None:
    at = [t for t in AT if t <= s["trials"]]
    print(f"\nmean rank of the best value over {s['cells']} space x seed cells (1 = best)")
    print(f"{'method':<14}" + "".join(f"{'@' + str(t):>8}" for t in at) + f"{'ms/trial':>10}")
    for m in sorted(s["methods"], key=lambda m: s["rank_at"][m][str(at[-1])]):
        print(f"{m:<14}" + "".join(f"{s['rank_at'][m][str(t)]:>8.2f}" for t in at)
              + f"{s['overhead_ms_per_trial'][m]:>10.1f}")
    print(f"\nmean best at {s['trials']} trials")
    print(f"{'space':<16}" + "".join(f"{m:>14}" for m in s["methods"]))
    for p in s["spaces"]:
        print(f"{p:<16}" + "".join(f"{s['mean_best'][m][p]:>14.5g}" for m in s["methods"]))
    print("\nsign tests (wins/losses/ties over space x seed, two-sided binomial p)")
    for t, tests in s["sign_tests"].items():
        for pair, r in tests.items():
            print(f"  @{t:<4} {pair:<24} {r['wins']:>3}/{r['losses']:<3}/{r['ties']:<3} p={r['p']:.3g}")


def plot(s: dict[str, Any], path: Path) -> None:
    fig, axes = report.figure(figsize=(7, 4.4))
    ax = axes[0][0]
    for m, r in s["rank_curve"].items():
        ax.plot(np.arange(1, len(r) + 1), r, label=m, lw=2.4 if m == "calibo" else 1.2)
    ax.set_title(f"conditional spaces: mean rank of the best value ({s['cells']} cells, 1 in flight)", fontsize=9)
    ax.set_xlabel("trial")
    ax.legend(fontsize=8)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--spaces", default=",".join(SPACES))
    runner.add_run_arguments(ap, report.RESULTS / "conditional.json", seeds=5)
    args = ap.parse_args(argv)
    spaces = args.spaces.split(",")
    jobs = [(m, p, args.trials, s) for s in runner.seeds_of(args) for p in spaces for m in args.methods.split(",")]
    jobs.sort(key=lambda j: (j[0] != "optuna_gp", j))
    t0 = time.time()
    runs, meta = runner.collect(args, jobs, run_one, lambda r: (r["method"], r["space"], r["seed"]),
                                lambda j: (j[0], j[1], j[3]), "conditional runs",
                                {"spaces": spaces, "seeds": args.seeds, "seed_offset": args.seed_offset,
                                 "trials": args.trials, "in_flight": 1})
    summary = summarize(runs, meta["trials"])
    print_tables(summary)
    meta["wall_seconds"] = time.time() - t0
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs})
    plot(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
