"""Calibration study after paper 002, Table 1.

Each run samples 15 quasi-random configurations, then greedily by the expected
value of an unconformalized QGBM surrogate (acquisition ``mean``), so the
sampled sequence is the same for every variant and the feedback shift from
the random to the greedy phase is immediate. From the 32nd observation on,
before each new outcome is revealed, every variant predicts that
configuration's intervals (the study default's pairs: 90/70/50/30/10%) from the
observations so far; then the outcome is told to its adaptive state:

    unconformalized | split | split+ACI | split+DtACI | CV+ | CV+ +ACI | CV+ +DtACI

Metrics per interval level (paper 002, Table 1): rolling coverage error
(non-overlapping windows of 20), mean width, LLR of breaches vs the
configuration's features; ranks across variants within each task and level,
averaged. Everything goes through the engine's fit / select / adapt. (The figures on the
calibration page were measured with the paper's explicit 25/50/75% grid, the ``levels`` setting
the engine no longer has; that code last lived at commit 26d3c61.)

    python -m benchmarks.calibration --in-flight "" [--tasks hartmann6,mixed,...] [--seeds 5] [--trials 100]

Writes benchmarks/results/calibration.json and calibration.png.

Crowd rows (``--in-flight 1,8,32``). The engine's default study (EngineConfig(),
10 levels -> 90/70/50/30/10% intervals; ``--settings`` JSON changes it) is driven
by its real path with K trials in flight on a virtual clock: durations
lognormal(0, 1), seeded by task, seed and K; whenever a trial completes, its
outcome is told and a new one is asked. Once the study is warmed up
(``EngineConfig.warmed_up``) each ask fits on the observations completed by then and calls
``select(..., pending=<the running configurations>)``; each pair's adaptive
state is updated when the trial completes (late, out of order). For every
conformalized prediction the benchmark keeps ``beta = sup{a : y in C(a)}`` per
pair and variant, and replays the adaptive states on them (``adapt``'s update,
so the default row is the driver itself): coverage is ``alpha at ask < beta``,
which is what the shown interval covers (each pair's own conformal set). Two
rows read the driver's predictions as shown: its intervals, and the pairs of
its sorted quantiles (what predictions showed before). Variants on the same
asked points, the split ones from one fit of the same study with
``conformal="split"`` per ask:

    default (adaptive + ACI) | adaptive + DtACI | split (+ACI, +DtACI)

"late adapt at current alpha" is the default fed as adapt did before the
late-feedback correction (``conformal.issued_beta``).

Decomposition of the crowd's drift (the same asked sequence throughout):
(a) late feedback: the default with adapt applied right after each ask, in
ask order, instead of at completion; (b) stale fit: as (a), with each
prediction from a fit on every trial asked before it (what a sequential run
would have known) instead of the completed ones; (c) selection shift: what
is left, (b) against the sequential (K = 1) row. Calibration gap: the mean
over pairs of |cumulative coverage - nominal| (coverage pooled over seeds per
task), averaged over tasks.

    python -m benchmarks.calibration --in-flight 1,8,32 --no-variants --tasks forrester,branin

Writes benchmarks/results/calibration_crowd.json and calibration_crowd.png.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy / torch: one core per run, as real_tuning.py

import argparse  # noqa: E402
import heapq  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from dataclasses import dataclass, field, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report, runner  # noqa: E402
from benchmarks.harness.tasks import TASKS  # noqa: E402
from benchmarks.harness.tasks import select as select_tasks  # noqa: E402
from calibo.engine import (  # noqa: E402
    ConfigError,
    EngineConfig,
    Prediction,
    SearchSpace,
    StudyState,
    fit,
    select,
)
from calibo.engine import metrics as M  # noqa: E402

# The replay of the crowd rows reads the engine's conformal sets and adaptive states directly
# (conformal.beta_of / issued_beta / pair_intervals, the warp, the warm-up points): internals, not
# the engine's public API, imported where they are used so that the module imports without them.

GRID = EngineConfig()  # the study default: 10 levels, pairs 90/70/50/30/10%
_L = np.asarray(GRID.level_grid, dtype=float)
GRID_NOMINAL = 1.0 - 2.0 * _L[: _L.size // 2]  # each pair (i, L-1-i)'s nominal coverage, widest first
NOMINAL = GRID_NOMINAL.tolist()
VARIANTS = [
    ("unconformalized", "raw", "none"),
    ("split", "split", "none"),
    ("split+ACI", "split", "aci"),
    ("split+DtACI", "split", "dtaci"),
    ("CV+", "cv+", "none"),
    ("CV+ +ACI", "cv+", "aci"),
    ("CV+ +DtACI", "cv+", "dtaci"),
]


def run_sequence(task_name: str, seed: int, trials: int, surrogate: str) -> dict:
    from calibo.engine.select import warmup_points

    task = TASKS[task_name]
    space = SearchSpace.from_dict(task.space)
    base = {"surrogate": surrogate, "n_warmup": 15}
    driver = EngineConfig(**base, acquisition="mean", conformal="raw")
    method_cfg = {m: EngineConfig(**base, conformal=m) for m in ("raw", "split", "cv+")}
    states = {name: StudyState.initial(EngineConfig(**base, adapter=ad, conformal=m), seed)
              for name, m, ad in VARIANTS}
    records: dict[str, list] = {name: [] for name, _, _ in VARIANTS}
    features: list[np.ndarray] = []
    obs: list[tuple[dict, float]] = []
    warm = space.from_unit(warmup_points(space, seed, 0, 15, set()))
    for t in range(trials):
        if t < 15:
            params = warm[t]
        else:
            snap = fit(obs, space, driver, task.direction, seed)
            params = select(snap, states["unconformalized"], space, driver, direction=task.direction,
                            asked=t, exclude=[p for p, _ in obs])[0].params
        value = float(task.objective(params))
        if t >= 32:
            unit = space.to_unit([params])
            preds = {}
            for m, cfg in method_cfg.items():
                snap_m = fit(obs, space, cfg, task.direction, seed, candidates=unit)
                preds[m] = snap_m
            for name, m, _ in VARIANTS:
                s = select(preds[m], states[name], space, method_cfg[m], direction=task.direction, asked=t)[0]
                states[name], rec = states[name].adapt(s.prediction, value)
                records[name].append(rec.to_dict())
            features.append(space.features(unit)[0])
        obs.append((params, value))
    X = np.array(features)
    out = {}
    for name, _, _ in VARIANTS:
        recs = records[name]
        covered = np.array([r["covered"] for r in recs], dtype=float)
        widths = np.array([r["width"] for r in recs], dtype=float)
        out[name] = {
            "rolling_coverage_error": M.rolling_coverage_error(covered, NOMINAL, 20).tolist(),
            "coverage": M.coverage(covered).tolist(),
            "width": M.mean_width(widths).tolist(),
            "llr": [M.llr_breaches(X, 1 - covered[:, j]) for j in range(len(NOMINAL))],
            "cumulative": M.cumulative_coverage(covered).tolist(),
            "alpha_final": [s.alpha for s in states[name]],
        }
    best = min(v for _, v in obs) if task.direction == "minimize" else max(v for _, v in obs)
    return {"task": task_name, "seed": seed, "variants": out, "best": best}


def summarize(runs: list[dict]) -> dict:
    tasks = sorted({r["task"] for r in runs})
    names = [n for n, _, _ in VARIANTS]
    metrics = ("rolling_coverage_error", "llr", "width")
    means = {m: {n: {} for n in names} for m in (*metrics, "coverage")}
    ranks = {m: {n: [] for n in names} for m in metrics}
    for t in tasks:
        rs = [r for r in runs if r["task"] == t]
        for m in (*metrics, "coverage"):
            for n in names:
                means[m][n][t] = np.mean([r["variants"][n][m] for r in rs], axis=0).tolist()
        for m in metrics:
            for j in range(len(NOMINAL)):
                vals = np.array([means[m][n][t][j] for n in names])
                order = vals.argsort().argsort() + 1.0  # 1 = best (lowest)
                for n, rk in zip(names, order, strict=True):
                    ranks[m][n].append(float(rk))
    table = {n: {m: float(np.mean(ranks[m][n])) for m in metrics} for n in names}
    for n in names:
        table[n]["rce_mean"] = float(np.mean([means["rolling_coverage_error"][n][t] for t in tasks]))
        table[n]["coverage_mean"] = np.mean([means["coverage"][n][t] for t in tasks], axis=0).tolist()
    return {"tasks": tasks, "rank_table": table, "per_task_means": means}


def plot(runs: list[dict], summary: dict, path: Path) -> None:
    names = [n for n, _, _ in VARIANTS]
    fig, grid = report.figure(1, len(NOMINAL) + 1, (5.0, 4.5))
    axes = grid[0]
    for j, nom in enumerate(NOMINAL):
        ax = axes[j]
        for n in names:
            curves = [np.asarray(r["variants"][n]["cumulative"])[:, j] for r in runs]
            L = min(len(c) for c in curves)
            ax.plot(np.arange(32, 32 + L), np.mean([c[:L] for c in curves], axis=0), label=n)
        ax.axhline(nom, color="k", ls="--", lw=1)
        ax.set_title(f"cumulative coverage, {int(nom * 100)}% interval")
        ax.set_xlabel("iteration")
    axes[0].legend(fontsize=8)
    tab = summary["rank_table"]
    x = np.arange(len(names))
    for k, m in enumerate(("rolling_coverage_error", "llr", "width")):
        axes[-1].bar(x + (k - 1) * 0.27, [tab[n][m] for n in names], 0.27, label=m)
    axes[-1].set_xticks(x, names, rotation=45, ha="right", fontsize=8)
    axes[-1].set_title("mean rank (lower is better)")
    axes[-1].legend(fontsize=8)
    report.save_figure(fig, path, dpi=110)


# ----------------------------------------------------------------------- crowd
# row: (beta key, adapter, feedback), feedback "late": at completion, as adapt does it (the issued
# interval's outcome, conformal.issued_beta); "current": at completion, read at the state's current
# alpha (adapt before the late-feedback correction); "now": right after the ask, in ask order
CROWD_ROWS = {
    "default (adaptive+ACI)": ("default", "aci", "late"),
    "adaptive+DtACI": ("default", "dtaci", "late"),
    "default, late adapt at current alpha": ("default", "aci", "current"),
    "(a) default, adapt in ask order": ("default", "aci", "now"),
    "(b) default, fresh fit + ask order": ("fresh", "aci", "now"),
    "default, fresh fit, late adapt": ("fresh", "aci", "late"),
    "split": ("split", "none", "late"),
    "split+ACI": ("split", "aci", "late"),
    "split+DtACI": ("split", "dtaci", "late"),
}
OLD_DISPLAY = "default, sorted quantiles (old display)"  # the pairs of the driver's sorted quantiles


class Sets:
    """One prediction's stored point sets (``Bounds.packed``) and its outcome, internal orientation."""

    def __init__(self, points: np.ndarray, y: float) -> None:
        from calibo.engine.conformal import beta_of

        self.points, self.y = np.asarray(points, dtype=float), y
        self.betas = [beta_of(self.points[0, j], self.points[1, j], y) for j in range(self.points.shape[1])]

    @classmethod
    def of(cls, bounds: Any, row: int, y: float) -> Sets:
        """From a snapshot's ``bounds`` (the engine's conformal Bounds) at candidate ``row``."""
        return cls(bounds.packed(row), y)

    def covered(self, alphas: np.ndarray) -> list[bool]:
        """Whether the shown interval (clamped ends, nested, as a study records it) at ``alphas`` holds ``y``."""
        from calibo.engine.conformal import pair_intervals

        lows, highs = pair_intervals(self.points, alphas)
        return [bool(lo <= self.y <= hi) for lo, hi in zip(lows, highs, strict=True)]


