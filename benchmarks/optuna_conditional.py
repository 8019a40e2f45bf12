"""CaliboSampler on define-by-run conditional Optuna objectives, beside Optuna's own samplers.

Each objective is written as Optuna code is: a parameter exists only under some value of
another (``gamma`` for the rbf and poly kernels, a model's own parameters once the model is
chosen). Methods, same seeds, one run, sequential (one trial in flight):

* ``calibo``: CaliboSampler, which learns the conditional space from the trials and models it;
* ``calibo-intersection``: CaliboSampler restricted to Optuna's intersection space (what it did
  before: conditional parameters sampled at random by the independent sampler);
* ``tpe-group``: TPESampler(multivariate=True, group=True); ``gp``: GPSampler; ``random``.

Reports the mean rank of the best-so-far at 25, 50 and 100 trials (1 = best, ties share),
wins/losses against tpe-group at 100, seconds per trial spent outside the objective's model
training (the sampler and Optuna's bookkeeping), and the fallback warnings CaliboSampler logged
(a parameter it has seen before sampled by the independent sampler). ``held-out`` tasks were not
run while the sampler was written; they are summarised apart.

    python -m benchmarks.optuna_conditional                       # seeds 0-4, 2 processes
    python -m benchmarks.optuna_conditional --seeds 2 --seed-offset 5 --skip benchmarks/results/optuna_conditional.json
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import runner
from benchmarks.harness.report import (
    best_so_far,
    colors,
    figure,
    mean_ranks,
    print_table,
    save_figure,
    sign_test,
    value_at,
    write_json,
    wrote,
)

OUT = Path(__file__).parent / "results" / "optuna_conditional.json"
METHODS = ["calibo", "calibo-intersection", "tpe-group", "gp", "random"]
AT = (25, 50, 100)
_EVAL = [0.0]  # seconds spent training models in this process (Optuna samples lazily, inside the objective)


# ------------------------------------------------------------------ objectives (minimised)
def _cv_error(model: Any, data: str) -> float:
    from sklearn import datasets
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = getattr(datasets, f"load_{data}")(return_X_y=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        score = cross_val_score(make_pipeline(StandardScaler(), model), X, y, cv=3).mean()
    _EVAL[0] += time.perf_counter() - t0
    return 1.0 - float(score)


def svc_breast_cancer(trial: Any) -> float:
    from sklearn.svm import SVC

    kernel = trial.suggest_categorical("kernel", ["linear", "rbf", "poly", "sigmoid"])
    kw: dict[str, Any] = {"C": trial.suggest_float("C", 1e-3, 1e3, log=True), "kernel": kernel}
    if kernel != "linear":
        kw["gamma"] = trial.suggest_float("gamma", 1e-5, 1.0, log=True)
    if kernel == "poly":
        kw["degree"] = trial.suggest_int("degree", 2, 5)
    if kernel in ("poly", "sigmoid"):
        kw["coef0"] = trial.suggest_float("coef0", -1.0, 1.0)
    return _cv_error(SVC(max_iter=20000, **kw), "breast_cancer")


def model_choice_wine(trial: Any) -> float:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.tree import DecisionTreeClassifier

    model = trial.suggest_categorical("model", ["logreg", "knn", "tree", "forest"])
    if model == "logreg":
        m: Any = LogisticRegression(C=trial.suggest_float("logreg_C", 1e-4, 1e2, log=True), max_iter=2000)
    elif model == "knn":
        m = KNeighborsClassifier(n_neighbors=trial.suggest_int("knn_k", 1, 40),
                                 weights=trial.suggest_categorical("knn_weights", ["uniform", "distance"]))
    elif model == "tree":
        m = DecisionTreeClassifier(max_depth=trial.suggest_int("tree_depth", 1, 12),
                                   min_samples_leaf=trial.suggest_int("tree_leaf", 1, 30), random_state=0)
    else:
        m = RandomForestClassifier(n_estimators=trial.suggest_int("forest_trees", 5, 60),
                                   max_features=trial.suggest_float("forest_features", 0.05, 1.0),
                                   random_state=0, n_jobs=1)
    return _cv_error(m, "wine")


def switched_branin(trial: Any) -> float:
    """A categorical picks which of three shifted Branins the continuous parameters feed."""
    branch = trial.suggest_categorical("branch", ["a", "b", "c"])
    x1 = trial.suggest_float("x1", -5.0, 10.0)
    if branch == "a":
        x2 = trial.suggest_float("a_x2", 0.0, 15.0)
        offset = 1.0
    elif branch == "b":
        x2 = trial.suggest_float("b_x2", 0.0, 15.0)
        x1 += trial.suggest_float("b_shift", -2.0, 2.0)
        offset = 0.0
    else:
        x2 = trial.suggest_float("c_x2", 0.0, 15.0) * trial.suggest_float("c_scale", 0.5, 1.5)
        offset = 3.0
    a, b, c, r, s, t = 1, 5.1 / (4 * math.pi**2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return a * (x2 - b * x1**2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s + offset


def nested_quadratic(trial: Any) -> float:
    """Held out: two levels of conditions (an optimiser, then a schedule only some optimisers take)."""
    opt = trial.suggest_categorical("optimizer", ["sgd", "adam", "rmsprop"])
    lr = trial.suggest_float("lr", 1e-5, 1.0, log=True)
    loss = (math.log10(lr) + {"sgd": 1.0, "adam": 3.0, "rmsprop": 2.5}[opt]) ** 2
    if opt == "sgd":
        loss += (trial.suggest_float("momentum", 0.0, 0.99) - 0.9) ** 2 * 4
        if trial.suggest_categorical("schedule", ["constant", "cosine", "step"]) == "step":
            loss += (trial.suggest_int("step_every", 1, 50) - 30) ** 2 / 400
        else:
            loss += 0.3
    else:
        loss += (trial.suggest_float("beta2", 0.9, 0.9999) - 0.999) ** 2 * 1e4 + 0.2
    return loss + 0.1 * trial.suggest_float("noise_free_dummy", 0.0, 1.0)


TASKS = {"svc_breast_cancer": svc_breast_cancer, "model_choice_wine": model_choice_wine,
         "switched_branin": switched_branin}
HELD_OUT = {"nested_quadratic": nested_quadratic}


# ------------------------------------------------------------------ samplers
class _Fallbacks(logging.Handler):
    """Counts CaliboSampler's "sampled independently" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "sampled independently" in record.getMessage()


