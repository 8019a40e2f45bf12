"""What every suite reports: a table printed, JSON written compactly, a PNG written with matplotlib.

Runs are written compactly (:func:`write_json`): a run's per-trial ``values`` become what the
figures are computed from, losslessly for them:

* one objective: ``best``, the ``[trial index, value]`` pairs at which the best-so-far improved
  (in the task's direction), and ``n``, the number of values: every best-so-far curve, rank and
  final best is recomputed from them exactly (:func:`best_so_far`);
* several objectives: ``front``, the ``[trial index, values]`` of the trials no earlier trial
  weakly dominated when they completed, and ``n``: the hypervolume of the first t trials is the
  same over them (a dominated point adds none, now or later);
* ``order`` and ``time`` (a crowd run's ask order and virtual completion times) are dropped: both
  follow from the seeded durations and K alone (``runner.durations``).

A file read back works either way: :func:`best_so_far`, :func:`front_points` and :func:`n_values`
take a run with ``values`` or with the compact keys.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / "results"


# ------------------------------------------------------------------ JSON
def read_json(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def dumps(data: Any) -> str:
    """Compact JSON: no indentation, no spaces."""
    return json.dumps(data, separators=(",", ":"))


def write_json(path: str | Path, data: dict[str, Any], directions: Callable[[dict], Sequence[str]] | None = None,
               keep: Sequence[str] = ()) -> Path:
    """Write ``data`` compactly; with ``directions`` (a run -> its objectives' directions), its
    ``runs`` compactly too (see the module docstring). Top-level keys named in ``keep`` that the
    file holds and ``data`` does not (another script's, such as crowd.json's ``live``) survive.
    The run's ``<path>.partial.json`` (``runner.run_pool``'s), whose runs ``data`` now holds, goes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if keep and path.exists():
        old = read_json(path)
        data = {**{k: old[k] for k in keep if k in old}, **data}
    if directions is not None and isinstance(data.get("runs"), list):
        data = {**data, "runs": [compact_run(r, directions(r)) for r in data["runs"]]}
    path.write_text(dumps(data))
    path.with_suffix(".partial.json").unlink(missing_ok=True)
    return path


def compact_run(run: dict[str, Any], directions: Sequence[str]) -> dict[str, Any]:
    """``run`` with ``values`` replaced by ``best`` / ``front`` and ``n``, less ``order`` and ``time``."""
    values = run.get("values")
    if not isinstance(values, list):
        return run
    out = {k: v for k, v in run.items() if k not in ("values", "order", "time")}
    signs = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    if values and isinstance(values[0], list | tuple):
        out["front"] = _front_at_arrival(values, signs)
    else:
        out["best"] = _improvements(values, float(signs[0]))
        out.update(ties(values, float(signs[0])))
    out["n"] = len(values)
    return out


TIES_FROM = 15  # ties are counted after the default's longest warm-up (trials 16 on)


def ties(values: list[float], sign: float, start: int = TIES_FROM) -> dict[str, int]:
    """Plateau statistics of one run (one objective, values in completion order): ``ties``, how
    many of the trials from ``start`` on tied the best value found before them (within 1e-9 of the
    run's range: a trial that could not change the result), ``after`` how many trials that counts
    over, and ``distinct`` the number of distinct values."""
    v = np.array([np.nan if x is None else float(x) for x in values]) * sign
    ok = v[np.isfinite(v)]
    tol = 1e-9 * max(float(np.ptp(ok)) if ok.size else 0.0, 1e-300)
    best, tied, counted = math.inf, 0, 0
    for i, x in enumerate(v):
        if not math.isfinite(x):
            continue
        if i >= start and math.isfinite(best):
            counted += 1
            tied += int(abs(x - best) <= tol)
        best = min(best, x)
    distinct = int(np.sum(np.diff(np.sort(ok)) > tol) + 1) if ok.size else 0
    return {"ties": tied, "after": counted, "distinct": distinct}


def _improvements(values: list[float], sign: float) -> list[list]:
    out, best = [], math.inf
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if not out or sign * v < best:
            best = sign * v
            out.append([i, v])
    return out