@dataclass
class Trial:
    """One asked trial of a crowd run: what was asked, its outcome, and its point sets per variant."""

    params: dict[str, Any]
    value: float
    n_done: int  # observations completed when it was asked
    prediction: dict[str, Any] | None
    sets: dict[str, Sets] = field(default_factory=dict)
    nn_dist: float = float("nan")  # unit-cube distance to the nearest completed observation


def durations(task: str, seed: int, k: int, n: int) -> np.ndarray:
    """Heavy-tailed trial durations, lognormal(0, 1), seeded by task, seed and K (a stream of its own,
    not the search suites' ``runner.durations``: the figures were measured on it)."""
    return np.random.default_rng([zlib.crc32(task.encode()), seed, k, 5]).lognormal(0.0, 1.0, n)


class CrowdRun:
    """The engine with ``config`` (the default study unless ``--settings``) driven with ``k`` trials in
    flight on a virtual clock."""

    def __init__(self, task_name: str, seed: int, k: int, trials: int, config: EngineConfig = GRID) -> None:
        self.task, self.seed, self.k, self.trials = TASKS[task_name], seed, k, trials
        self.config = config
        # the split rows: the same study with split conformal (its conformalize_from too, so each
        # conformalized prediction of the driver has a conformalized split counterpart)
        self.split_config = replace(config, conformal="split")
        self.space = SearchSpace.from_dict(self.task.space)
        self.sign = 1.0 if self.task.direction == "minimize" else -1.0
        self.states = StudyState.initial(self.config, seed)
        self.dur = durations(task_name, seed, k, trials)
        self.asked: list[Trial] = []
        self.done: list[tuple[dict, float]] = []
        self.events: list[tuple[str, int]] = []  # ("ask" | "done", trial), in clock order

    def fit(self, obs: list[tuple[dict, float]], config: EngineConfig, pending: list[dict], **kw):
        return fit(obs, self.space, config, self.task.direction, self.seed, pending=pending, **kw)

    def ask(self, pending: list[dict]) -> Trial:
        t, done = len(self.asked), self.done
        # the engine's own rule for when the model takes over (EngineConfig.warmed_up)
        snap = self.fit(done, self.config, pending) if self.config.fits(len(done)) else None
        sug = select(snap, self.states, self.space, self.config, direction=self.task.direction,
                     asked=t, exclude=[p for p, _ in done], pending=pending, n_observed=len(done))[0]
        # the prediction as the engine keeps it (what a study stores with the trial)
        kept = None if sug.prediction is None else sug.prediction.to_dict()
        trial = Trial(sug.params, float(self.task.objective(sug.params)), len(done), kept)
        if done:
            u = self.space.to_unit([sug.params])
            trial.nn_dist = float(np.min(np.linalg.norm(self.space.to_unit([p for p, _ in done]) - u, axis=1)))
        if kept is not None and kept["method"] != "raw":
            self.score(trial, snap, pending)
        return trial

    def score(self, trial: Trial, snap, pending: list[dict]) -> None:
        """The point sets of every variant at the asked point."""
        y, sets = self.sign * trial.value, trial.sets
        pred = trial.prediction

        from calibo.engine.warp import Warp

        def warped(w: dict | None) -> float:  # point sets live on their fit's warped scale
            return float(Warp.from_dict(w).forward(y))

        sets["default"] = Sets(pred["points"], warped(pred.get("warp")))
        # the default snapshot's candidates (its fit's local search added some a split fit would not)
        split = self.fit(self.done, self.split_config, pending, candidates=snap.candidates)
        row = split.candidate_keys().index(self.space.key(trial.params))
        sets["split"] = Sets.of(split.bounds, row, warped(split.meta.warp))
        sets["fresh"] = sets["default"]  # sequential: the completed trials are all the asked ones
        if self.k > 1:
            before = [(a.params, a.value) for a in self.asked]
            fresh = self.fit(before, self.config, [], candidates=self.space.to_unit([trial.params]))
            if fresh.method != "raw":
                sets["fresh"] = Sets.of(fresh.bounds, 0, warped(fresh.meta.warp))

    def run(self) -> CrowdRun:
        running: list[tuple[float, int]] = []
        clock = 0.0
        while len(self.asked) < self.trials or running:
            while len(running) < self.k and len(self.asked) < self.trials:
                t = len(self.asked)
                self.asked.append(self.ask([self.asked[i].params for _, i in running]))
                self.events.append(("ask", t))
                heapq.heappush(running, (clock + self.dur[t], t))
            clock, t = heapq.heappop(running)
            trial = self.asked[t]
            self.done.append((trial.params, trial.value))
            pred = None if trial.prediction is None else Prediction.from_dict(trial.prediction)
            self.states, _ = self.states.adapt(pred, trial.value)
            self.events.append(("done", t))
        return self