def _sampler(method: str, seed: int) -> Any:
    import optuna

    from calibo.optuna import CaliboSampler

    if method == "calibo":
        return CaliboSampler(seed=seed)
    if method == "calibo-intersection":
        class Intersection(CaliboSampler):
            """CaliboSampler as it was: Optuna's intersection space, conditional parameters random."""

            def infer_relative_search_space(self, study, trial):  # noqa: ANN001, ANN202
                self._directions(study)
                return {n: d for n, d in optuna.search_space.IntersectionSearchSpace().calculate(study).items()
                        if not d.single()}

        return Intersection(seed=seed)
    if method == "tpe-group":
        return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed)
    if method == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def run_one(method: str, task: str, seed: int, trials: int) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    objective = {**TASKS, **HELD_OUT}[task]
    study = optuna.create_study(sampler=_sampler(method, seed))
    counter = _Fallbacks()
    log = logging.getLogger("calibo.optuna._sampler")
    log.addHandler(counter)
    _EVAL[0] = 0.0
    t0 = time.perf_counter()
    try:
        study.optimize(objective, n_trials=trials)
    finally:
        log.removeHandler(counter)
    wall = time.perf_counter() - t0
    values = [t.value if t.value is not None else float("inf") for t in study.trials]
    return {"method": method, "task": task, "seed": seed, "values": values,
            "sampler_seconds_per_trial": (wall - _EVAL[0]) / trials, "fallback_warnings": counter.count}


# ------------------------------------------------------------------ report
def _curves(runs: list[dict[str, Any]], trials: int) -> dict[tuple, np.ndarray]:
    return {(r["method"], r["task"], r["seed"]): best_so_far(r, "minimize", trials) for r in runs}


