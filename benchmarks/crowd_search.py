"""Search quality with a crowd: K trials in flight, results arriving out of order.

Every (method, task, seed, K) run is one study of ``--trials`` trials driven
by an event simulation on a *virtual* clock (nothing sleeps): K trials are
asked at the start; trial number i (in order of ask) runs for a duration drawn
from a lognormal(0, 1) (heavy right tail), seeded by (task, seed, K), so every
method sees the same duration for its i-th trial; whenever the running trial
with the earliest finish time completes (ties by trial number) it is evaluated
and told, and one new trial is asked until ``--trials`` have been asked.

A run's ``values`` are in order of COMPLETION (what a user has seen after t
results), ``order`` maps each to its trial number (order of ask) and ``time``
is its virtual completion time. Best-so-far "at trial t" is over the first t
completed trials.

Methods: ``calibo`` (the in-process engine with its defaults; the Optimizer
tracks its pending trials and conditions select on them), ``calibo:key=value,...``
(EngineConfig overrides; values parsed as JSON when they parse, else kept as
strings), ``optuna_gp`` (GPSampler, which conditions on running trials),
``optuna_tpe`` (TPESampler with constant_liar=True) and ``random``; also
``smac`` (SMAC3's HPO facade by ask/tell) and ``confopt`` (ConfOpt's own loop,
K = 1 only: it has no ask/tell). Every method asked runs at every K, K = 1
included (plain sequential search there; crowd-only calibo variants then equal
``calibo``).

Reported per K:

* mean rank of best-so-far (1 = best; ties share) over tasks x seeds at
  trials 25, 50 and 100: among the main methods (calibo, optuna_gp,
  optuna_tpe, random) over every (task, seed), and among all methods incl.
  variants over the cells where all of them ran;
* sign tests of calibo and each variant against each peer (and each variant
  against calibo) on the best-so-far at 50 and 100 trials, per (task, seed):
  wins / losses / ties, two-sided binomial p on wins vs losses;
* calibration of calibo and each variant: per run, over every trial told with
  a prediction (raw ones before the conformal threshold included), the
  empirical coverage per interval pair and the gap = mean over pairs of
  |coverage - nominal|; per task the mean over seeds, the mean over tasks, and
  the ratio gap(K) / gap(1).

    python benchmarks/crowd_search.py --workers 2                     # everything (long)
    python benchmarks/crowd_search.py --tasks branin,svc_digits --seeds 2 --in-flight 8 --trials 40
    python benchmarks/crowd_search.py --variants calibo:crowd=radius,calibo:acquisition=ts
    python benchmarks/crowd_search.py --merge a.json b.json            # combine partial runs, re-summarise

Writes benchmarks/results/crowd.json (keeping its top-level "live" key, which
another script writes) and crowd.png. ``run_crowd(method, task, trials, k,
seed)`` is importable.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy / torch: one core per run

import argparse  # noqa: E402
import heapq  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.runner import run_pool  # noqa: E402
from benchmarks.search import (  # noqa: E402
    DEFAULT_TASKS,
    RESULTS,
    _mean_ranks,
    add_run_arguments,
    best_so_far,
    calibo_overrides,
    merge_parts,
    parse_methods,
    skipped_runs,
)
from benchmarks.tasks import TASKS, Task  # noqa: E402

MAIN = ("calibo", "optuna_gp", "optuna_tpe", "random")
PEERS = MAIN[1:]
OTHER_PEERS = ("smac", "confopt")  # SMAC3's HPO facade by ask/tell; ConfOpt's own loop, one in flight
SEQUENTIAL_ONLY = ("confopt",)
NEW_TASKS = "forrester,camel6,levy4,svc_digits,gbr_diabetes,knn_wine,enet_diabetes"
RANK_AT = (25, 50, 100)
SIGN_AT = (50, 100)
SLOW = ("calibo", "optuna_gp")  # started first so the pool drains evenly


# ------------------------------------------------------------------- methods
def is_calibo(method: str) -> bool:
    return method == "calibo" or method.startswith("calibo:")


class _Calibo:
    def __init__(self, task: Task, seed: int, config: dict[str, Any]) -> None:
        from calibo.engine import Optimizer

        self.opt = Optimizer(task.space, direction=task.direction, seed=seed, config=config)

    def ask(self) -> tuple[Any, dict[str, Any]]:
        s = self.opt.ask()[0]
        return s.params, s.params

    def tell(self, handle: Any, value: float) -> None:
        self.opt.tell(handle, value)  # matches the pending trial (and its prediction) by params

    def extra(self) -> dict[str, Any]:
        return calibration(self.opt.records)


class _Optuna:
    def __init__(self, task: Task, seed: int, sampler: str) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if sampler == "tpe":
            smp = optuna.samplers.TPESampler(seed=seed, constant_liar=True)
        else:
            smp = optuna.samplers.GPSampler(seed=seed)
        self.space = task.space
        self.study = optuna.create_study(direction=task.direction, sampler=smp)

    def ask(self) -> tuple[Any, dict[str, Any]]:
        from benchmarks.peers import _optuna_params

        trial = self.study.ask()
        return trial, _optuna_params(trial, self.space)

    def tell(self, handle: Any, value: float) -> None:
        self.study.tell(handle, value)

    def extra(self) -> dict[str, Any]:
        return {}


class _SMAC:
    """SMAC3's HPO facade driven by ask/tell (its trials may be asked before earlier ones are told)."""

    def __init__(self, task: Task, seed: int, trials: int) -> None:
        import logging
        import tempfile

        from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer
        from smac import HyperparameterOptimizationFacade, Scenario

        logging.getLogger("smac").setLevel(logging.ERROR)
        cs = ConfigurationSpace(seed=seed)
        for name, spec in task.space.items():
            if spec["type"] == "float":
                cs.add(Float(name, (spec["low"], spec["high"]), log=spec.get("log", False)))
            elif spec["type"] == "int":
                cs.add(Integer(name, (spec["low"], spec["high"]), log=spec.get("log", False)))
            else:
                cs.add(Categorical(name, [str(c) for c in spec["choices"]]))
        self._back = {n: {str(c): c for c in spec["choices"]} for n, spec in task.space.items() if "choices" in spec}
        self._sign = 1.0 if task.direction == "minimize" else -1.0
        scenario = Scenario(cs, deterministic=True, n_trials=trials, seed=seed,
                            output_directory=Path(tempfile.mkdtemp(prefix="smac-")))
        self.smac = HyperparameterOptimizationFacade(scenario, lambda config, seed=0: 0.0, overwrite=True,
                                                     logging_level=40)

    def ask(self) -> tuple[Any, dict[str, Any]]:
        info = self.smac.ask()
        params = {k: (self._back[k][v] if k in self._back else v) for k, v in dict(info.config).items()}
        params = {k: (int(v) if isinstance(v, np.integer) else float(v) if isinstance(v, np.floating) else v)
                  for k, v in params.items()}
        return info, params

    def tell(self, handle: Any, value: float) -> None:
        from smac.runhistory.dataclasses import TrialValue

        self.smac.tell(handle, TrialValue(cost=self._sign * value))

    def extra(self) -> dict[str, Any]:
        return {}


