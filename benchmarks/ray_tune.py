"""Ray Tune with calibo's searcher against OptunaSearch (TPE, GP) and Tune's random search.

Every method runs the same real-tuning tasks (``harness.tasks``: scikit-learn and LightGBM models
scored by cross-validation) through ``tune.Tuner.fit`` on a local Ray, ``--in-flight`` (8) trials at
once (each trial takes ``cpus / in-flight`` of a CPU, so all of them run together), ``--trials``
(60) trials per run, for ``--seeds`` (5) seeds:

* ``calibo``: :class:`calibo.ray.CaliboSearch` on a ``calibo serve`` the harness starts (SQLite in
  a temporary directory, one fit process), one study per run with the run's seed, the default
  engine settings and the searcher's default batch (2 trials asked ahead; ``--calibo-batch`` another);
* ``optuna_tpe`` / ``optuna_gp``: Tune's ``OptunaSearch(sampler=TPESampler(seed))`` /
  ``GPSampler(seed)``, the sampler running in Tune's driver;
* ``random``: Tune's default ``BasicVariantGenerator(random_state=seed)``.

Each searcher is wrapped in a timing proxy, the same for every method, that adds up the seconds
Tune's driver spends inside its calls: ``suggest`` + ``on_trial_result`` + ``on_trial_complete`` of
the Searcher, and its ``set_search_properties`` (where OptunaSearch creates its study, and
CaliboSearch its study and first ask); for ``random``, the search algorithm's ``next_trial`` (which
includes Tune's trial creation) + its ``on_trial_*``. A second proxy around Tune's search algorithm times the same for
every method including Tune's own trial creation, and the checkpoint saves (``save_to_dir``).

Reported: per task and seed the best value of the ``--trials`` trials (in order of completion) and
the methods' ranks (1 = best, ties share); the mean rank; wins / losses / ties of calibo against
each Optuna sampler (two-sided binomial p); the mean best per task; the driver's milliseconds per
trial; per run, its wall time, the seconds its trials ran (Tune's ``time_total_s``, summed: the CPU
is shared with the driver and calibo's server) and the CPU seconds of their objectives (what the
configurations chosen cost to train, whatever else ran), the CPU seconds of the whole machine
over the run and of calibo's server among them (its API process and fit workers); and, for calibo,
the searcher's own counters (trials asked ahead and unused, the most in flight on the server, the
suggestions that waited).

    python -m benchmarks.ray_tune                       # 4 tasks x 5 seeds x 4 methods, 60 trials
    python -m benchmarks.ray_tune --quick               # smoke run: 1 task, 1 seed, 16 trials
    python -m benchmarks.ray_tune --tasks svc_breast_cancer --seeds 2 --methods calibo,optuna_tpe

Writes benchmarks/results/ray_tune.json and ray_tune.png (a run cut off leaves
ray_tune.partial.json; ``--resume`` skips the runs it holds).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy / torch: one core per process
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no CSV / JSON / TensorBoard files per trial
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no tables on the terminal

import argparse  # noqa: E402
import contextlib  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report  # noqa: E402
from benchmarks.harness.servers import ROOT, calibo_server, database, versions  # noqa: E402
from benchmarks.harness.tasks import TASKS, select  # noqa: E402
from benchmarks.harness.timing import log, process_cpu  # noqa: E402

METHODS = ("calibo", "optuna_tpe", "optuna_gp", "random")
PEERS = ("optuna_tpe", "optuna_gp")
DEFAULT_TASKS = "svc_breast_cancer,logreg_digits,lgbm_breast_cancer,hgb_wine"
METRIC = "loss"


# ------------------------------------------------------------------ the Tune side
def tune_space(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A task's space (calibo's format) as Tune's."""
    from ray import tune

    out: dict[str, Any] = {}
    for name, p in space.items():
        if p["type"] == "float":
            out[name] = (tune.loguniform if p.get("log") else tune.uniform)(p["low"], p["high"])
        elif p["type"] == "int":  # Tune's upper bound is exclusive
            out[name] = (tune.lograndint if p.get("log") else tune.randint)(p["low"], p["high"] + 1)
        else:  # categorical, ordinal
            out[name] = tune.choice(list(p["choices"]))
    return out


