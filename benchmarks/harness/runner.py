"""How a suite's runs are run: seeds, trials in flight, a progress bar, resume and merge.

* :func:`run_pool`: independent runs on a process pool (one core each), a tqdm progress bar; every
  tenth finished run rewrites ``<out>.partial.json``, so a run cut off leaves what it did.
* :func:`run_sequential`: one study, one trial in flight (calibo in-process with its timings, an
  ask/tell peer, or a loop-only peer's own loop).
* :func:`run_crowd` / :func:`simulate`: K trials in flight on a *virtual* clock (nothing sleeps):
  K trials are asked at the start; trial number i (in order of ask) runs for a duration drawn
  from a lognormal(0, 1), seeded by (task, seed, K) (:func:`durations`), so every method sees the
  same duration for its i-th trial; whenever the running trial with the earliest finish time
  completes (ties by trial number) it is evaluated and told, and one new trial is asked until
  ``trials`` have been asked. A run's ``values`` are in order of completion.
* :func:`add_run_arguments` / :func:`collect`: the options every search-style suite shares
  (``--tasks --seeds --seed-offset --trials --workers --out``), and ``--merge`` (combine result
  files, later ones winning per run), ``--skip`` (result files whose runs are not repeated) and
  ``--resume`` (skip what ``<out>.partial.json`` already holds).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import peers
from benchmarks.harness.report import dumps, read_json
from benchmarks.harness.tasks import TASKS


# ------------------------------------------------------------------ the pool
def run_pool(fn: Callable[..., dict[str, Any]], jobs: Sequence[tuple], workers: int, desc: str,
             partial: Path | None = None, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``fn(*job)`` for every job on ``workers`` processes; the runs that finished, in finishing order.

    A run that crashes is reported on stderr, not fatal. With ``partial``, every tenth finished run
    and the last rewrite it with ``{"meta": meta, "runs": [...]}`` (what ``--resume`` reads).
    """
    from tqdm import tqdm

    runs: list[dict[str, Any]] = []
    if not jobs:
        return runs
    with ProcessPoolExecutor(max(1, workers)) as pool:
        futs = {pool.submit(fn, *j): j for j in jobs}
        for n, f in enumerate(tqdm(as_completed(futs), total=len(futs), desc=desc), 1):
            try:
                runs.append(f.result())
            except Exception as e:  # one run crashing is reported, not fatal
                print(f"run {futs[f]} failed: {e!r}", file=sys.stderr)
            if partial is not None and (n % 10 == 0 or n == len(futs)):
                partial.write_text(dumps({"meta": meta or {}, "runs": runs}))
    return runs


# ------------------------------------------------------------------ options, resume, merge
def add_run_arguments(ap: argparse.ArgumentParser, out: Path, tasks: str = "", seeds: int = 10,
                      trials: int = 100) -> None:
    """Tasks, seeds, trials, workers and the output / merge / skip / resume options of a suite."""
    ap.add_argument("--tasks", default=tasks, help="comma list of task names, or real / heldout")
    ap.add_argument("--seeds", type=int, default=seeds)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--trials", type=int, default=trials)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(out))
    ap.add_argument("--merge", nargs="*", help="result files to combine (later ones win per run) instead of running")
    ap.add_argument("--skip", nargs="*", default=[], help="result files whose runs are not repeated")
    ap.add_argument("--resume", action="store_true", help="skip the runs <out>.partial.json already holds")


def seeds_of(args: argparse.Namespace) -> range:
    return range(args.seed_offset, args.seed_offset + args.seeds)


def load_runs(files: Sequence[str | Path]) -> list[dict[str, Any]]:
    return [r for f in files for r in read_json(f)["runs"]]