class _Random:
    def __init__(self, task: Task, seed: int, trials: int) -> None:
        from benchmarks.peers import _random

        configs: list[dict[str, Any]] = []
        _random(task, trials, seed, configs.append)  # the same sequence as search.py's random
        self._it = iter(configs)

    def ask(self) -> tuple[Any, dict[str, Any]]:
        return None, next(self._it)

    def tell(self, handle: Any, value: float) -> None:
        pass

    def extra(self) -> dict[str, Any]:
        return {}


def check_methods(methods: list[str]) -> None:
    """Fail before the pool starts: unknown methods and EngineConfig overrides it rejects."""
    from calibo.engine import EngineConfig
    from calibo.engine.errors import ConfigError

    for m in methods:
        if not is_calibo(m) and m not in MAIN + OTHER_PEERS:
            sys.exit(f"unknown method {m!r}: use {', '.join(MAIN + OTHER_PEERS)} or calibo:key=value[,key=value]")
        try:
            EngineConfig.from_dict(calibo_overrides(m) if is_calibo(m) else {})
        except ConfigError as e:
            sys.exit(f"{m}: {e}")


def make_method(method: str, task: Task, seed: int, trials: int):
    if is_calibo(method):
        return _Calibo(task, seed, calibo_overrides(method))
    if method in ("optuna_gp", "optuna_tpe"):
        return _Optuna(task, seed, method.removeprefix("optuna_"))
    if method == "random":
        return _Random(task, seed, trials)
    if method == "smac":
        return _SMAC(task, seed, trials)
    raise ValueError(f"unknown method {method!r}")