def trainable(config: dict[str, Any], task: str) -> None:
    """One trial: the task's objective at ``config`` (runs in a Ray worker)."""
    from ray import tune

    t = TASKS[task]
    cpu = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(t.objective({k: config[k] for k in t.space}))
    tune.report({METRIC: value, "objective_cpu_s": time.process_time() - cpu})


class _Clock:
    """Adds up the seconds (and the count) of the calls made through ``_time``."""

    seconds = 0.0
    calls = 0

    def _time(self, fn: Any, *a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def _timed(cls: type) -> type:
    """``cls`` (a Searcher or a search algorithm) whose driver-side calls add up their seconds."""
    suggest = "suggest" if hasattr(cls, "suggest") else "next_trial"

    class Timed(_Clock, cls):  # type: ignore[valid-type, misc]
        save_seconds = 0.0

        def set_search_properties(self, metric: Any, mode: Any, config: dict, **spec: Any) -> bool:
            return self._time(super().set_search_properties, metric, mode, config, **spec)

        def on_trial_result(self, trial_id: str, result: dict) -> None:
            self._time(super().on_trial_result, trial_id, result)

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            self._time(super().on_trial_complete, trial_id, result=result, error=error)

    def timed_suggest(self: Any, *a: Any) -> Any:
        return self._time(getattr(super(Timed, self), suggest), *a)

    setattr(Timed, suggest, timed_suggest)
    Timed.__name__ = f"Timed{cls.__name__}"
    return Timed


class TimedSearcher:
    """A Searcher proxy: the driver's seconds in the wrapped searcher's calls (built lazily: Ray is
    imported on first use)."""

    _cls: type | None = None

    @classmethod
    def wrap(cls, inner: Any) -> Any:
        if cls._cls is None:
            from ray.tune.search import Searcher

            class Proxy(_Clock, Searcher):
                def __init__(self, searcher: Any) -> None:
                    super().__init__(metric=searcher.metric, mode=searcher.mode)
                    self.searcher = searcher  # SearchGenerator's save walks .searcher to the base
                    self.seconds = 0.0

                @property
                def metric(self) -> str:
                    return self.searcher.metric

                @property
                def mode(self) -> str:
                    return self.searcher.mode

                def set_search_properties(self, metric: Any, mode: Any, config: dict, **spec: Any) -> bool:
                    # timed too: OptunaSearch creates its study here, CaliboSearch its study and first ask
                    return self._time(self.searcher.set_search_properties, metric, mode, config, **spec)

                def set_max_concurrency(self, max_concurrent: int) -> bool:
                    return self.searcher.set_max_concurrency(max_concurrent)

                def suggest(self, trial_id: str) -> Any:
                    return self._time(self.searcher.suggest, trial_id)

                def on_trial_result(self, trial_id: str, result: dict) -> None:
                    self._time(self.searcher.on_trial_result, trial_id, result)

                def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
                    self._time(self.searcher.on_trial_complete, trial_id, result=result, error=error)

                def get_state(self) -> dict:
                    return {}

                def set_state(self, state: dict) -> None:
                    pass

                def save(self, checkpoint_path: str) -> None:
                    self.searcher.save(checkpoint_path)

                def restore(self, checkpoint_path: str) -> None:
                    self.searcher.restore(checkpoint_path)

            cls._cls = Proxy
        return cls._cls(inner)


def search_algorithm(method: str, seed: int, in_flight: int, base_url: str | None, study: str,
                     batch: int | None = None) -> tuple[Any, Any, Any]:
    """(Tune's search algorithm, the searcher-level timer, the calibo searcher or None) for ``method``."""
    from ray.tune.search import ConcurrencyLimiter, SearchGenerator
    from ray.tune.search.basic_variant import BasicVariantGenerator

    if method == "random":
        alg = _timed(BasicVariantGenerator)(max_concurrent=in_flight, random_state=seed)
        return alg, alg, None
    calibo = None
    if method == "calibo":
        from calibo.ray import CaliboSearch

        calibo = inner = CaliboSearch(url=base_url, study_name=study, seed=seed, batch=batch)
    else:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GPSampler is experimental
            sampler = (optuna.samplers.TPESampler(seed=seed) if method == "optuna_tpe"
                       else optuna.samplers.GPSampler(seed=seed))
        inner = OptunaSearch(sampler=sampler)
    proxy = TimedSearcher.wrap(inner)
    alg = _timed(SearchGenerator)(ConcurrencyLimiter(proxy, max_concurrent=in_flight))
    return alg, proxy, calibo


class _Order:
    """Tune callback: each trial's final metric in order of completion (None: it errored)."""

    @staticmethod
    def make() -> Any:
        from ray import tune

        class Order(tune.Callback):
            def __init__(self) -> None:
                self.values: list[float | None] = []
                self.most = 0
                self.running = 0
                self.trial_s = 0.0  # the trials' own run time (Tune's time_total_s), summed
                self.objective_cpu_s = 0.0  # the CPU seconds of the objectives, summed

            def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
                self.running += 1
                self.most = max(self.most, self.running)

            def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
                self.running -= 1
                result = trial.last_result or {}
                v = result.get(METRIC)
                self.values.append(float(v) if v is not None and np.isfinite(v) else None)
                self.trial_s += float(result.get("time_total_s", 0.0))
                self.objective_cpu_s += float(result.get("objective_cpu_s", 0.0))

            def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
                self.running -= 1
                self.values.append(None)

        return Order()


def run_one(method: str, task: str, seed: int, trials: int, in_flight: int, cpus: float, base_url: str | None,
            storage: Path, batch: int | None = None) -> dict[str, Any]:
    from ray import tune

    name = f"{method}-{task}-{seed}-{uuid.uuid4().hex[:6]}"
    alg, proxy, calibo = search_algorithm(method, seed, in_flight, base_url, f"ray-bench-{name}", batch)
    order = _Order.make()
    save_s = [0.0]
    original_save = alg.save_to_dir

    def timed_save(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original_save(*a, **kw)
        finally:
            save_s[0] += time.perf_counter() - t0

    alg.save_to_dir = timed_save
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(trainable, task=task), {"cpu": cpus / in_flight}),
        param_space=tune_space(TASKS[task].space),
        tune_config=tune.TuneConfig(search_alg=alg, metric=METRIC, mode="min", num_samples=trials,
                                    reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(storage), name=name, verbose=0, callbacks=[order],
                                  log_to_file=False),
    )
    t0 = time.perf_counter()
    tuner.fit()
    wall = time.perf_counter() - t0
    run: dict[str, Any] = {"method": method, "task": task, "seed": seed, "values": order.values,
                           "searcher_s": float(proxy.seconds), "driver_s": float(alg.seconds),
                           "save_s": save_s[0], "wall_s": wall, "most_running": order.most,
                           "trial_s": order.trial_s, "objective_cpu_s": order.objective_cpu_s}
    if calibo is not None:
        calibo.shutdown()
        stats = calibo.stats
        run["calibo"] = {"batch": calibo.batch, "asked": stats["asked"], "asks": stats["asks"],
                         "unused": stats["unused"], "max_in_flight": stats["max_in_flight"],
                         "suggest_waits": stats["suggest_waits"], "suggest_wait_s": stats["suggest_wait_s"],
                         "suggest_none": stats["suggest_none"], "ask_s": stats.get("ask_s", 0.0),
                         "told": stats["told"]}
    return run