def merge_parts(files: Sequence[str | Path], key: Callable[[dict], tuple], trials: int
                ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The runs of result ``files``, later ones winning per ``key(run)``, and the merged meta."""
    parts = [read_json(f) for f in files]
    runs = list({key(r): r for p in parts for r in p["runs"]}.values())
    trials = min((t for p in parts if (t := p.get("meta", {}).get("trials", trials)) is not None), default=trials)
    # the parts' file names, not their paths: a result file names nothing outside the repository
    return runs, {"merged": [Path(f).name for f in files], "parts": [p.get("meta", {}) for p in parts],
                  "trials": trials}


def collect(args: argparse.Namespace, jobs: list[tuple], fn: Callable[..., dict[str, Any]],
            key: Callable[[dict], tuple], job_key: Callable[[tuple], tuple], desc: str,
            meta: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The runs of a suite: merged from ``--merge`` files, or the jobs run less those ``--skip`` and
    ``--resume`` already hold (kept with the new ones)."""
    if args.merge:
        return merge_parts(args.merge, key, args.trials)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial.json")
    skipped = load_runs(list(args.skip) + ([partial] if args.resume and partial.exists() else []))
    done = {key(r) for r in skipped}
    todo = [j for j in jobs if job_key(j) not in done]
    runs = skipped + run_pool(fn, todo, args.workers, desc, partial, meta)
    return runs, {**meta, "workers": args.workers, "cpu_count": os.cpu_count()}


# ------------------------------------------------------------------ one trial in flight
def sequential_study(task_name: str, trials: int, seed: int, config: dict[str, Any]):
    """One in-process calibo study, one trial in flight: ``(optimizer, values, wall_s, objective_s)``."""
    from calibo.engine import Optimizer

    task = TASKS[task_name]
    opt = Optimizer(task.space, direction=task.direction, seed=seed, config=config)
    values, obj_s = [], 0.0
    t0 = time.perf_counter()
    for _ in range(trials):
        s = opt.ask()[0]
        t = time.perf_counter()
        v = float(task.objective(s.params))
        obj_s += time.perf_counter() - t
        opt.tell(s.params, v)
        values.append(v)
    return opt, values, time.perf_counter() - t0, obj_s


def run_sequential(method: str, task_name: str, trials: int, seed: int) -> dict[str, Any]:
    """One sequential run of ``method`` (calibo records its engine timings); Optuna's TPE without
    the constant liar, which has nothing to lie about here."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    task = TASKS[task_name]
    if peers.is_calibo(method):
        opt, values, wall, obj_s = sequential_study(task_name, trials, seed, peers.calibo_overrides(method))
        res = {"values": values, "wall_s": wall, "overhead_s": wall - obj_s, "timings": opt.timings,
               "surrogate": opt.config.surrogate, "acquisition": opt.config.acquisition}
    elif method in peers.LOOP_ONLY:
        res = peers.run_loop(method, task.space, task.direction, task.objective, trials, seed)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            peer = peers.make(method, task.space, [task.direction], seed, trials, constant_liar=False)
            sim = simulate(peer, task.objective, np.ones(trials), 1, trials)
            wall = time.perf_counter() - t0
        res = {"values": sim["values"], "wall_s": wall, "overhead_s": wall - sim["objective_s"]}
    return {"method": method, "task": task_name, "seed": seed, **res}


# ------------------------------------------------------------------ K in flight
def durations(task_name: str, seed: int, k: int, n: int) -> np.ndarray:
    """Trial i's virtual run time: lognormal(0, 1), the same for every method at (task, seed, K)."""
    rng = np.random.default_rng([zlib.crc32(task_name.encode()), seed, k])
    return rng.lognormal(0.0, 1.0, n)


def simulate(peer: peers.Peer, objective: Callable[[dict[str, Any]], Any], dur: np.ndarray, k: int,
             trials: int) -> dict[str, Any]:
    """K in flight on a virtual clock: ``values`` (lists, with several objectives) in order of
    completion, ``order`` (each one's trial number), ``time`` (its completion time), ``objective_s``."""
    running: list[tuple[float, int, Any, dict[str, Any]]] = []  # (finish, trial number, handle, params)
    values, order, done_at, obj_s = [], [], [], 0.0

    def launch(now: float) -> None:
        i = len(order) + len(running)
        handle, params = peer.ask(1)[0]
        heapq.heappush(running, (now + float(dur[i]), i, handle, params))

    for _ in range(min(k, trials)):
        launch(0.0)
    while running:
        now, i, handle, params = heapq.heappop(running)
        t = time.perf_counter()
        v = objective(params)
        v = [float(x) for x in v] if isinstance(v, list | tuple) else float(v)  # several objectives: a list
        obj_s += time.perf_counter() - t
        peer.tell(handle, v)
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
    """One study of ``trials`` trials with ``k`` in flight (a loop-only peer: K = 1 only); calibo's
    runs record their calibration (:func:`calibration`)."""
    task = TASKS[task_name]
    if method in peers.LOOP_ONLY and k != 1:
        raise ValueError(f"{method} has no ask/tell: it runs with one trial in flight only")
    peer = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0, c0 = time.perf_counter(), time.process_time()
        if method in peers.LOOP_ONLY:
            r = peers.run_loop(method, task.space, task.direction, task.objective, trials, seed)
            sim = {"values": r["values"], "order": list(range(len(r["values"]))), "time": None,
                   "objective_s": r["wall_s"] - r["overhead_s"]}
        else:
            peer = peers.make(method, task.space, [task.direction], seed, trials)  # outside the clock: imports
            t0, c0 = time.perf_counter(), time.process_time()
            sim = simulate(peer, task.objective, durations(task_name, seed, k, trials), k, trials)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    seen = list(dict.fromkeys(f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught))
    extra = calibration(peer.opt.records) if isinstance(peer, peers.CaliboPeer) else {}
    return {"method": method, "task": task_name, "seed": seed, "k": k, **sim, "wall_s": wall, "cpu_s": cpu,
            "overhead_s": wall - sim["objective_s"], **extra, "warnings": seen[:5]}


def crowd_key(r: dict[str, Any]) -> tuple:
    return (r["method"], r["task"], r["seed"], r["k"])


def crowd_job_key(j: tuple) -> tuple:
    """A :func:`run_crowd` job ``(method, task, trials, k, seed)`` as its run's :func:`crowd_key`."""
    m, t, _, k, s = j
    return (m, t, s, k)


def task_direction(run: dict[str, Any]) -> list[str]:
    """A run's objective directions, for :func:`report.write_json` (runs keyed by ``task``)."""
    return [TASKS[run["task"]].direction]


def json_arg(text: str) -> Any:
    """An option's JSON value (``--settings '{"n_warmup": 10}'``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