def run_sequential_peer(method: str, task_name: str, trials: int, seed: int) -> dict[str, Any]:
    """A peer without ask/tell (ConfOpt) runs its own sequential loop: one trial in flight only."""
    from benchmarks.peers import run_peer

    r = run_peer(method, TASKS[task_name], trials, seed)
    values = list(map(float, r.values))
    return {"values": values, "order": list(range(len(values))), "time": None,
            "objective_s": r.wall_s - r.overhead_s}


# ---------------------------------------------------------------- simulation
def durations(task_name: str, seed: int, k: int, n: int) -> np.ndarray:
    """Trial i's virtual run time: lognormal(0, 1), the same for every method at (task, seed, K)."""
    rng = np.random.default_rng([zlib.crc32(task_name.encode()), seed, k])
    return rng.lognormal(0.0, 1.0, n)


def simulate(opt, task: Task, dur: np.ndarray, k: int, trials: int) -> dict[str, Any]:
    """K in flight on a virtual clock; returns values (lists, with several objectives) in order of
    completion."""
    running: list[tuple[float, int, Any, dict[str, Any]]] = []  # (finish, trial number, handle, params)
    values, order, done_at, obj_s = [], [], [], 0.0

    def launch(now: float) -> None:
        i = len(order) + len(running)
        handle, params = opt.ask()
        heapq.heappush(running, (now + float(dur[i]), i, handle, params))

    for _ in range(min(k, trials)):
        launch(0.0)
    while running:
        now, i, handle, params = heapq.heappop(running)
        t = time.perf_counter()
        v = task.objective(params)
        v = [float(x) for x in v] if isinstance(v, list | tuple) else float(v)  # several objectives: a list
        obj_s += time.perf_counter() - t
        opt.tell(handle, v)
        values.append(v)
        order.append(i)
        done_at.append(round(now, 6))
        if len(order) + len(running) < trials:
            launch(now)
    return {"values": values, "order": order, "time": done_at, "objective_s": obj_s}


