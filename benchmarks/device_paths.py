"""Where a GPU fit spends its time: the GP's hyperparameter tuning and the MLPs' training steps.

Two measurements behind two choices of the torch surrogates on CUDA:

* ``tune``: QGP's marginal-likelihood maximisation (L-BFGS-B, values and
  gradients by autograd, float64) on ``rows`` observations of noisy
  Hartmann-6, on the CPU (one thread, as fits run) and on the GPU. It decides
  ``gp_torch.TUNE_ON_DEVICE_FROM``: below it a CUDA fit tunes on the CPU and
  only conditions on the GPU (the default tunes on at most 150 rows).
* ``mlp``: ``mlp-ensemble`` and ``mlp-quantile`` fits (training plus 2000
  predictions) on ``n`` observations, on the CPU, on the GPU with every Adam
  step launched eagerly, and on the GPU with the full-batch step replayed from a
  captured CUDA graph (the default on CUDA); with the held-out RMSE of the
  median against the noiseless function, so a faster path is also seen to land
  on an equally good model.

* ``engine``: a whole default refit (``calibo.engine.fit``) on ``n``
  observations on the CPU (QGP on scikit-learn, as ``auto`` picks there) and
  on the GPU with QGP forced onto torch. It decides ``qgp.CUDA_FROM``: below
  it ``auto`` on a CUDA device fits on the CPU.

Each cell is the median of ``--repeats`` timed runs after an untimed warm-up.
Without a GPU only the CPU columns are measured.

    python -m benchmarks.device_paths                      # about a minute on a GPU machine

Writes benchmarks/results/device_paths.json and device_paths.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.fit_time import N_CANDIDATES, device_info, task_data
from benchmarks.harness import report

TUNE_ROWS = (150, 300, 600, 1000)
MLP_SIZES = (100, 500, 2000, 4000)
MLPS = ("mlp-ensemble", "mlp-quantile")
ENGINE_SIZES = (50, 100, 200, 300, 500, 1000)
SECTIONS = ("tune", "mlp", "engine")


def timed(fn, repeats: int) -> tuple[float, object]:
    fn()  # warm-up: imports, CUDA context, kernels' first launch
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def tune_cells(rows: int, devices: list[str], repeats: int) -> dict:
    from calibo.engine.device import torch_threads
    from calibo.engine.surrogates import gp_torch

    space, _, U, y, _ = task_data(rows, 0)
    X, z = space.features(U), (y - y.mean()) / y.std()
    out = {}
    for dev in devices:
        def run(dev=dev):
            with torch_threads(dev):
                return gp_torch.tune(X, z, seed=0, max_opt_points=rows, device=dev)
        seconds, hyper = timed(run, repeats)
        out[dev] = {"seconds": seconds, "lengthscale": np.round(hyper["lengthscale"], 6).tolist()}
    return out


def mlp_cells(name: str, n: int, paths: list[str], repeats: int) -> dict:
    from threadpoolctl import threadpool_limits

    from calibo.engine.surrogates import make_surrogate
    from calibo.engine.surrogates import mlp as mlp_module

    space, _, U, y, _ = task_data(n, 0)
    _, _, Uc, _, fc = task_data(N_CANDIDATES, 1)
    X, Xc = space.features(U), space.features(Uc)
    levels = (np.arange(10) + 0.5) / 10
    out = {}
    for path in paths:
        device = "cpu" if path == "cpu" else "cuda"
        warmup = mlp_module.GRAPH_WARMUP
        if path == "cuda-eager":
            mlp_module.GRAPH_WARMUP = 10**9  # never captured
        try:
            def run(device=device):
                with threadpool_limits(1, user_api="blas"):
                    m = make_surrogate(name, levels, seed=0, device=device).fit(X, y)
                    return m.predict_quantiles(Xc)
            seconds, q = timed(run, repeats)
        finally:
            mlp_module.GRAPH_WARMUP = warmup
        out[path] = {"seconds": seconds, "rmse": float(np.sqrt(np.mean((np.median(q, axis=1) - fc) ** 2)))}
    return out


def engine_cells(n: int, devices: list[str], repeats: int) -> dict:
    from calibo.engine import EngineConfig, fit

    space, params, _, y, _ = task_data(n, 0)
    obs = list(zip(params, y.tolist(), strict=True))
    out = {}
    for dev in devices:
        cfg = EngineConfig(surrogate_options={"backend": "torch"}) if dev == "cuda" else EngineConfig()
        seconds, snap = timed(lambda dev=dev, cfg=cfg: fit(obs, space, cfg, seed=0, device=dev), repeats)
        out[dev] = {"seconds": seconds, "ran_on": snap.meta.device}
    return out


def plot(results: dict, path: Path) -> None:
    fig, grid_axes = report.figure(1, 4, figsize=(17, 4))
    axes = grid_axes[0]
    for dev in results["devices"]:
        rows = [r for r in results["tune_rows"] if str(r) in results["tune"]]
        axes[0].plot(rows, [results["tune"][str(r)][dev]["seconds"] for r in rows], marker="o", label=dev)
        sizes = [n for n in results["engine_sizes"] if str(n) in results["engine"]]
        axes[3].plot(sizes, [results["engine"][str(n)][dev]["seconds"] for n in sizes], marker="o",
                     label=f"{dev} ({'QGP on torch' if dev == 'cuda' else 'QGP on scikit-learn'})")
    axes[0].set(title="GP tuning (L-BFGS-B, float64)", xlabel="tuning rows", ylabel="seconds", yscale="log")
    axes[3].set(title="default engine refit", xlabel="observations", ylabel="seconds", xscale="log", yscale="log")
    for ax, name in zip(axes[1:3], MLPS, strict=True):
        sizes = [n for n in results["mlp_sizes"] if str(n) in results["mlp"][name]]
        for p in results["mlp_paths"]:
            ax.plot(sizes, [results["mlp"][name][str(n)][p]["seconds"] for n in sizes], marker="o", label=p)
        ax.set(title=f"{name}: fit + {N_CANDIDATES} predictions", xlabel="observations", ylabel="seconds",
               xscale="log", yscale="log")
    for ax in axes:
        # a section not run (and not in --out): a log scale of no data cannot be drawn
        if not any(len(line.get_xdata()) for line in ax.lines):
            ax.set(xscale="linear", yscale="linear", xticks=[], yticks=[])
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
            continue
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.legend(fontsize=8)
    meta = results["meta"]
    fig.suptitle(f"{meta['device_name']} ({meta['device']}), median of {results['repeats']} runs", fontsize=9)
    report.save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections to run (the others are kept from --out)")
    ap.add_argument("--out", type=Path, default=report.RESULTS / "device_paths.json")
    args = ap.parse_args(argv)

    from tqdm import tqdm

    from calibo.engine import device as devices

    cuda = devices.resolve("auto")[0] == "cuda"
    devs = ["cpu", "cuda"] if cuda else ["cpu"]
    paths = ["cpu", "cuda-eager", "cuda-graph"] if cuda else ["cpu"]
    only = [s for s in args.only.split(",") if s]
    if set(only) - set(SECTIONS):
        ap.error(f"--only takes {', '.join(SECTIONS)}")
    results = {"tune": {}, "mlp": {name: {} for name in MLPS}, "engine": {}}
    if args.out.exists():  # sections not run now are kept
        results.update({k: v for k, v in json.loads(args.out.read_text()).items() if k in SECTIONS})
    results.update({"meta": device_info("cuda" if cuda else "cpu"), "repeats": args.repeats, "devices": devs,
                    "tune_rows": list(TUNE_ROWS), "mlp_sizes": list(MLP_SIZES), "mlp_paths": paths,
                    "engine_sizes": list(ENGINE_SIZES)})
    jobs = [("tune", r) for r in TUNE_ROWS if "tune" in only]
    jobs += [(name, n) for name in MLPS for n in MLP_SIZES if "mlp" in only]
    jobs += [("engine", n) for n in ENGINE_SIZES if "engine" in only]
    for kind, size in tqdm(jobs, desc="device-path cells"):
        if kind == "tune":
            results["tune"][str(size)] = tune_cells(size, devs, args.repeats)
        elif kind == "engine":
            results["engine"][str(size)] = engine_cells(size, devs, args.repeats)
        else:
            results["mlp"][kind][str(size)] = mlp_cells(kind, size, paths, args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report.write_json(args.out, results)
    plot(results, args.out.with_suffix(".png"))
    print(f"\nGP tuning, seconds ({', '.join(devs)})")
    for r in TUNE_ROWS:
        c = results["tune"].get(str(r), {})
        print(f"  {r:>6} rows " + "".join(f"{c[d]['seconds']:>9.3f}" if d in c else f"{'-':>9}" for d in devs))
    for name in MLPS:
        print(f"\n{name}: seconds and held-out RMSE ({', '.join(paths)})")
        for n in MLP_SIZES:
            c = results["mlp"][name].get(str(n), {})
            print(f"  {n:>6} obs " + "".join(f"{c[p]['seconds']:>9.3f} ({c[p]['rmse']:.3f})" if p in c
                                             else f"{'-':>17}" for p in paths))
    print(f"\ndefault engine refit, seconds ({', '.join(devs)}; on cuda QGP forced onto torch)")
    for n in ENGINE_SIZES:
        c = results["engine"].get(str(n), {})
        print(f"  {n:>6} obs " + "".join(f"{c[d]['seconds']:>9.3f}" if d in c else f"{'-':>9}" for d in devs))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
