"""A crowd on a fresh ``calibo serve``: how soon asks carry a fitted prediction, and the fit lag.

For every task and seed a FRESH ``calibo serve`` (SQLite in a temp dir, ``--workers``
fit processes; the crowd starts as soon as ``/healthz`` says ready) gets a new
study and ``--clients`` threads (``benchmarks/crowd``'s :class:`Crowd`, one
keep-alive ``httpx.Client`` each) loop ask -> "train" -> tell until ``--trials``
trials are told. Training is a sleep drawn per trial (slot k of the run always
gets the k-th draw): lognormal, median ``--duration`` s, sigma ``--sigma``, at
most 20 medians; the told value is the task's objective. The same threads drive
Optuna's GPSampler (in-memory storage, ``study.ask()`` / ``study.tell()`` from
the threads) with the same draws.

Recorded per ask (calibo): its order (the trial number + 1: the server numbers
trials in ask order), when it was answered, whether ``prediction`` was null, the
prediction's ``fitted_on`` (observations its snapshot saw) and the tells
acknowledged by then (``completed``). Reported per task and seed:

* ``unpredicted``: asks answered without a prediction (the first ``n_warmup``
  (15) asks are quasi-random by design: a 32-client crowd cannot do better
  than ~32 + the asks during the first fit);
* ``last_unpredicted``: the highest ask order served without a prediction (the aim
  with 32 clients on a fresh server: <= 60);
* ``fit lag`` over the asks with a prediction: in trials, ``completed - fitted_on``;
  in seconds, how long the oldest tell not in the snapshot had been acknowledged
  (0 when the snapshot had them all); median and p95;
* ``best@50`` / ``best@100``: best value among the first 50 / 100 acknowledged
  tells, calibo and optuna_gp;
* the study's surrogate status at the end, and the seconds the server took to report ready.

    python -m benchmarks.crowd_live                          # 3 tasks x 3 seeds, 32 clients
    python -m benchmarks.crowd_live --tasks branin,hartmann6 --seeds 2 --code head

Writes the key "live" of benchmarks/results/crowd.json (the file's other keys are
kept) and benchmarks/results/crowd_live.png.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.crowd import Crowd, create_study, server_on, study_view
from benchmarks.harness import report
from benchmarks.harness.peers import optuna_params
from benchmarks.harness.servers import freeze_code, terminate, versions
from benchmarks.harness.tasks import TASKS, Task
from benchmarks.harness.timing import log, progress_bar

DEFAULT_TASKS = ",".join(t for t in ("branin", "camel6", "hartmann6") if t in TASKS)
N_WARMUP = 15  # EngineConfig's default: the studies here use it
AT = (50, 100)


def durations(n: int, seed: int, median: float, sigma: float) -> list[float]:
    """The seconds slot k's training sleeps: lognormal, heavy-tailed, the same for every system."""
    rng = np.random.default_rng(10_007 + seed)
    return np.minimum(rng.lognormal(math.log(median), sigma, n), 20 * median).tolist()


def best_at(values: list[float], k: int, direction: str) -> float | None:
    if len(values) < k:
        return None
    return float(min(values[:k]) if direction == "minimize" else max(values[:k]))


def _q(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 3) if xs else None


class AskLog:
    """``Crowd.on_ask``: one record per answered ask, with the tells acknowledged by then."""

    def __init__(self) -> None:
        self.crowd: Crowd | None = None
        self.rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, slot: int, trial: dict[str, Any], t: float) -> None:
        pred = trial.get("prediction")
        row = {"order": int(trial["number"]) + 1, "t": round(t, 3), "predicted": pred is not None,
               "fitted_on": pred.get("fitted_on") if pred else None,
               "completed": self.crowd.acked_count if self.crowd else 0}
        with self._lock:
            self.rows.append(row)


