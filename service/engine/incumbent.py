"""The incumbent an improvement acquisition improves on: the best feasible observed value, less half
a quantized metric's step where the best is tied (``fit`` and ``extend`` alike)."""

from __future__ import annotations

import numpy as np

from .warp import Warp


def incumbent(y: np.ndarray, feasible: np.ndarray) -> float:
    """What an improvement acquisition improves on (warped, minimised): the best feasible observed
    value (the best of all when none is feasible)."""
    rows = np.flatnonzero(feasible) if feasible.any() else np.arange(y.size)
    return float(y[rows].min())


def quantum(values: np.ndarray) -> float:
    """The step of a quantized metric at its incumbent: where the best value was observed more than
    once (a tie; distinct configurations of a continuous metric do not tie), the smallest step
    between distinct observed values; else 0. Accuracy on a small dataset moves in steps of one
    sample, and a plateau repeats one value. Values within 1e-9 of their range count as one."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.size < 2:
        return 0.0
    half = 0.5 * v  # distances of halves: outcomes near +-1.8e308 span more than the largest float
    tol = 1e-9 * max(float(half[-1] - half[0]), 1e-300)
    if half[1] - half[0] > tol:  # the best is not tied
        return 0.0
    gaps = np.diff(half)
    steps = gaps[gaps > tol]
    return float(min(2.0 * float(steps.min()), np.finfo(float).max)) if steps.size else 0.0


def improvable(best: float, raw: np.ndarray, feasible: np.ndarray, warp: Warp) -> float:
    """The value an improvement acquisition improves on (warped, minimised): the best observed
    value less half the metric's ``quantum`` (in its own units, through the warp). Where the
    incumbent is tied, a trial that ties it again changes nothing, and one that improves does so by
    at least a step: expected improvement past half a step prefers the candidates that can still
    change the result (docs: benchmarks, real tuning, plateaus and ties). On a continuous metric the
    quantum is 0 and this is the best observed value."""
    rows = np.flatnonzero(feasible) if feasible.any() else np.arange(raw.size)
    q = quantum(raw[rows])
    if q <= 0.0:
        return best
    target = float(warp.forward(np.array([float(raw[rows].min()) - 0.5 * q]))[0])
    return min(best, target) if np.isfinite(target) else best