def replay(run: CrowdRun, key: str, adapter: str, feedback: str) -> tuple[np.ndarray, np.ndarray]:
    """Coverage (T, P) of the scored trials with the adaptive states replayed: of the shown
    intervals (clamped ends, what a study records) and by the exact rule ``alpha at ask < beta``."""
    from calibo.engine.conformal import issued_beta
    from calibo.engine.state import initial_states

    states = initial_states(replace(run.config, adapter=adapter), run.seed)
    if feedback == "now":
        events = [(e, t) for t in range(len(run.asked)) for e in ("ask", "done")]
    else:
        events = run.events
    alpha_at: dict[int, np.ndarray] = {}
    for e, t in events:
        sets = run.asked[t].sets.get(key)
        if sets is None:
            continue
        if e == "ask":
            alpha_at[t] = np.array([s.alpha for s in states])
        elif feedback == "current":
            states = [s.update(b) for s, b in zip(states, sets.betas, strict=True)]
        elif adapter == "aci":  # as adapt: the breach of the interval shown at ask
            states = [s.missed(not c) for s, c in zip(states, sets.covered(alpha_at[t]), strict=True)]
        else:
            states = [s.update(issued_beta(b, s.alpha, a))
                      for s, b, a in zip(states, sets.betas, alpha_at[t], strict=True)]
    scored = [(alpha_at[t], run.asked[t].sets[key]) for t in sorted(alpha_at)]
    shown = np.array([sets.covered(a) for a, sets in scored], dtype=float)
    rule = np.array([a < np.asarray(sets.betas) for a, sets in scored], dtype=float)
    return shown, rule