def ask_stats(rows: list[dict[str, Any]], acked_at: list[float]) -> dict[str, Any]:
    """Asks without a prediction and the fit lag of those with one (see the module's docstring)."""
    rows = sorted(rows, key=lambda r: r["order"])
    bare = [r for r in rows if not r["predicted"]]
    lag_n, lag_s = [], []
    for r in rows:
        if r["predicted"]:
            k = int(r["fitted_on"])
            lag_n.append(max(0, r["completed"] - k))
            lag_s.append(max(0.0, r["t"] - acked_at[k]) if r["completed"] > k and k < len(acked_at) else 0.0)
    return {
        "asks": len(rows), "unpredicted": len(bare),
        "unpredicted_after_warmup": sum(r["completed"] >= N_WARMUP for r in bare),
        "first_predicted": next((r["order"] for r in rows if r["predicted"]), None),
        "last_unpredicted": max((r["order"] for r in bare), default=None),
        "lag_trials": {"p50": _q(lag_n, 50), "p95": _q(lag_n, 95)},
        "lag_s": {"p50": _q(lag_s, 50), "p95": _q(lag_s, 95)},
    }


def run_calibo(task: Task, seed: int, args: argparse.Namespace, tmp: Path, bar: Any) -> dict[str, Any]:
    label = f"{task.name}-{seed}"
    load = os.getloadavg()[0]  # this machine's other work slows the fit process (nice 10) most
    t0 = time.perf_counter()
    with server_on(f"sqlite:///{tmp / label}.db", tmp / f"server-{label}.log", workers=args.workers,
                   code=tmp / "code") as srv:
        ready_s = time.perf_counter() - t0
        sid = create_study(srv.url, f"live-{label}", seed, task=task)
        asks = AskLog()
        sleep = durations(args.trials, seed, args.duration, args.sigma)
        crowd = Crowd(srv.url, sid, clients=args.clients, trials=args.trials, objective=task.objective,
                      seed=seed, duration=sleep.__getitem__, on_ask=asks)
        asks.crowd = crowd
        finished = crowd.start().join(args.timeout, bar)
        status = study_view(srv.url, sid)["surrogate_status"]
        tail = srv.tail(30)
    pairs = crowd.pairs()  # by when their tell was acknowledged
    values = [crowd.acked[tid] for _, tid, _, _ in pairs]
    summary = crowd.summary()
    problems = ([] if finished else ["the crowd did not finish"]) + [
        f"{k}: {summary[k]}" for k in ("failed_permanently", "crashed", "answers_500")
        if summary[k] and summary[k] != {"ask": 0, "tell": 0, "total": 0}]
    out = {"system": "calibo", "task": task.name, "seed": seed, "loadavg_1m": load,
           "server_ready_s": round(ready_s, 3),
           "wall_s": summary["wall_s"], "told": len(values),
           **{f"best@{k}": best_at(values, k, task.direction) for k in AT},
           **ask_stats(asks.rows, [p[3] for p in pairs]), "surrogate_status": status,
           "ask_ms_p50": summary["ask_ms"].get("p50"), "asks_log": sorted(asks.rows, key=lambda r: r["order"]),
           "values": values, "problems": problems}
    if problems:
        out["server_log_tail"] = tail
    return out


def run_optuna(task: Task, seed: int, args: argparse.Namespace, bar: Any) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GPSampler is experimental and says so
        study = optuna.create_study(direction=task.direction, sampler=optuna.samplers.GPSampler(seed=seed))
    sleep = durations(args.trials, seed, args.duration, args.sigma)
    lock = threading.Lock()
    slots = iter(range(args.trials))
    values: list[float] = []
    ask_s: list[float] = []
    t0 = time.perf_counter()

    def client() -> None:
        while True:
            with lock:
                slot = next(slots, None)
            if slot is None:
                return
            a = time.perf_counter()
            trial = study.ask()
            params = optuna_params(trial, task.space)
            took = time.perf_counter() - a
            value = float(task.objective(params))
            time.sleep(sleep[slot])
            study.tell(trial, value)
            with lock:
                values.append(value)
                ask_s.append(took)
                bar(len(values), args.trials)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(args.timeout)
    return {"system": "optuna_gp", "task": task.name, "seed": seed, "wall_s": round(time.perf_counter() - t0, 3),
            "told": len(values), **{f"best@{k}": best_at(values, k, task.direction) for k in AT},
            "ask_ms_p50": _q([1000 * s for s in ask_s], 50), "values": values, "problems": []}