def _front_at_arrival(values: list, signs: np.ndarray) -> list[list]:
    kept: list[list] = []
    seen = np.empty((0, len(signs)))
    for i, v in enumerate(values):
        y = np.asarray(v, dtype=float) * signs
        if not np.any(np.all(seen <= y, axis=1)):
            kept.append([i, list(v)])
        seen = np.vstack([seen, y])
    return kept


def n_values(run: dict[str, Any]) -> int:
    """How many trials a run completed (``values`` or the compact ``n``)."""
    return len(run["values"]) if "values" in run else int(run["n"])


def best_so_far(run: dict[str, Any] | list[float], direction: str, trials: int) -> np.ndarray:
    """The best value of the first t trials, t = 1..trials, minimised (a maximised task's negated);
    a run that stopped early keeps its last best. ``run``: a run dict or its list of values."""
    sign = -1.0 if direction == "maximize" else 1.0
    if isinstance(run, dict) and "values" not in run:
        v = np.full(trials, np.inf)
        for i, x in run["best"]:
            if i < trials:
                v[i] = sign * float(x)
        return np.minimum.accumulate(v)
    values = run["values"] if isinstance(run, dict) else run
    v = sign * np.asarray(values[:trials], dtype=float)
    if v.size < trials:
        v = np.concatenate([v, np.full(trials - v.size, np.nan)])
    return np.fmin.accumulate(np.where(np.isnan(v), np.inf, v))


def front_points(run: dict[str, Any]) -> list[tuple[int, list[float]]]:
    """A multi-objective run's ``(trial index, values)`` pairs that can hold its front."""
    if "values" in run:
        return list(enumerate(run["values"]))
    return [(int(i), v) for i, v in run["front"]]


# ------------------------------------------------------------------ statistics
def checkpoints(at: Sequence[int], trials: int) -> list[int]:
    """The checkpoints a run of ``trials`` reaches; a shorter run reports at its end instead."""
    return [t for t in at if t < trials] + [trials] if trials < max(at) else list(at)


def value_at(curve: Sequence[float] | np.ndarray, t: int) -> float:
    return float(curve[min(t, len(curve)) - 1])


def mean_ranks(curves: dict, methods: list[str], cells: list[tuple]) -> dict[str, list[float]]:
    """Mean rank of best-so-far per trial (1 = best, ties share) over ``cells``; ``curves`` is keyed
    ``(method, *cell)``."""
    from scipy.stats import rankdata

    if len(methods) < 2 or not cells:
        return {}
    total = 0.0
    for c in cells:
        mat = np.stack([curves[(m, *c)] for m in methods])  # (M, T)
        total = total + np.apply_along_axis(rankdata, 0, mat)
    return {m: (total[i] / len(cells)).tolist() for i, m in enumerate(methods)}


def sign_test(curves: dict, a: str, b: str, cells: list[tuple], t: int) -> dict[str, Any]:
    """``a`` against ``b`` on the best-so-far at trial ``t`` per cell: wins / losses / ties (lower
    wins) and the two-sided binomial p of wins against losses."""
    from scipy.stats import binomtest

    pairs = [(value_at(curves[(a, *c)], t), value_at(curves[(b, *c)], t)) for c in cells
             if (a, *c) in curves and (b, *c) in curves]
    wins = sum(x < y for x, y in pairs)
    losses = sum(x > y for x, y in pairs)
    p = float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0
    return {"n": len(pairs), "wins": wins, "losses": losses, "ties": len(pairs) - wins - losses, "p": p}


def percentiles_ms(seconds: Sequence[float], grid: Sequence[float] = ()) -> dict[str, Any]:
    """Latencies in seconds -> n, p50 / p90 / p99, mean, min, max in milliseconds (and ``grid``
    percentiles, for CDFs from the JSON)."""
    if not len(seconds):
        return {"n": 0}
    ms = 1000.0 * np.asarray(seconds, dtype=float)
    out = {"n": int(ms.size), "p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90)),
           "p99": float(np.percentile(ms, 99)), "mean": float(ms.mean()), "min": float(ms.min()),
           "max": float(ms.max())}
    if len(grid):
        out["grid"] = [round(float(v), 3) for v in np.percentile(ms, grid)]
    return out


