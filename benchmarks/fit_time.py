"""Fit time against the number of observations: QGP's two backends, the MLP ensemble, QGBM, the engine.

One synthetic task (Hartmann-6, observation noise sd 0.05, uniform random
configurations), sizes ``n`` in 100, 500, 2000, 10000, 30000, one repeat per
cell. Rows:

* ``qgp-sklearn``  QGP, scikit-learn's exact GP (``backend="sklearn"``);
* ``qgp-torch``    QGP, gpytorch (``backend="torch"``): exact up to
  ``exact_up_to`` (4000), SGPR with 512 inducing inputs beyond;
* ``mlp-ensemble`` the BANANAS MLP ensemble (if registered);
* ``qgbm``         LightGBM quantile models;
* ``engine``       the default surrogate's full refit: ``calibo.engine.optimizer.fit``
  with the default ``EngineConfig`` (conformalized: split conformal beyond 50
  observations, i.e. trains on 75% and scores 25%, then predicts 2000
  candidates). The service's aim: under 10 s at 10,000 observations.

A surrogate cell is ``surrogate.fit(X, y)`` plus ``predict_quantiles`` on 2000
candidates, under one BLAS thread as the engine's fit runs; its held-out RMSE
(median quantile against the noiseless function on the candidates) is kept
too. A cell whose time, extrapolated from the method's previous size, would
pass ``--cap`` seconds, or whose memory would pass half the machine's, is not
run and is recorded as ``skipped: over cap`` / ``skipped: memory``.

    python -m benchmarks.fit_time                    # CPU or GPU, whichever torch sees
    python -m benchmarks.fit_time --device cpu --cap 60 --sizes 100,500,2000

Writes benchmarks/results/fit_time.json and fit_time.png (fit_time_cuda.* on a GPU).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import report

SIZES = (100, 500, 2000, 10_000, 30_000)
N_CANDIDATES = 2000
NOISE = 0.05
TARGET_S = 10.0  # the engine's aim at 10,000 observations
# (surrogate, options) per row; the engine row is the default EngineConfig
ROWS: dict[str, tuple[str, dict]] = {
    "qgp-sklearn": ("qgp", {"backend": "sklearn"}),
    "qgp-torch": ("qgp", {"backend": "torch"}),
    "mlp-ensemble": ("mlp-ensemble", {}),
    "qgbm": ("qgbm", {}),
    "engine": ("", {}),
}
# how time grows with n between sizes, for the cap's extrapolation (exact GP: measured n^2.1
# from 2000 to 10,000, the kernel matrices; the Cholesky's n^3 takes over beyond)
GROWTH = {"qgp-sklearn": 2.5, "qgp-torch": 1.5, "mlp-ensemble": 1.2, "qgbm": 1.2, "engine": 1.5}


def task_data(n: int, seed: int):
    """Observations of noisy Hartmann-6 at random configurations: (space, params, U, y, f)."""
    from benchmarks.harness.tasks import TASKS
    from calibo.engine import SearchSpace

    task = TASKS["hartmann6"]
    space = SearchSpace.from_dict(task.space)
    rng = np.random.default_rng(seed)
    U = rng.random((n, space.dim))
    params = space.from_unit(U)
    U = space.to_unit(params)
    f = np.array([task.objective(p) for p in params])
    return space, params, U, f + NOISE * rng.standard_normal(n), f


def memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 8 << 30


def gram_bytes(row: str, n: int) -> int:
    """Peak memory of a cell, roughly: the exact GP's n x n float64 matrices (three alive at once)."""
    if row == "qgp-sklearn" or (row == "qgp-torch" and n <= 4000):
        return 3 * 8 * n * n
    return 0


