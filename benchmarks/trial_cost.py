"""What one more trial costs a sequential user on a free objective: calibo's four front doors beside
Optuna's GPSampler and TPESampler.

The objective costs nothing (a 6-D quadratic, ``x0..x5`` floats in [-1, 1], value
``sum((x_i - 0.3) ** 2)``, minimised), so the time per trial is the optimizer's own: asking, fitting,
selecting and telling. One trial is in flight at a time (a sequential user: each trial is asked
only after the previous one is told). Every method runs every seed for ``--trials`` trials, side by
side in one run, interleaved by seed (seed 0 of every method, then seed 1...) so that the machine's
load drift falls on all alike:

* ``client-optimize``: ``calibo.Client(url).create_study(...).optimize(objective, n_trials)`` against
  a live ``calibo serve`` the script starts from the checkout (its code as it is at the start, not
  frozen; SQLite in a temporary directory, one fit worker). The study has the default settings:
  each ask waits for a fit covering the latest tell (up to the server's ``ask_wait_seconds``), as a
  sequential user's does;
* ``optimizer``: ``calibo.engine.Optimizer`` in-process, ``ask()`` / ``tell()``;
* ``sampler-local``: ``optuna.create_study(sampler=CaliboSampler(seed=...))`` (in-memory storage),
  the engine fitted in this process;
* ``sampler-remote``: ``CaliboSampler(url=..., seed=...)`` against the same server;
* ``optuna-gp`` / ``optuna-tpe``: ``GPSampler(seed=seed)`` / ``TPESampler(seed=seed)``.

Reported per method (medians over seeds): ms per trial (the wall time of the trial loop over the
trials; study creation is left out), the p50 and p90 of the time of each trial after the first
``WARMUP_TRIALS`` (15: calibo's longest quasi-random warm-up, Optuna GP's is 10), the CPU time per
trial of this process and the server's (API and fit worker; the fit of the last tell, which no trial
waits for, mostly falls outside), the best value reached, and each calibo row's ms per trial divided
by GPSampler's and by TPE's of the same seed. Before the timed rounds,
every method runs once untimed (``--warmup-trials``, seed 10000) so that imports and first fits fall
on none of them; after each cell that used the server, the script waits until the server has no fit
running or queued, so that a fit left behind never runs under the next cell.

For the ``client-optimize`` rows the server's own account splits each trial (``/metrics`` scraped
before and after each run, ``service.metrics``): the ask's time on the server and, of it, the wait
for the fit of the previous tell; the tell's; the fit job's phases (reading the study, the engine's
fit, encoding the snapshot, storing it); and what is left of the client's wall time for the client
and HTTP; with the fits stored by kind (full refit, update or extend: ``engine.retune``,
``engine.extend``).

Settings: ``--calibo-settings JSON`` goes to every calibo study as its settings (the engine's
``EngineConfig`` fields, e.g. ``{"n_candidates": 500}`` or ``{"surrogate_options": {...}}``), and each
``--variant NAME=JSON`` adds rows ``client-optimize[NAME]``, ``optimizer[NAME]``,
``sampler-local[NAME]`` and ``sampler-remote[NAME]`` whose settings are those JSON settings over
``--calibo-settings`` (one level deep: ``surrogate_options`` are merged key by key). The same dict
reaches every path: the HTTP study's ``settings`` (``Client.create_study(settings=...)``), the
``Optimizer``'s ``config`` (``EngineConfig.from_dict``) and ``CaliboSampler(settings=...)`` (which
sends them on to the server's study in remote mode). The service's own study settings
(``ask_wait_seconds``, ``heartbeat_timeout_seconds``) are taken by the HTTP study alone: a settings
dict naming one leaves out the ``optimizer``, ``sampler-local`` and ``sampler-remote`` rows
(``CaliboSampler`` checks its settings as ``EngineConfig``'s, so its remote mode cannot carry them
either), and the run says so.

BLAS and torch run on one thread (``OMP_NUM_THREADS=1`` set before numpy / torch are imported, as
the other benchmarks do, and ``threadpool_limits(1, "blas")``); the server inherits the variable,
and its fits run on one BLAS and one torch thread anyway.

    python -m benchmarks.trial_cost                                   # 3 seeds x 120 trials
    python -m benchmarks.trial_cost --seeds 1 --trials 30 --methods optimizer,optuna-gp,optuna-tpe
    python -m benchmarks.trial_cost --variant full='{"surrogate_options": {"retune_growth": 0}}'
    python -m benchmarks.trial_cost --variant small='{"n_candidates": 500}' --out /tmp/trial_cost.json

Writes benchmarks/results/trial_cost.json and trial_cost.png (``--out``): ms per trial per method on a
log axis, a dot per seed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy / torch: one core per run

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.harness import report  # noqa: E402
from benchmarks.harness.servers import Calibo, calibo_server, database, git_state, versions  # noqa: E402
from benchmarks.harness.timing import log, process_cpu  # noqa: E402

OUT = report.RESULTS / "trial_cost.json"
DIM, TARGET = 6, 0.3
SPACE = {f"x{i}": {"type": "float", "low": -1.0, "high": 1.0} for i in range(DIM)}
WARMUP_TRIALS = 15  # per-trial percentiles count the trials after these
WARMUP_SEED = 10_000
CALIBO_METHODS = ("client-optimize", "optimizer", "sampler-local", "sampler-remote")
PEERS = ("optuna-gp", "optuna-tpe")
METHODS = (*CALIBO_METHODS, *PEERS)
SERVER_METHODS = ("client-optimize", "sampler-remote")
SERVICE_SETTINGS = ("ask_wait_seconds", "heartbeat_timeout_seconds")  # the HTTP study's alone

Tick = Callable[[], None]


def quadratic(params: dict[str, Any]) -> float:
    return float(sum((float(params[f"x{i}"]) - TARGET) ** 2 for i in range(DIM)))


def optuna_objective(trial: Any) -> float:
    return quadratic({f"x{i}": trial.suggest_float(f"x{i}", -1.0, 1.0) for i in range(DIM)})


# ------------------------------------------------------------------ the methods
def run_client(url: str, name: str, seed: int, trials: int, settings: dict[str, Any], tick: Tick) -> dict[str, Any]:
    from calibo import Client

    stamps: list[float] = []

    def done(_view: dict[str, Any]) -> None:
        stamps.append(time.perf_counter())
        tick()

    with Client(url) as client:
        study = client.create_study(name, SPACE, "minimize", seed=seed, settings=settings or None)
        t0 = time.perf_counter()
        views = client.optimize(study, quadratic, n_trials=trials, callback=done)
        wall = time.perf_counter() - t0
        status = client.get_study(study.id)["surrogate_status"]
    values = [v["value"] for v in views if v.get("state") == "complete" and v.get("value") is not None]
    return {"wall_s": wall, "stamps": [t0, *stamps], "best": min(values), "server_study": study.id,
            "surrogate_status": {k: status.get(k) for k in ("snapshot_version", "fitted_on", "method",
                                                           "fit_seconds", "device", "last_error")}}


def run_optimizer(seed: int, trials: int, settings: dict[str, Any], tick: Tick) -> dict[str, Any]:
    from calibo.engine import Optimizer

    opt = Optimizer(SPACE, "minimize", seed=seed, config=dict(settings))
    t0 = time.perf_counter()
    stamps = [t0]
    for _ in range(trials):
        s = opt.ask()[0]
        opt.tell(s.params, quadratic(s.params), s.prediction)
        stamps.append(time.perf_counter())
        tick()
    wall = time.perf_counter() - t0
    best = opt.best
    return {"wall_s": wall, "stamps": stamps, "best": float(best[1]),
            "engine_seconds": {k: round(v, 4) for k, v in opt.timings.items()}}


def run_optuna(sampler: Any, name: str, trials: int, tick: Tick) -> dict[str, Any]:
    import optuna

    study = optuna.create_study(study_name=name, direction="minimize", sampler=sampler)
    t0 = time.perf_counter()
    stamps = [t0]

    def done(_study: Any, _trial: Any) -> None:
        stamps.append(time.perf_counter())
        tick()

    study.optimize(optuna_objective, n_trials=trials, callbacks=[done])
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "stamps": stamps, "best": float(study.best_value)}


def make_sampler(method: str, seed: int, settings: dict[str, Any], url: str | None, name: str) -> Any:
    import optuna

    if method == "optuna-gp":
        return optuna.samplers.GPSampler(seed=seed)
    if method == "optuna-tpe":
        return optuna.samplers.TPESampler(seed=seed)
    from calibo.optuna import CaliboSampler

    kw: dict[str, Any] = {"seed": seed, "settings": dict(settings) or None, "warn_independent_sampling": False}
    if method == "sampler-remote":
        kw.update(url=url, study_name=name)
    return CaliboSampler(**kw)


def run_cell(method: str, variant: str | None, seed: int, trials: int, settings: dict[str, Any],
             server: tuple[str, int] | None, tick: Tick, tag: str = "") -> dict[str, Any]:
    """One method x seed: its trial loop timed, with the CPU time this process and the server spent."""
    url, pgid = server if server is not None else (None, None)
    label = method if variant is None else f"{method}[{variant}]"
    name = f"trial-cost{tag}-{method}-{variant or 'default'}-{seed}"
    cpu0 = process_cpu(pgid)
    metrics0 = scrape(url) if method == "client-optimize" else None
    if method == "client-optimize":
        out = run_client(url, name, seed, trials, settings, tick)
    elif method == "optimizer":
        out = run_optimizer(seed, trials, settings, tick)
    else:
        out = run_optuna(make_sampler(method, seed, settings, url, name), name, trials, tick)
    cpu1 = process_cpu(pgid)
    if method in SERVER_METHODS:
        quiesce(url, name)
    stamps = np.asarray(out.pop("stamps"))
    if metrics0 is not None:
        out["server"] = server_profile(metrics0, scrape(url), stamps.size - 1)
    per_trial = np.diff(stamps)
    cpu = {k: round(cpu1[k] - cpu0.get(k, 0.0), 3) for k in cpu1 if k in ("bench", "server_api", "server_workers")}
    after = per_trial[WARMUP_TRIALS:] if per_trial.size > WARMUP_TRIALS else per_trial
    return {"method": label, "base": method, "variant": variant, "seed": seed, "trials": int(per_trial.size),
            "settings": settings if method in CALIBO_METHODS else None,
            "ms_per_trial": 1000.0 * out["wall_s"] / max(1, per_trial.size),
            "p50_ms": float(np.percentile(after, 50) * 1000.0), "p90_ms": float(np.percentile(after, 90) * 1000.0),
            "cpu_s": cpu, "cpu_ms_per_trial": 1000.0 * sum(cpu.values()) / max(1, per_trial.size),
            **out, "per_trial_ms": [round(1000.0 * t, 3) for t in per_trial]}


# the server's metrics a sequential trial's time is split by (``service.metrics``): (row, metric, labels)
PROFILE = (
    ("ask (server)", "calibo_http_request_duration_seconds", {"route": "/v1/studies/{study}/ask"}),
    ("  waiting for the fit", "calibo_ask_fit_wait_seconds", {}),
    ("tell (server)", "calibo_http_request_duration_seconds", {"route": "/v1/studies/{study}/trials/{trial_id}/tell"}),
    ("fit job: load", "calibo_fit_phase_seconds", {"phase": "load"}),
    ("fit job: fit", "calibo_fit_phase_seconds", {"phase": "fit"}),
    ("fit job: encode", "calibo_fit_phase_seconds", {"phase": "encode"}),
    ("fit job: store", "calibo_fit_phase_seconds", {"phase": "store"}),
)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The server's histogram sums and counters (``/metrics``), keyed by sample name and labels."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


def _total(m: dict, name: str, want: dict[str, str]) -> float:
    return sum(v for (n, labels), v in m.items()
               if n == name and all(dict(labels).get(k) == w for k, w in want.items()))


FIT_KINDS = ("full", "update", "extend")  # the snapshots' kinds (engine.retune, engine.extend)


def server_profile(before: dict, after: dict, trials: int) -> dict[str, Any]:
    """Milliseconds per trial the server spent in each ``PROFILE`` row between two scrapes, and the
    fits it stored by kind (``FIT_KINDS``)."""
    ms = {row: 1000.0 * (_total(after, f"{name}_sum", want) - _total(before, f"{name}_sum", want)) / trials
          for row, name, want in PROFILE}
    fits = {kind: int(_total(after, "calibo_fits_total", {"kind": kind}) - _total(before, "calibo_fits_total",
                                                                                   {"kind": kind}))
            for kind in FIT_KINDS}
    return {"ms_per_trial": ms, "fits": fits}


def quiesce(url: str, name: str, timeout: float = 300.0) -> None:
    """Wait until the server's study ``name`` has no fit running or queued (a sampler-remote study may
    not exist yet: nothing to wait for)."""
    import httpx

    bench = Calibo(url)
    try:
        r = bench.http.get("/v1/studies", params={"name": name, "limit": 10})
        for s in r.json().get("studies", []) if r.status_code == 200 else []:
            bench.wait_fitted(int(s["id"]), timeout)
    except (httpx.HTTPError, RuntimeError) as e:  # reported; the next cell runs regardless
        log(f"{name}: could not wait for the server's fits: {e!r}")
    finally:
        bench.close()


# ------------------------------------------------------------------ arguments
def parse_json(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        sys.exit(f"{what}: not JSON ({e})")
    if not isinstance(value, dict):
        sys.exit(f"{what}: expected a JSON object of study settings, got {text!r}")
    return value


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``, dict values (``surrogate_options``) merged one level down."""
    out = dict(base)
    for k, v in over.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_variants(items: list[str], base: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name or any(c in name for c in "[], "):
            sys.exit(f"--variant {item!r}: expected NAME=JSON (a name without brackets, commas or spaces)")
        if name in {n for n, _ in out}:
            sys.exit(f"--variant {name!r} given twice")
        out.append((name, merged(base, parse_json(text, f"--variant {name}"))))
    return out


def takes(method: str, settings: dict[str, Any]) -> str | None:
    """Why ``method`` cannot run with ``settings`` (None when it can)."""
    service = sorted(set(settings) & set(SERVICE_SETTINGS))
    if service and method != "client-optimize":
        return f"{', '.join(service)}: a setting of the HTTP study alone"
    return None


def check_settings(settings: dict[str, Any], what: str) -> None:
    """Fail before the run, not in its middle, on settings the engine refuses."""
    from calibo.engine import EngineConfig

    try:
        EngineConfig.from_dict({k: v for k, v in settings.items() if k not in SERVICE_SETTINGS})
    except Exception as e:
        sys.exit(f"{what}: {e}")


# ------------------------------------------------------------------ summary
def summarize(rows: list[dict[str, Any]], labels: list[str]) -> list[dict[str, Any]]:
    by_seed = {(r["method"], r["seed"]): r for r in rows}

    def ratio(label: str, peer: str) -> float | None:
        rs = [by_seed[(label, s)]["ms_per_trial"] / by_seed[(peer, s)]["ms_per_trial"]
              for (m, s) in by_seed if m == label and (peer, s) in by_seed]
        return float(np.median(rs)) if rs else None

    out = []
    for label in labels:
        rs = [r for r in rows if r["method"] == label]
        if not rs:
            continue
        calibo = rs[0]["base"] in CALIBO_METHODS
        out.append({"method": label, "seeds": len(rs),
                    **{k: float(np.median([r[k] for r in rs]))
                       for k in ("ms_per_trial", "p50_ms", "p90_ms", "cpu_ms_per_trial", "best")},
                    "ms_per_trial_min": min(r["ms_per_trial"] for r in rs),
                    "ms_per_trial_max": max(r["ms_per_trial"] for r in rs),
                    "vs_gp": ratio(label, "optuna-gp") if calibo else None,
                    "vs_tpe": ratio(label, "optuna-tpe") if calibo else None})
    return out


def print_summary(summary: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    report.print_table(
        f"{meta['trials']} trials x {len(meta['seeds'])} seed(s), 1 trial in flight, free {DIM}-D quadratic; "
        f"medians over seeds (p50 / p90: trials after the first {WARMUP_TRIALS}; CPU: this process + server)",
        ["method", "ms/trial", "p50 ms", "p90 ms", "CPU ms", "best", "x GP", "x TPE"],
        [[s["method"], s["ms_per_trial"], s["p50_ms"], s["p90_ms"], s["cpu_ms_per_trial"], f"{s['best']:.2e}",
          s["vs_gp"], s["vs_tpe"]] for s in summary],
        first=max(16, 2 + max(len(s["method"]) for s in summary)), width=10, digits=2)
    for m, why in meta["skipped"].items():
        print(f"  {m}: not run ({why})")


def profile_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per client row: the median over seeds of each ``PROFILE`` row (ms per trial), what is left of
    the trial's wall time for the client and HTTP, and the fits stored by kind (summed)."""
    out = {}
    for label in dict.fromkeys(r["method"] for r in rows if "server" in r):
        rs = [r for r in rows if r["method"] == label]
        ms = {row: float(np.median([r["server"]["ms_per_trial"][row] for r in rs])) for row, _, _ in PROFILE}
        ms["client and HTTP"] = float(np.median([r["ms_per_trial"] - r["server"]["ms_per_trial"]["ask (server)"]
                                                 - r["server"]["ms_per_trial"]["tell (server)"] for r in rs]))
        out[label] = {"ms_per_trial": ms, "trial_ms": float(np.median([r["ms_per_trial"] for r in rs])),
                      "fits": {k: sum(r["server"]["fits"].get(k, 0) for r in rs) for k in FIT_KINDS}}
    return out


def print_profile(profile: dict[str, dict[str, Any]]) -> None:
    """Where a sequential trial of the client goes: the server's own account (``/metrics``)."""
    if not profile:
        return
    labels = list(profile)
    rows = [row for row, _, _ in PROFILE] + ["client and HTTP"]
    report.print_table(
        "where a client trial goes (ms per trial, medians over seeds; the fit job runs while the ask waits, "
        "its phases overlap the wait)",
        ["", *labels], [[row, *[profile[m]["ms_per_trial"][row] for m in labels]] for row in rows]
        + [["trial (client wall)", *[profile[m]["trial_ms"] for m in labels]],
           ["fits " + " / ".join(FIT_KINDS), *[" / ".join(str(profile[m]["fits"][k]) for k in FIT_KINDS)
                                                for m in labels]]],
        first=24, width=max(12, 2 + max(len(m) for m in labels)), digits=1)


def plot(summary: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path, meta: dict[str, Any]) -> None:
    fig, axes = report.figure(1, 1, figsize=(max(6.0, 0.9 * len(summary) + 2.0), 4.4))
    ax = axes[0][0]
    report.ms_bars(ax, summary, "method", rows)
    ax.set_title(f"one more trial, sequential: {meta['trials']} trials, {len(meta['seeds'])} seed(s) "
                 "(bar: median, whiskers: range, dots: seeds)", fontsize=9)
    report.save_figure(fig, path)


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> None:
    from threadpoolctl import threadpool_limits
    from tqdm import tqdm

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    ap.add_argument("--trials", type=int, default=120, help="trials per run (default 120)")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"a comma-separated subset of {','.join(METHODS)}")
    ap.add_argument("--calibo-settings", default=None, metavar="JSON",
                    help="study settings of every calibo row, e.g. '{\"n_candidates\": 500}'")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                    help="extra rows METHOD[NAME] for the calibo methods, with these settings over "
                    "--calibo-settings (repeatable)")
    ap.add_argument("--warmup-trials", type=int, default=20,
                    help="an untimed run of each method before the timed ones (0: none)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods or (bad := [m for m in methods if m not in METHODS]):
        sys.exit(f"--methods: unknown {bad if methods else 'empty'}; choose from {','.join(METHODS)}")
    methods = [m for m in METHODS if m in methods]
    if args.seeds < 1 or args.trials < 2:
        sys.exit("--seeds must be >= 1 and --trials >= 2")
    base = parse_json(args.calibo_settings, "--calibo-settings") if args.calibo_settings else {}
    variants: list[tuple[str | None, dict[str, Any]]] = [(None, base), *parse_variants(args.variant, base)]
    for v, s in variants:
        check_settings(s, "--calibo-settings" if v is None else f"--variant {v}")

    # the rows, in the order each seed runs them: the base methods, then every variant's calibo methods
    plan: list[tuple[str, str | None, dict[str, Any]]] = []
    skipped: dict[str, str] = {}
    for variant, settings in variants:
        for m in methods:
            if variant is not None and m not in CALIBO_METHODS:
                continue
            label = m if variant is None else f"{m}[{variant}]"
            if m in CALIBO_METHODS and (why := takes(m, settings)):
                skipped[label] = why
                log(f"{label}: not run ({why})")
                continue
            plan.append((m, variant, settings if m in CALIBO_METHODS else {}))
    if not plan:
        sys.exit("nothing to run")
    labels = [m if v is None else f"{m}[{v}]" for m, v, _ in plan]
    needs_server = any(m in SERVER_METHODS for m, _, _ in plan)

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = list(range(args.seeds))
    meta: dict[str, Any] = {
        "objective": f"sum((x_i - {TARGET})^2), {DIM} floats in [-1, 1], minimize, zero cost",
        "trials": args.trials, "seeds": seeds, "in_flight": 1, "methods": labels, "skipped": skipped,
        "calibo_settings": base, "variants": {v: s for v, s in variants if v is not None},
        "percentiles_after": WARMUP_TRIALS, "warmup_run_trials": args.warmup_trials,
        "server": "calibo serve, SQLite in a temporary directory, 1 fit worker, default ask_wait_seconds"
        if needs_server else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "cpu_count": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(), "versions": versions(), **git_state(),
        "command": " ".join(sys.argv),
    }
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    with threadpool_limits(1, user_api="blas"), tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with (database("sqlite", tmp, "trial_cost") as db,
              (calibo_server(db, tmp, "trial_cost", workers=1) if needs_server else contextlib.nullcontext()) as srv):
            server = (srv[0], srv[2]) if srv is not None else None
            import torch

            meta["torch_threads"] = torch.get_num_threads()
            if args.warmup_trials > 0:
                for m, v, s in tqdm(plan, desc="untimed warm-up", leave=False, file=sys.stderr):
                    run_cell(m, v, WARMUP_SEED, args.warmup_trials, s, server, lambda: None, tag="-warmup")
            total = len(plan) * len(seeds) * args.trials
            with tqdm(total=total, desc="trial cost", unit="trial", file=sys.stderr, mininterval=0.5) as bar:
                for seed in seeds:  # interleaved: every method's seed 0, then every method's seed 1...
                    for m, v, s in plan:
                        bar.set_postfix_str(f"seed {seed} {m if v is None else f'{m}[{v}]'}", refresh=False)
                        rows.append(run_cell(m, v, seed, args.trials, s, server, lambda: bar.update()))
    meta["wall_seconds"] = time.time() - t0
    meta["loadavg_at_end"] = os.getloadavg()
    summary = summarize(rows, labels)
    profile = profile_summary(rows)
    print_summary(summary, meta)
    print_profile(profile)
    report.write_json(args.out, {"meta": meta, "summary": summary, "profile": profile, "rows": rows})
    png = Path(args.out).with_suffix(".png")
    plot(summary, rows, png, meta)
    report.wrote(args.out, png)


if __name__ == "__main__":
    main()