def calibration(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Empirical coverage per interval pair over the predicted trials, and the mean |coverage - nominal|;
    the same over the conformalized predictions alone (``gap_conformal``: the raw ones, before
    ``conformalize_from`` observations, are the surrogate's own quantiles)."""
    from calibo.engine import metrics as M

    cal = M.summarize(records)
    if not cal["n"]:
        return {"n_predicted": 0, "coverage": None, "nominal": None, "gap": None}
    conf = M.summarize(records, conformal_only=True)
    return {"n_predicted": cal["n"], "coverage": cal["coverage"], "nominal": cal["nominal"],
            "gap": M.coverage_gap(cal["coverage"], cal["nominal"]), "n_conformal": conf["n"],
            "gap_conformal": M.coverage_gap(conf["coverage"], conf["nominal"]) if conf["n"] else None}


def run_crowd(method: str, task_name: str, trials: int, k: int, seed: int) -> dict[str, Any]:
    """One study of ``trials`` trials with ``k`` in flight; see the module docstring."""
    task = TASKS[task_name]
    if method in SEQUENTIAL_ONLY and k != 1:
        raise ValueError(f"{method} has no ask/tell: it runs with one trial in flight only")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0, c0 = time.perf_counter(), time.process_time()
        if method in SEQUENTIAL_ONLY:
            opt, sim = None, run_sequential_peer(method, task_name, trials, seed)
        else:
            opt = make_method(method, task, seed, trials)  # outside the clock: a process's first imports
            t0, c0 = time.perf_counter(), time.process_time()
            sim = simulate(opt, task, durations(task_name, seed, k, trials), k, trials)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    seen = list(dict.fromkeys(f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught))
    return {"method": method, "task": task_name, "seed": seed, "k": k, **sim, "wall_s": wall, "cpu_s": cpu,
            "overhead_s": wall - sim["objective_s"], **(opt.extra() if opt else {}), "warnings": seen[:5]}


def run_key(r: dict) -> tuple:
    return (r["method"], r["task"], r["seed"], r["k"])


# ------------------------------------------------------------------ analysis
def checkpoints(at: tuple[int, ...], trials: int) -> list[int]:
    """The checkpoints a run of ``trials`` reaches; a shorter run reports at its end instead."""
    return [t for t in at if t < trials] + [trials] if trials < max(at) else list(at)


def _at(curve: list[float] | np.ndarray, t: int) -> float:
    return float(curve[min(t, len(curve)) - 1])


def _rank_block(curves: dict, methods: list[str], cells: list[tuple[str, int]], trials: int) -> dict:
    ranks = _mean_ranks(curves, methods, cells)
    return {"methods": methods, "cells": len(cells), "curve": ranks,
            "at": {m: {str(t): _at(r, t) for t in checkpoints(RANK_AT, trials)} for m, r in ranks.items()}}


def _sign_test(curves: dict, a: str, b: str, cells: list[tuple[str, int]], t: int) -> dict:
    from scipy.stats import binomtest

    pairs = [(_at(curves[(a, *c)], t), _at(curves[(b, *c)], t)) for c in cells
             if (a, *c) in curves and (b, *c) in curves]
    wins = sum(x < y for x, y in pairs)
    losses = sum(x > y for x, y in pairs)
    p = float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0
    return {"n": len(pairs), "wins": wins, "losses": losses, "ties": len(pairs) - wins - losses, "p": p}


def _sign_tests(curves: dict, methods: list[str], cells: list[tuple[str, int]], trials: int) -> dict:
    out: dict[str, dict] = {}
    for t in checkpoints(SIGN_AT, trials):
        for a in filter(is_calibo, methods):
            for b in [p for p in (*PEERS, "calibo") if p in methods and p != a]:
                out.setdefault(str(t), {})[f"{a} vs {b}"] = _sign_test(curves, a, b, cells, t)
    return out


def _summarize_k(runs: list[dict], trials: int) -> dict:
    """Ranks and sign tests among the runs of one K."""
    curves = {(r["method"], r["task"], r["seed"]): best_so_far(r["values"], TASKS[r["task"]].direction, trials)
              for r in runs}
    methods = sorted({m for m, _, _ in curves}, key=lambda m: (m not in MAIN, m))
    cells = sorted({(t, s) for _, t, s in curves})
    main = [m for m in MAIN if all((m, *c) in curves for c in cells)]
    full = [c for c in cells if all((m, *c) in curves for m in methods)]
    return {"main": _rank_block(curves, main, cells, trials), "all": _rank_block(curves, methods, full, trials),
            "sign_tests": _sign_tests(curves, methods, cells, trials)}


def _task_means(runs: list[dict], m: str, k: int, field: str) -> dict[str, float]:
    """``field`` of method ``m``'s runs at ``k``, mean over seeds per task (runs without it left out)."""
    by_task: dict[str, list[float]] = {}
    for r in runs:
        if r["method"] == m and r["k"] == k and r.get(field) is not None:
            by_task.setdefault(r["task"], []).append(r[field])
    return {t: float(np.mean(g)) for t, g in sorted(by_task.items())}


def _gaps(runs: list[dict], ks: list[int]) -> dict:
    """Calibration gap per calibo method: per K per task (mean over seeds), mean over tasks, ratio to K = 1;
    ``mean_conformal``, the mean over tasks of the gap over conformalized predictions alone (runs that
    recorded it)."""
    out: dict[str, dict] = {}
    for m in sorted({r["method"] for r in runs if is_calibo(r["method"])}):
        per = {k: _task_means(runs, m, k, "gap") for k in ks}
        conf = {k: _task_means(runs, m, k, "gap_conformal") for k in ks}
        mean = {k: float(np.mean(list(v.values()))) if v else None for k, v in per.items()}
        base = per.get(1, {})
        out[m] = {str(k): {"per_task": per[k], "mean": mean[k],
                           "mean_conformal": float(np.mean(list(conf[k].values()))) if conf[k] else None,
                           "ratio_to_k1": mean[k] / mean[1] if mean.get(1) and mean[k] is not None else None,
                           "ratio_to_k1_per_task": {t: g / base[t] for t, g in per[k].items() if base.get(t)}}
                  for k in ks}
    return out


def summarize(runs: list[dict], trials: int) -> dict:
    ks = sorted({r["k"] for r in runs})
    return {"ks": ks, "methods": sorted({r["method"] for r in runs}, key=lambda m: (m not in MAIN, m)),
            "tasks": sorted({r["task"] for r in runs}), "trials": trials,
            "by_k": {str(k): _summarize_k([r for r in runs if r["k"] == k], trials) for k in ks},
            "calibration_gap": _gaps(runs, ks)}


# -------------------------------------------------------------------- output
def print_tables(summary: dict) -> None:
    cols = checkpoints(RANK_AT, summary["trials"])
    for k, blk in summary["by_k"].items():
        for name, rb in (("main methods", blk["main"]), ("all methods", blk["all"])):
            if not rb["curve"] or (name == "all methods" and rb["methods"] == blk["main"]["methods"]):
                continue
            print(f"\nK={k}: mean rank, {name} over {rb['cells']} task x seed cells (1 = best)")
            print(f"{'method':<34}" + "".join(f"{'@' + str(t):>8}" for t in cols))
            for m in sorted(rb["at"], key=lambda m: rb["at"][m][str(cols[-1])]):
                print(f"{m:<34}" + "".join(f"{rb['at'][m][str(t)]:>8.2f}" for t in cols))
    print("\nsign tests on best-so-far (W/L/T, two-sided binomial p on W vs L)")
    for k, blk in summary["by_k"].items():
        for t, tests in blk["sign_tests"].items():
            for pair, r in tests.items():
                print(f"K={k:<3} @{t:<4} {pair:<50} {r['wins']:>3}/{r['losses']:<3}/{r['ties']:<3} p={r['p']:.3g}")
    print_gaps(summary)


def print_gaps(summary: dict) -> None:
    ks = [str(k) for k in summary["ks"]]
    for m, per_k in summary["calibration_gap"].items():
        print(f"\ncalibration gap of {m}: mean over pairs of |coverage - nominal|, mean over seeds")
        print(f"{'task':<18}" + "".join(f"{'K=' + k:>9}" for k in ks))
        for t in summary["tasks"]:
            print(f"{t:<18}" + "".join(f"{per_k[k]['per_task'].get(t, float('nan')):>9.3f}" for k in ks))
        for row in ("mean", "ratio_to_k1", "mean_conformal"):
            print(f"{row:<18}" + "".join(f"{_num(per_k[k].get(row)):>9}" for k in ks))


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [str(k) for k in summary["ks"]]
    fig, axes = plt.subplots(1, len(ks) + 1, figsize=(4.8 * (len(ks) + 1), 4.2), squeeze=False)
    cmap = plt.get_cmap("tab10")
    colors = {m: cmap(i % 10) for i, m in enumerate(summary["methods"])}
    for ax, k in zip(axes[0], ks, strict=False):
        rb = summary["by_k"][k]["all"]
        for m, r in rb["curve"].items():
            ax.plot(np.arange(1, len(r) + 1), r, label=m, color=colors[m], lw=2.2 if m == "calibo" else 1.1,
                    ls="-" if m in MAIN else "--")
        ax.set_title(f"K={k} in flight: mean rank ({rb['cells']} cells)", fontsize=9)
        ax.set_xlabel("completed trials")
    axes[0][0].set_ylabel("mean rank of best-so-far (lower is better)")
    axes[0][0].legend(fontsize=7)
    ax = axes[0][-1]
    for m, per_k in summary["calibration_gap"].items():
        ax.plot(range(len(ks)), [per_k[k]["mean"] if per_k[k]["mean"] is not None else np.nan for k in ks],
                "o-", label=m, color=colors[m])
    ax.set_xticks(range(len(ks)), [f"K={k}" for k in ks])
    ax.set_title("calibration gap (mean over tasks)", fontsize=9)
    ax.set_ylabel("mean |coverage - nominal|")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_result(out: Path, payload: dict) -> None:
    """Read-modify-write: keys this script does not own (``live``) survive."""
    data = json.loads(out.read_text()) if out.exists() else {}
    data.update(payload)
    out.write_text(json.dumps(data))


def run_jobs(jobs: list[tuple], workers: int, partial: Path) -> list[dict]:
    return run_pool(run_crowd, jobs, workers, "crowd runs", partial, {"trials": jobs[0][2]} if jobs else {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(MAIN))
    ap.add_argument("--variants", default="", help="comma list of calibo:key=value[,key=value] variants")
    ap.add_argument("--in-flight", default="1,8,32", help="comma list of K (trials in flight)")
    add_run_arguments(ap, RESULTS / "crowd.json")
    ap.set_defaults(tasks=f"{DEFAULT_TASKS},{NEW_TASKS}", seeds=5)
    args = ap.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if args.merge:
        runs, meta = merge_parts(args.merge, run_key, args.trials)
        trials = meta["trials"]
    else:
        methods = list(dict.fromkeys(parse_methods(args.methods) + parse_methods(args.variants)))
        check_methods(methods)
        tasks = args.tasks.split(",")
        bad = [t for t in tasks if t not in TASKS]
        if bad:
            sys.exit(f"unknown tasks {bad}; choose from {sorted(TASKS)}")
        ks = [int(k) for k in args.in_flight.split(",")]
        seeds = range(args.seed_offset, args.seed_offset + args.seeds)
        skipped = skipped_runs(args.skip)
        done = {run_key(r) for r in skipped}
        jobs = [(m, t, args.trials, k, s) for s in seeds for t in tasks for k in ks for m in methods
                if (m, t, s, k) not in done]
        jobs.sort(key=lambda j: (j[0].split(":")[0] not in SLOW, -j[3], j))  # slowest first
        runs = skipped + run_jobs(jobs, args.workers, out.with_suffix(".partial.json"))
        trials = args.trials
        meta = {"methods": methods, "tasks": tasks, "in_flight": ks, "seeds": args.seeds,
                "seed_offset": args.seed_offset, "trials": trials, "durations": "lognormal(0, 1)",
                "workers": args.workers, "cpu_count": os.cpu_count()}
    summary = summarize(runs, trials)
    print_tables(summary)
    meta["wall_seconds"] = time.time() - t0
    write_result(out, {"meta": meta, "summary": summary, "runs": runs})
    plot(summary, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