# ------------------------------------------------------------------ report
def _f(v: Any, w: int, d: int = 3) -> str:
    if v is None:
        return f"{'-':>{w}}"
    return f"{v:>{w}.{d}f}" if isinstance(v, float) else f"{v:>{w}}"


def print_table(runs: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    print(f"\ncalibo serve (fresh, {meta['args']['workers']} fit worker(s)) under {meta['args']['clients']} "
          f"clients, {meta['args']['trials']} trials, training ~ lognormal(median {meta['args']['duration']} s, "
          f"sigma {meta['args']['sigma']}); git {meta['server_code'].get('git_commit', '?')[:10]} "
          f"({meta['args']['code']}); {meta['cpu_count']} cores")
    head = (f"{'task':<11}{'seed':>4}{'load':>5}{'ready s':>8}{'wall s':>7}{'unpred':>7}{'>=warm':>7}{'1st pred':>9}"
            f"{'last unp':>9}{'lag n p50':>10}{'p95':>5}{'lag s p50':>10}{'p95':>6}{'best@50':>10}{'best@100':>10}"
            f"{'gp@50':>10}{'gp@100':>10}")
    print(head)
    print("-" * len(head))
    peer = {(r["task"], r["seed"]): r for r in runs if r["system"] == "optuna_gp"}
    for r in (x for x in runs if x["system"] == "calibo"):
        o = peer.get((r["task"], r["seed"]), {})
        print(f"{r['task']:<11}{r['seed']:>4}{_f(r['loadavg_1m'], 5, 1)}{_f(r['server_ready_s'], 8, 1)}"
              f"{_f(r['wall_s'], 7, 1)}"
              f"{_f(r['unpredicted'], 7)}{_f(r['unpredicted_after_warmup'], 7)}{_f(r['first_predicted'], 9)}"
              f"{_f(r['last_unpredicted'], 9)}{_f(r['lag_trials']['p50'], 10, 0)}{_f(r['lag_trials']['p95'], 5, 0)}"
              f"{_f(r['lag_s']['p50'], 10, 2)}{_f(r['lag_s']['p95'], 6, 2)}{_f(r['best@50'], 10)}"
              f"{_f(r['best@100'], 10)}{_f(o.get('best@50'), 10)}{_f(o.get('best@100'), 10)}")
    print("load: the machine's 1-min load average as the run began; unpred: asks without a prediction "
          "(>=warm: of them, asked with >= 15 tells acknowledged); 1st pred / "
          "last unp: ask order of the first with a prediction / the last without; lag: completed - fitted_on "
          "(trials) and the age of the oldest unfitted tell (s) over asks with a prediction; gp: optuna GPSampler "
          "with the same threads and sleeps.")
    for r in runs:
        for p in r.get("problems", []):
            print(f"PROBLEM {r['system']} {r['task']} seed {r['seed']}: {p}")


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    fig, grid = report.figure(1, 3, figsize=(18, 5))
    axes = grid[0]
    cmap = matplotlib.colormaps["tab10"]
    ours = [r for r in runs if r["system"] == "calibo"]
    for i, r in enumerate(ours):
        log_ = r["asks_log"]
        order = [a["order"] for a in log_]
        axes[0].step(order, np.cumsum([not a["predicted"] for a in log_]), where="post", color=cmap(i % 10),
                     label=f"{r['task']} s{r['seed']} (last {r['last_unpredicted']})")
        pts = [(a["order"], a["completed"] - a["fitted_on"]) for a in log_ if a["predicted"]]
        if pts:
            axes[1].plot(*zip(*pts, strict=True), ".", ms=4, color=cmap(i % 10), label=f"{r['task']} s{r['seed']}")
    axes[0].axvline(60, color="k", ls=":", lw=1, label="aim: none after ask 60")
    axes[0].set(xlabel="ask order", ylabel="asks without a prediction (cumulative)",
                title="asks served without a fitted prediction")
    axes[1].set(xlabel="ask order", ylabel="completed - fitted_on (trials)", title="fit lag at each ask")
    tasks = sorted({r["task"] for r in runs})
    for j, (system, color) in enumerate((("calibo", "tab:blue"), ("optuna_gp", "tab:orange"))):
        for t_i, task in enumerate(tasks):
            opt = TASKS[task].optimum or 0.0
            vals = [best_at(r["values"], len(r["values"]), TASKS[task].direction) - opt for r in runs
                    if r["system"] == system and r["task"] == task and r["values"]]
            axes[2].scatter([t_i + 0.15 * (2 * j - 1)] * len(vals), np.maximum(vals, 1e-9), color=color,
                            label=system if t_i == 0 else None)
    axes[2].set_yscale("log")
    axes[2].set_xticks(range(len(tasks)), tasks)
    axes[2].set(ylabel="best - optimum (log)", title="best of all trials told (one point per seed)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    report.save_figure(fig, path)


def save(out: Path, live: dict[str, Any]) -> None:
    """Read-modify-write of the key "live": other scripts write the file's other keys."""
    data: dict[str, Any] = {}
    if out.exists():
        try:
            data = json.loads(out.read_text())
        except ValueError:
            log(f"{out} is not JSON: rewritten")
    data["live"] = live
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(report.dumps(data))
    tmp.replace(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=DEFAULT_TASKS, help=f"of {sorted(TASKS)}")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--duration", type=float, default=1.0, help="median seconds of a trial's training")
    ap.add_argument("--sigma", type=float, default=1.0, help="lognormal sigma of the training time")
    ap.add_argument("--workers", type=int, default=1, help="fit processes of each server")
    ap.add_argument("--peers", default="optuna_gp", help="optuna_gp, or '' for none")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one crowd may take")
    ap.add_argument("--code", choices=("worktree", "head"), default="worktree",
                    help="server code: the checkout's files at the start (frozen), or HEAD")
    ap.add_argument("--out", default=str(report.RESULTS / "crowd.json"))
    args = ap.parse_args(argv)
    tasks = [TASKS[t] for t in args.tasks.split(",") if t]
    signal.signal(signal.SIGTERM, terminate)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "args": vars(args),
        "cpu_count": os.cpu_count(), "loadavg_at_start": os.getloadavg(), "versions": versions(),
        "n_warmup": N_WARMUP,
    }
    runs: list[dict[str, Any]] = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="calibo-crowd-live-") as tmpdir:
        tmp = Path(tmpdir)
        meta["server_code"] = freeze_code(tmp / "code", args.code)
        for task in tasks:
            for seed in range(args.seeds):
                with progress_bar(args.trials, f"calibo {task.name} s{seed}") as bar:
                    r = run_calibo(task, seed, args, tmp, bar)
                runs.append(r)
                log(f"calibo {task.name} seed {seed}: {r['unpredicted']} asks without a prediction, last "
                    f"#{r['last_unpredicted']}, lag p50 {r['lag_trials']['p50']} trials, best@100 {r['best@100']}")
                if "optuna_gp" in args.peers:
                    with progress_bar(args.trials, f"optuna_gp {task.name} s{seed}") as bar:
                        runs.append(run_optuna(task, seed, args, bar))
    meta["wall_seconds"] = round(time.time() - t0, 1)
    meta["loadavg_at_end"] = os.getloadavg()
    print_table(runs, meta)
    save(out, {"meta": meta, "runs": runs})
    png = out.with_name("crowd_live.png")
    plot(runs, png)
    print(f"wrote the key 'live' of {out}, and {png}")
    if any(r["problems"] for r in runs):
        sys.exit(2)


if __name__ == "__main__":
    main()