def cpu_seconds(server_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of the whole machine (every core) and of calibo's server (its process
    group: the API process and its fit workers), from ``timing.process_cpu``."""
    used = process_cpu(server_pid)
    return {"machine": used.get("machine", 0.0),
            "server": used.get("server_api", 0.0) + used.get("server_workers", 0.0)}


# ------------------------------------------------------------------ analysis
def summarize(runs: list[dict[str, Any]], trials: int) -> dict[str, Any]:
    from scipy.stats import rankdata

    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    curves = {(r["method"], r["task"], r["seed"]): report.best_so_far(r, "minimize", trials) for r in runs}
    cells = sorted({(t, s) for _, t, s in curves})
    full = [c for c in cells if all((m, *c) in curves for m in methods)]
    best = {m: {c: report.value_at(curves[(m, *c)], trials) for c in full} for m in methods}
    ranks = {m: [] for m in methods}
    for c in full:
        for m, r in zip(methods, rankdata([best[m][c] for m in methods]), strict=True):
            ranks[m].append(float(r))
    tasks = sorted({t for t, _ in full})
    per_run = {m: [r for r in runs if r["method"] == m] for m in methods}

    def per_trial_ms(m: str, key: str) -> float:
        rs = per_run[m]
        return 1000.0 * float(np.mean([r[key] / max(1, report.n_values(r)) for r in rs])) if rs else float("nan")

    def per_run_mean(key: str) -> dict[str, float]:  # NaN where runs of an older file lack the key
        return {m: float(np.mean([r.get(key, np.nan) for r in per_run[m]])) for m in methods}

    out: dict[str, Any] = {
        "methods": methods, "cells": len(full), "tasks": tasks, "trials": trials,
        "mean_rank": {m: float(np.mean(ranks[m])) if ranks[m] else None for m in methods},
        "rank_curve": report.mean_ranks(curves, methods, full),
        "mean_best": {m: {t: float(np.mean([best[m][c] for c in full if c[0] == t])) for t in tasks} for m in methods},
        "searcher_ms_per_trial": {m: per_trial_ms(m, "searcher_s") for m in methods},
        "driver_ms_per_trial": {m: per_trial_ms(m, "driver_s") for m in methods},
        "save_ms_per_trial": {m: per_trial_ms(m, "save_s") for m in methods},
        "wall_s_per_run": per_run_mean("wall_s"),
        # what the trials themselves took: their run time (CPU shared with the searcher's server) and
        # their objectives' CPU seconds (what the configurations chosen cost to train), per run
        "trial_s_per_run": per_run_mean("trial_s"),
        "objective_cpu_s_per_run": per_run_mean("objective_cpu_s"),
        # the machine's CPU seconds over the run (all cores), and calibo's server's among them
        "machine_cpu_s_per_run": per_run_mean("machine_cpu_s"),
        "server_cpu_s_per_run": per_run_mean("server_cpu_s"),
        "errored": {m: int(sum(v is None for r in per_run[m] for v in r.get("values", ()))) for m in methods},
        "sign_tests": {f"calibo vs {p}": report.sign_test(curves, "calibo", p, full, trials)
                       for p in PEERS if "calibo" in methods and p in methods},
    }
    cal = [r["calibo"] for r in per_run.get("calibo", [])]
    if cal:
        out["calibo"] = {k: float(np.mean([c.get(k, np.nan) for c in cal])) for k in
                         ("batch", "asked", "asks", "unused", "max_in_flight", "suggest_waits", "suggest_wait_s",
                          "suggest_none", "ask_s")}
    s, t = out["searcher_ms_per_trial"], out["driver_ms_per_trial"]
    if "calibo" in methods and "optuna_tpe" in methods:
        out["aims"] = {"searcher_time_at_most_optuna_tpe": bool(s["calibo"] <= s["optuna_tpe"]),
                       "driver_time_at_most_optuna_tpe": bool(t["calibo"] <= t["optuna_tpe"])}
    return out


def print_tables(summary: dict[str, Any]) -> None:
    methods = summary["methods"]
    rows = [[m, summary["mean_rank"][m], summary["searcher_ms_per_trial"][m], summary["driver_ms_per_trial"][m],
             summary["save_ms_per_trial"][m], summary["wall_s_per_run"][m],
             summary.get("trial_s_per_run", {}).get(m, float("nan")),
             summary.get("objective_cpu_s_per_run", {}).get(m, float("nan")),
             summary.get("machine_cpu_s_per_run", {}).get(m, float("nan")),
             summary.get("server_cpu_s_per_run", {}).get(m, float("nan")), summary["errored"][m]]
            for m in sorted(methods, key=lambda m: summary["mean_rank"][m] or 0)]
    report.print_table(f"Ray Tune, {summary['cells']} task x seed cells, best of {summary['trials']} trials: "
                       "mean rank (1 = best) and the driver's milliseconds per trial",
                       ["method", "rank", "search ms", "driver ms", "save ms", "run s", "trials s", "obj CPU s",
                        "CPU s", "server CPU", "errors"], rows,
                       first=14, width=11)
    report.print_table(f"mean best of {summary['trials']} trials per task (lower is better)",
                       ["task", *methods], [[t, *(summary["mean_best"][m][t] for m in methods)]
                                            for t in summary["tasks"]], first=22, width=12, digits=4)
    for pair, r in summary["sign_tests"].items():
        print(f"{pair:<26} wins {r['wins']:>2} / losses {r['losses']:>2} / ties {r['ties']:>2}  p={r['p']:.3g}")
    if "calibo" in summary:
        c = summary["calibo"]
        print(f"calibo searcher, mean per run: batch {c['batch']:.0f}, asked {c['asked']:.1f}, "
              f"unused {c['unused']:.1f}, most in flight on the server {c['max_in_flight']:.1f}, "
              f"suggestions that waited {c['suggest_waits']:.1f} "
              f"({1000 * c['suggest_wait_s']:.0f} ms in all: the study's creation and first ask, and asks out "
              "while trials ran), "
              f"that answered None {c['suggest_none']:.1f}; asks {c.get('asks', float('nan')):.1f} taking "
              f"{c.get('ask_s', float('nan')):.2f} s in all")
    for k, v in summary.get("aims", {}).items():
        print(f"aim {k}: {'met' if v else 'NOT met'}")


def plot(summary: dict[str, Any], path: Path) -> None:
    methods = summary["methods"]
    fig, axes = report.figure(1, 2, (6.0, 4.4))
    col = report.colors(methods)
    ax = axes[0][0]
    for m, r in summary["rank_curve"].items():
        ax.plot(np.arange(1, len(r) + 1), r, label=m, color=col[m], lw=2.4 if m == "calibo" else 1.2)
    ax.set_title(f"Ray Tune, {summary.get('in_flight', 8)} in flight: mean rank of best-so-far "
                 f"({summary['cells']} cells)", fontsize=9)
    ax.set_xlabel("completed trials")
    ax.set_ylabel("mean rank (lower is better)")
    ax.legend(fontsize=7)
    ax = axes[0][1]
    x = np.arange(len(methods))
    ax.bar(x - 0.2, [summary["searcher_ms_per_trial"][m] for m in methods], 0.4, label="in the searcher",
           color=[col[m] for m in methods])
    ax.bar(x + 0.2, [summary["driver_ms_per_trial"][m] for m in methods], 0.4, label="in the search algorithm",
           color=[col[m] for m in methods], alpha=0.45)
    ax.set_xticks(x, methods, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("driver milliseconds per trial (log)")
    ax.set_title("Tune driver time per trial: searcher (solid), with Tune's trial creation (light)", fontsize=9)
    report.save_figure(fig, path)


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--tasks", default=DEFAULT_TASKS, help="comma list of task names (harness.tasks)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--calibo-batch", type=int, default=None,
                    help="CaliboSearch's batch (trials asked ahead); default: the searcher's (2)")
    ap.add_argument("--cpus", type=float, default=float(os.cpu_count() or 2), help="CPUs Ray gives the trials")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 task, 1 seed, 16 trials")
    ap.add_argument("--out", default=str(report.RESULTS / "ray_tune.json"))
    ap.add_argument("--resume", action="store_true",
                    help="skip the runs <out>.partial.json holds (or <out> itself, when no partial file is left)")
    ap.add_argument("--peers-from", default=None,
                    help="rank against the other methods' runs in this earlier result file (same tasks, seeds "
                         "and trials) instead of running them: e.g. a calibo setting against ray_tune.json's peers")
    args = ap.parse_args(argv)
    if args.quick:
        args.tasks, args.seeds, args.trials = args.tasks.split(",")[0], 1, 16
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if bad := [m for m in methods if m not in METHODS]:
        sys.exit(f"unknown methods {bad}: choose from {', '.join(METHODS)}")
    tasks = select(args.tasks)
    seeds = range(args.seed_offset, args.seed_offset + args.seeds)
    out, partial = Path(args.out), Path(args.out).with_suffix(".partial.json")
    earlier = partial if partial.exists() else out
    runs: list[dict[str, Any]] = report.read_json(earlier)["runs"] if args.resume and earlier.exists() else []
    runs = [r for r in runs if r["method"] in methods]
    done = {(r["method"], r["task"], r["seed"]) for r in runs}
    jobs = [(m, t, s) for s in seeds for t in tasks for m in methods if (m, t, s) not in done]
    meta = {"methods": methods, "tasks": tasks, "seeds": list(seeds), "trials": args.trials,
            "in_flight": args.in_flight, "calibo_batch": args.calibo_batch, "cpus": args.cpus, "quick": args.quick,
            "versions": versions()}
    with contextlib.suppress(Exception):
        from importlib import metadata

        meta["versions"]["ray"] = metadata.version("ray")
    t_start = time.time()

    import ray
    from tqdm import tqdm

    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    logging.getLogger("ray").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="calibo-ray-bench-") as tmp, contextlib.ExitStack() as stack:
        tmp_path = Path(tmp)
        base_url, server_pid = None, None
        if "calibo" in methods and jobs:
            db = stack.enter_context(database("sqlite", tmp_path, "ray"))
            base_url, _, server_pid = stack.enter_context(calibo_server(db, tmp_path, "ray", workers=1))
        ray.init(num_cpus=max(1, int(np.ceil(args.cpus))), include_dashboard=False, log_to_driver=False,
                 configure_logging=True, logging_level=logging.ERROR)
        stack.callback(ray.shutdown)
        for method, task, seed in tqdm(jobs, desc="ray tune runs", file=sys.stderr):
            cpu0 = cpu_seconds(server_pid)
            try:
                run = run_one(method, task, seed, args.trials, args.in_flight, args.cpus, base_url,
                              tmp_path / "tune", args.calibo_batch)
            except Exception as e:  # one run crashing is reported, not fatal
                log(f"run {(method, task, seed)} failed: {e!r}")
                continue
            cpu1 = cpu_seconds(server_pid)
            run["machine_cpu_s"] = cpu1["machine"] - cpu0["machine"]
            run["server_cpu_s"] = cpu1["server"] - cpu0["server"]  # 0 for the Optuna runs: the server idles
            runs.append(run)
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(report.dumps({"meta": meta, "runs": runs}))
    meta["wall_seconds"] = time.time() - t_start
    if args.peers_from:  # the other methods' runs on the same cells, from the earlier file
        cells = {(t, s) for t in tasks for s in seeds}
        runs += [r for r in report.read_json(args.peers_from)["runs"]
                 if r["method"] not in methods and (r["task"], r["seed"]) in cells]
        meta["peers_from"] = Path(args.peers_from).name
    summary = summarize(runs, args.trials) | {"in_flight": args.in_flight}
    print_tables(summary)
    out = report.write_json(out, {"meta": meta, "summary": summary, "runs": runs}, lambda r: ["minimize"])
    plot(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