# ------------------------------------------------------------------ tables
def fmt(v: Any, width: int = 8, digits: int = 2) -> str:
    """A table cell: numbers to ``digits`` places, None / NaN as ``-``, right-aligned."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return f"{'-':>{width}}"
    if isinstance(v, float):
        return f"{v:>{width}.{digits}f}"
    return f"{v!s:>{width}}"


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]], first: int = 24,
                width: int = 9, digits: int = 2) -> None:
    """A plain table: the first column left-aligned in ``first`` characters, the rest in ``width``."""
    if title:
        print(f"\n{title}")
    print(f"{header[0]:<{first}}" + "".join(f"{h:>{width}}" for h in header[1:]))
    for row in rows:
        print(f"{str(row[0]):<{first}}" + "".join(fmt(v, width, digits) for v in row[1:]))


# ------------------------------------------------------------------ figures
def figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (6.0, 4.2),
           figsize: tuple[float, float] | None = None, **kw: Any):
    """``(fig, axes)`` from matplotlib's Agg backend, ``axes`` always 2-D; ``size`` per panel, or
    ``figsize`` for the whole figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=figsize or (size[0] * ncols, size[1] * nrows), squeeze=False, **kw)


def save_figure(fig: Any, path: str | Path, dpi: int = 100) -> Path:
    """``fig`` as a PNG of at most 256 colours (a plot needs no more; a third of the bytes)."""
    import matplotlib.pyplot as plt
    from PIL import Image

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
    small.save(path, "PNG", optimize=True)
    return Path(path)


def ms_bars(ax: Any, summary: Sequence[dict[str, Any]], key: str, rows: Sequence[dict[str, Any]] = ()) -> None:
    """Bars of each ``summary`` entry's median ``ms_per_trial`` (log scale) with whiskers to its
    ``ms_per_trial_min`` / ``_max``, labelled by ``entry[key]``; with ``rows``, each run's
    ``ms_per_trial`` as a dot on its bar."""
    import numpy as np

    labels = [entry[key] for entry in summary]
    col = colors(labels)
    x = np.arange(len(labels))
    med = np.array([entry["ms_per_trial"] for entry in summary])
    lo = med - np.array([entry["ms_per_trial_min"] for entry in summary])
    hi = np.array([entry["ms_per_trial_max"] for entry in summary]) - med
    ax.bar(x, med, color=[col[m] for m in labels], yerr=[lo, hi], capsize=3, alpha=0.85)
    for i, m in enumerate(labels):
        ys = [r["ms_per_trial"] for r in rows if r[key] == m]
        ax.scatter(np.full(len(ys), i) + np.linspace(-0.15, 0.15, len(ys)), ys, s=10, color="k", zorder=3)
    ax.set_yscale("log")
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_ylabel("ms per trial (wall, log)")
    ax.grid(axis="y", which="both", alpha=0.3)


def colors(names: Sequence[str], cmap: str = "tab10") -> dict[str, Any]:
    import matplotlib

    m = matplotlib.colormaps[cmap]
    return {n: m(i % m.N) for i, n in enumerate(names)}


def write_results(out: Path, meta: dict[str, Any], rows: list[dict[str, Any]], failures: list[str], t0: float,
                  aims: Callable[[list], list], print_table: Callable[..., None], plot: Callable[..., None]) -> None:
    """The end of a service suite's run that wrote ``out``'s ``.partial.json`` as it went: wall time,
    load and failures in ``meta``, the table, ``out`` (JSON with the aims' checks) in place of the
    partial file, the PNG."""
    import os
    import time

    meta["wall_seconds"] = time.time() - t0
    meta["loadavg_at_end"] = os.getloadavg()
    meta["failures"] = failures
    if not rows:
        return
    checks = aims(rows)
    print_table(rows, checks, meta)
    write_json(out, {"meta": meta, "rows": rows, "aims": checks})
    plot(rows, Path(out).with_suffix(".png"))
    wrote(out, Path(out).with_suffix(".png"))


def wrote(*paths: str | Path) -> None:
    print("wrote " + " and ".join(str(p) for p in paths))