def summarise(runs: list[dict[str, Any]], tasks: list[str], trials: int) -> dict[str, Any]:
    curves = _curves(runs, trials)
    cells = sorted({(r["task"], r["seed"]) for r in runs if r["task"] in tasks})
    methods = [m for m in METHODS if all((m, *c) in curves for c in cells)]
    ranks = mean_ranks(curves, methods, cells)
    out: dict[str, Any] = {"cells": len(cells), "methods": {}}
    for m in methods:
        secs = [r["sampler_seconds_per_trial"] for r in runs if r["method"] == m and r["task"] in tasks]
        out["methods"][m] = {f"rank@{t}": value_at(ranks[m], t) for t in AT}
        out["methods"][m]["seconds_per_trial"] = float(np.mean(secs))
        if m.startswith("calibo"):
            out["methods"][m]["fallback_warnings_per_run"] = float(np.mean(
                [r.get("fallback_warnings", 0) for r in runs if r["method"] == m and r["task"] in tasks]))
        out["methods"][m]["mean_best@100"] = {
            task: float(np.mean([value_at(curves[(m, task, s)], 100) for (tk, s) in cells if tk == task]))
            for task in tasks}
        if m != "tpe-group" and "tpe-group" in methods:
            out["methods"][m]["vs_tpe_group@100"] = sign_test(curves, m, "tpe-group", cells, 100)
    out["ranks"] = ranks
    return out


def report(summary: dict[str, dict[str, Any]]) -> None:
    for name, s in summary.items():
        rows = []
        for m, v in s["methods"].items():
            st = v.get("vs_tpe_group@100")
            wl = f"{st['wins']}/{st['losses']}/{st['ties']}" if st else "-"
            rows.append([m, *(v[f"rank@{t}"] for t in AT), wl, v["seconds_per_trial"],
                         v.get("fallback_warnings_per_run", "-")])
        print_table(f"{name}: mean rank of the best so far over {s['cells']} cells (1 trial in flight)",
                    ["method", "@25", "@50", "@100", "vs TPE w/l/t", "s/trial", "warnings/run"], rows,
                    width=13)
        for task in next(iter(s["methods"].values()))["mean_best@100"]:
            print(f"  {task}: mean best at 100: " + ", ".join(
                f"{m} {v['mean_best@100'][task]:.4g}" for m, v in s["methods"].items()))


def plot(summary: dict[str, dict[str, Any]], path: Path) -> None:
    fig, axes = figure(1, len(summary), size=(5.5, 4.0))
    col = colors(METHODS)
    for ax, (name, s) in zip(axes[0], summary.items(), strict=False):
        for m, r in s["ranks"].items():
            ax.plot(range(1, len(r) + 1), r, label=m, color=col[m])
        ax.set_title(f"{name} ({s['cells']} cells, 1 in flight)")
        ax.set_xlabel("trial")
        ax.set_ylabel("mean rank of best so far")
    axes[0][0].legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.add_run_arguments(ap, OUT, seeds=5)
    args = ap.parse_args(argv)
    names = args.tasks.split(",") if args.tasks else [*TASKS, *HELD_OUT]
    unknown = sorted(set(names) - {*TASKS, *HELD_OUT})
    if unknown:
        ap.error(f"unknown tasks {unknown}; known: {[*TASKS, *HELD_OUT]}")
    jobs = [(m, t, s, args.trials) for t in names for s in runner.seeds_of(args) for m in METHODS]
    t0 = time.time()
    runs, meta = runner.collect(args, jobs, run_one, lambda r: (r["method"], r["task"], r["seed"]),
                                lambda j: (j[0], j[1], j[2]), "optuna conditional",
                                {"trials": args.trials, "seeds": args.seeds, "seed_offset": args.seed_offset,
                                 "in_flight": 1, "methods": METHODS, "tasks": list(TASKS),
                                 "held_out": list(HELD_OUT)})
    summary = {name: summarise(runs, [t for t in group if t in names], meta["trials"])
               for name, group in (("tasks", TASKS), ("held-out", HELD_OUT)) if set(group) & set(names)}
    report(summary)
    meta["wall_seconds"] = time.time() - t0
    out = write_json(args.out, {"meta": meta, "summary": summary, "runs": runs}, lambda r: ["minimize"])
    plot(summary, out.with_suffix(".png"))
    wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