def device_info(device: str) -> dict:
    import torch

    name = torch.cuda.get_device_name(0) if device == "cuda" else (platform.processor() or platform.machine())
    if device == "cpu":
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
    return {
        "device": device,
        "device_name": name,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "calibo_torch_threads": os.environ.get("CALIBO_TORCH_THREADS", "1 (default)"),
        "blas_threads": 1,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def run_surrogate(name: str, options: dict, n: int, device: str, seed: int) -> dict:
    from threadpoolctl import threadpool_limits

    from calibo.engine.surrogates import make_surrogate

    _, _, U, y, _ = task_data(n, seed)
    space, _, Uc, _, fc = task_data(N_CANDIDATES, seed + 1)
    X, Xc = space.features(U), space.features(Uc)
    levels = (np.arange(10) + 0.5) / 10
    with threadpool_limits(1, user_api="blas"):
        t0 = time.perf_counter()
        m = make_surrogate(name, levels, seed=seed, device=device, **options).fit(X, y)
        t1 = time.perf_counter()
        q = m.predict_quantiles(Xc)
        t2 = time.perf_counter()
    out = {"seconds": t2 - t0, "fit_s": t1 - t0, "predict_s": t2 - t1, "ran_on": m.ran_on,
           "rmse": float(np.sqrt(np.mean((np.median(q, axis=1) - fc) ** 2)))}
    if hasattr(m, "backend_"):
        out["backend"] = m.backend_
        out["sparse"] = bool(getattr(getattr(m, "_torch", None), "sparse", False))
    return out


def run_engine(n: int, device: str, seed: int) -> dict:
    from calibo.engine import EngineConfig, fit

    space, params, _, y, _ = task_data(n, seed)
    cfg = EngineConfig()
    t0 = time.perf_counter()
    snap = fit(list(zip(params, y.tolist(), strict=True)), space, cfg, seed=seed, device=device)
    return {"seconds": time.perf_counter() - t0, "surrogate": cfg.surrogate, "method": snap.method,
            "n_candidates": int(snap.candidates.shape[0]), "ran_on": snap.meta.device,
            **({"device_fallback": snap.meta.device_fallback} if snap.meta.device_fallback is not None else {})}


def plan(row: str, n: int, prev: tuple[int, float] | None, cap: float) -> str | None:
    """Why a cell is not run (None: run it)."""
    if gram_bytes(row, n) > memory_bytes() // 2:
        return f"skipped: memory (~{gram_bytes(row, n) / 2**30:.0f} GiB of n x n matrices)"
    if prev is not None:
        n0, t0 = prev
        if not np.isfinite(t0):
            return "skipped: over cap (a smaller size was)"
        est = t0 * (n / n0) ** GROWTH[row]
        if est > cap:
            return f"skipped: over cap (estimated {est:.0f} s > {cap:.0f} s)"
    return None


def plot(results: dict, path: Path) -> None:
    fig, axes = report.figure(figsize=(7.5, 5.0))
    ax = axes[0][0]
    for row, cells in results["cells"].items():
        pts = [(int(n), c["seconds"]) for n, c in cells.items() if "seconds" in c]
        if not pts:
            continue
        xs, ys = zip(*sorted(pts), strict=True)
        ax.plot(xs, ys, marker="o", lw=2.5 if row == "engine" else 1.3, label=row)
        skipped = [int(n) for n, c in cells.items() if "skipped" in c]
        if skipped:  # not run: drawn at the cap
            ax.plot(skipped, [results["meta"]["cap_s"]] * len(skipped), ls="none", marker="x",
                    color=ax.lines[-1].get_color())
    ax.axhline(TARGET_S, color="k", ls="--", lw=0.8)
    ax.text(results["sizes"][0], TARGET_S * 1.08, "10 s aim (engine, 10,000 obs)", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("observations n")
    ax.set_ylabel("seconds (fit + 2000 predictions; engine: full refit)")
    meta = results["meta"]
    ax.set_title(f"fit time on {meta['device_name']} ({meta['device']}, {meta['cpu_count']} CPUs)", fontsize=9)
    ax.legend(fontsize=8, title=f"x: not run (over the {results['meta']['cap_s']:.0f} s cap or memory)",
              title_fontsize=7)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    report.save_figure(fig, path)


def print_table(results: dict) -> None:
    sizes = results["sizes"]
    print(f"\nseconds, fit + {N_CANDIDATES} predictions (engine: full refit); device {results['meta']['device']}")
    print(f"{'':<14}" + "".join(f"{n:>10}" for n in sizes))
    for row, cells in results["cells"].items():
        line = f"{row:<14}"
        for n in sizes:
            c = cells.get(str(n), {})
            if "seconds" in c:
                line += f"{c['seconds']:>10.2f}"
            elif "skipped" in c:
                line += f"{'skip':>10}"
            else:
                line += f"{'-':>10}"
        print(line)
    for row, note in results["notes"].items():
        print(f"  {row}: {note}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--cap", type=float, default=120.0, help="seconds a cell may take (extrapolated)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None,
                    help="default: results/fit_time.json on the CPU, fit_time_cuda.json on a GPU")
    args = ap.parse_args(argv)

    from tqdm import tqdm

    from calibo.engine import device as devices
    from calibo.engine.surrogates import SURROGATES

    device, why = devices.resolve(args.device)
    if args.out is None:
        args.out = report.RESULTS / ("fit_time_cuda.json" if device == "cuda" else "fit_time.json")
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = [r for r in args.rows.split(",") if r]
    notes: dict[str, str] = {}
    if why:
        notes["device"] = why
    cells: dict[str, dict[str, dict]] = {r: {} for r in rows}
    todo = []
    for r in rows:
        name = ROWS[r][0]
        if name and name not in SURROGATES:
            notes[r] = f"skipped: surrogate {name!r} is not registered in calibo.engine.surrogates"
            cells[r] = {str(n): {"skipped": notes[r]} for n in sizes}
            continue
        todo += [(r, n) for n in sizes]
    for r in dict.fromkeys(r for r, _ in todo):  # warm-up, untimed: imports, torch and LightGBM start-up
        if r == "engine":
            run_engine(60, device, args.seed)
            # 60 observations fit on scikit-learn; the large cells take the torch path: start it too
            run_surrogate("qgp", {"backend": "torch"}, 40, device, args.seed)
        else:
            run_surrogate(*ROWS[r], 40, device, args.seed)
    last: dict[str, tuple[int, float]] = {}
    t_start = time.perf_counter()
    for r, n in tqdm(todo, desc="fit-time cells"):
        why_not = plan(r, n, last.get(r), args.cap)
        if why_not is not None:
            cells[r][str(n)] = {"skipped": why_not}
            last[r] = (n, float("inf"))
            continue
        name, options = ROWS[r]
        cell = run_engine(n, device, args.seed) if r == "engine" else run_surrogate(name, options, n, device,
                                                                                      args.seed)
        cells[r][str(n)] = cell
        last[r] = (n, cell["seconds"])
    results = {
        "meta": {**device_info(device), "task": "hartmann6", "noise_sd": NOISE, "n_candidates": N_CANDIDATES,
                 "repeats": 1, "cap_s": args.cap, "seed": args.seed, "wall_s": time.perf_counter() - t_start,
                 "rows": {r: {"surrogate": ROWS[r][0] or "default EngineConfig", "options": ROWS[r][1]}
                          for r in rows}},
        "sizes": sizes,
        "cells": cells,
        "notes": notes,
    }
    eng = cells.get("engine", {}).get("10000", {})
    if "seconds" in eng:
        results["engine_10000_under_target"] = bool(eng["seconds"] < TARGET_S)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report.write_json(args.out, results)
    plot(results, args.out.with_suffix(".png"))
    print_table(results)
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