def old_display(run: CrowdRun) -> np.ndarray:
    """(T, P) coverage of the pairs of the driver's sorted quantiles (shown before the fix)."""
    out = []
    for trial in (a for a in run.asked if a.sets):
        q, y = trial.prediction["quantiles"], trial.value
        out.append([q[j] <= y <= q[len(q) - 1 - j] for j in range(len(q) // 2)])
    return np.array(out, dtype=float)


def crowd_sequence(task_name: str, seed: int, k: int, trials: int, config: EngineConfig = GRID) -> dict:
    return score_run(CrowdRun(task_name, seed, k, trials, config).run())


def score_run(run: CrowdRun) -> dict:
    """A finished crowd run's coverage per row, and what the summary reads of it."""
    rows = {}
    for name, (key, adapter, feedback) in CROWD_ROWS.items():
        shown, rule = replay(run, key, adapter, feedback)
        rows[name] = {"coverage": M.coverage(shown).tolist(), "coverage_rule": M.coverage(rule).tolist(),
                      "n": int(shown.shape[0])}
    old = old_display(run)
    rows[OLD_DISPLAY] = {"coverage": M.coverage(old).tolist(), "coverage_rule": M.coverage(old).tolist(),
                         "n": int(old.shape[0])}
    scored = [a for a in run.asked if a.sets]
    return {
        "task": run.task.name, "seed": run.seed, "k": run.k, "rows": rows,
        "nn_dist": float(np.nanmean([a.nn_dist for a in scored])) if scored else float("nan"),
        "late_by": float(np.mean(feedback_lag(run.events))),
        "best": (min if run.task.direction == "minimize" else max)(a.value for a in run.asked),
    }


def feedback_lag(events: list[tuple[str, int]]) -> list[int]:
    """Per trial, how many predictions were made between its ask and its outcome."""
    asks_so_far, at_ask, lag = 0, {}, []
    for e, t in events:
        if e == "ask":
            at_ask[t] = asks_so_far
            asks_so_far += 1
        else:
            lag.append(asks_so_far - at_ask[t] - 1)
    return lag


def gap(coverage: np.ndarray) -> float:
    return M.coverage_gap(coverage, GRID_NOMINAL)


def _task_cell(rs: list[dict], name: str) -> dict:
    """One task's coverage (pooled over seeds) and gaps for a row: shown intervals and exact rule."""
    out = {}
    for field_, tag in (("coverage", ""), ("coverage_rule", "rule_")):
        cov = np.mean([r["rows"][name][field_] for r in rs], axis=0)
        out[f"{tag}coverage"], out[f"{tag}gap"] = cov.tolist(), gap(cov)
    out["run_gap"] = float(np.mean([gap(r["rows"][name]["coverage"]) for r in rs]))
    return out


def summarize_crowd(runs: list[dict]) -> dict:
    tasks = sorted({r["task"] for r in runs})
    ks = sorted({r["k"] for r in runs})
    table: dict[str, dict[str, Any]] = {}
    for name in (OLD_DISPLAY, *CROWD_ROWS):
        table[name] = {}
        for k in ks:
            per_task = {t: _task_cell([r for r in runs if r["task"] == t and r["k"] == k and r["rows"][name]["n"]],
                                      name) for t in tasks}
            cell = {m: float(np.mean([v[m] for v in per_task.values()])) for m in ("gap", "rule_gap", "run_gap")}
            cell["coverage"] = np.mean([v["coverage"] for v in per_task.values()], axis=0).tolist()
            table[name][str(k)] = {**cell, "per_task": per_task}
    crowd = {str(k): {m: float(np.mean([r[m] for r in runs if r["k"] == k]))
                      for m in ("nn_dist", "late_by")} for k in ks}
    return {"tasks": tasks, "k": ks, "table": table, "crowd": crowd}


def print_crowd(summary: dict, seeds: int, trials: int) -> None:
    ks = summary["k"]
    print(f"\nCrowd calibration gap, mean over pairs of |coverage - nominal| (90/70/50/30/10%) of the shown "
          f"intervals, coverage pooled over {seeds} seeds per task, mean over {len(summary['tasks'])} tasks, "
          f"{trials} trials; in brackets by the exact rule (an infinite end covers)")
    print(f"{'row':<40}" + "".join(f"{'K=' + str(k):>16}" for k in ks)
          + (f"{'gap(8)/gap(1)':>15}" if {1, 8} <= set(ks) else ""))
    for name, by_k in summary["table"].items():
        line = f"{name:<40}" + "".join(f"{by_k[str(k)]['gap']:>9.3f} [{by_k[str(k)]['rule_gap']:.3f}]" for k in ks)
        if {1, 8} <= set(ks):
            line += f"{by_k['8']['gap'] / max(by_k['1']['gap'], 1e-12):>15.2f}"
        print(line)
    for k in ks:
        cov = summary["table"]["default (adaptive+ACI)"][str(k)]["coverage"]
        c = summary["crowd"][str(k)]
        print(f"K={k}: default coverage {'/'.join(f'{x:.2f}' for x in cov)}; feedback late by "
              f"{c['late_by']:.1f} predictions; asked point's distance to the nearest observation {c['nn_dist']:.3f}")


def plot_crowd(summary: dict, path: Path) -> None:
    names, ks = list(summary["table"]), summary["k"]
    fig, axes = report.figure(figsize=(13, 4.5))
    ax = axes[0][0]
    x = np.arange(len(names))
    width = 0.8 / len(ks)
    for i, k in enumerate(ks):
        ax.bar(x + (i - (len(ks) - 1) / 2) * width, [summary["table"][n][str(k)]["gap"] for n in names],
               width, label=f"K = {k}")
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("calibration gap")
    ax.set_title("mean |cumulative coverage - nominal| over 5 pairs, mean over tasks")
    ax.legend()
    report.save_figure(fig, path, dpi=110)


def run_crowd(args: argparse.Namespace, ks: list[int]) -> None:
    t0 = time.time()
    tasks = select_tasks(args.tasks)
    settings = json.loads(args.settings) if args.settings else {}
    try:  # a bad setting fails here, before any run
        config = EngineConfig.from_dict(settings)
    except ConfigError as e:
        raise SystemExit(f"--settings: {e}") from None
    if not np.array_equal(config.level_grid, GRID.level_grid):
        raise SystemExit("--settings: the crowd rows are scored against the default's levels (90/70/50/30/10%); "
                         "n_levels cannot change")
    jobs = [(t, s, k, args.trials, config) for t in tasks for s in runner.seeds_of(args) for k in ks]
    runs = runner.run_pool(crowd_sequence, jobs, args.workers, "crowd runs")
    runs.sort(key=lambda r: (r["task"], r["k"], r["seed"]))
    summary = summarize_crowd(runs)
    print_crowd(summary, args.seeds, args.trials)
    meta = {"tasks": tasks, "seeds": args.seeds, "seed_offset": args.seed_offset, "trials": args.trials,
            "in_flight": ks, "settings": settings, "levels": GRID.level_grid.tolist(),
            "wall_seconds": time.time() - t0}
    out = report.write_json(args.crowd_out, {"meta": meta, "summary": summary, "runs": runs})
    plot_crowd(summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


def run_variants(args: argparse.Namespace) -> None:
    t0 = time.time()
    jobs = [(t, s, args.trials, args.surrogate) for t in select_tasks(args.tasks) for s in runner.seeds_of(args)]
    runs = runner.run_pool(run_sequence, jobs, args.workers, "calibration runs")
    runs.sort(key=lambda r: (r["task"], r["seed"]))
    summary = summarize(runs)
    tab = summary["rank_table"]
    print(f"\nCalibration ranks over {len(summary['tasks'])} tasks x {len(NOMINAL)} levels, {args.seeds} seeds, "
          f"{args.trials} trials, surrogate {args.surrogate} (lower rank is better)")
    print(f"{'variant':<17}{'RCE rank':>9}{'LLR rank':>9}{'width rank':>11}{'mean RCE':>10}  coverage "
          + "/".join(f"{round(100 * n)}" for n in NOMINAL) + "%")
    for n, _, _ in VARIANTS:
        r = tab[n]
        cov = "/".join(f"{c:.2f}" for c in r["coverage_mean"])
        print(f"{n:<17}{r['rolling_coverage_error']:>9.2f}{r['llr']:>9.2f}{r['width']:>11.2f}"
              f"{r['rce_mean']:>10.3f}  {cov}")
    meta = {"tasks": select_tasks(args.tasks), "seeds": args.seeds, "seed_offset": args.seed_offset,
            "trials": args.trials, "surrogate": args.surrogate, "levels": GRID.level_grid.tolist(),
            "wall_seconds": time.time() - t0}
    out = report.write_json(args.out, {"meta": meta, "summary": summary, "runs": runs})
    plot(runs, summary, out.with_suffix(".png"))
    report.wrote(out, out.with_suffix(".png"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="hartmann6,mixed,rf_breast_cancer,lgbm_digits")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--surrogate", default="qgbm", help="surrogate of the sequential variants table")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--in-flight", default="1,8,32",
                    help="K values of the crowd rows, comma-separated; empty: no crowd rows")
    ap.add_argument("--no-variants", action="store_true", help="skip the sequential variants table")
    ap.add_argument("--out", default=str(report.RESULTS / "calibration.json"))
    ap.add_argument("--crowd-out", default=str(report.RESULTS / "calibration_crowd.json"))
    ap.add_argument("--settings", default="",
                    help='engine settings of the crowd rows\' study as JSON (e.g. \'{"conformalize_from": 10}\'); '
                         "default: the engine's defaults")
    args = ap.parse_args(argv)
    if not args.no_variants:
        run_variants(args)
    ks = [int(k) for k in args.in_flight.split(",") if k.strip()]
    if ks:
        run_crowd(args, ks)


if __name__ == "__main__":
    main()
