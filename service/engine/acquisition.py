"""Acquisition functions over calibrated quantile arrays.

Every function works in the engine's internal orientation (*minimise*; a
maximised objective is negated before it reaches the surrogate) and returns a
score per candidate where **lower is better**. ``Q`` is (N, L): calibrated
quantiles at the study's levels, sorted along each row.

* ``ucb``: ACHO's optimistic bound (paper 001, eq. 22; for minimisation the
  lower end) of one interval pair, by default the widest.
* ``ts``: Thompson sampling (paper 002, eq. 12-13): per candidate draw a level
  index uniformly and take that calibrated quantile. With equal-mass levels
  this is discretised inverse-CDF sampling.
* ``its``: independent Thompson sampling (BANANAS-CP thesis, 3.4.1): per
  candidate one draw ``u ~ U(0, 1)`` from the distribution whose quantile
  function interpolates the calibrated quantiles linearly (3.3, tails to levels
  0 and 1 as below): a continuous version of ``ts``.
* ``obs``: optimistic Bayesian sampling (paper 002, 3.2): the TS draw floored
  by the conditional expectation, ``max(E[Y|x], Y_x)`` for maximisation, i.e.
  ``min`` here.
* ``mean``: greedy expected value (no exploration), the sampling paper 002
  uses for its calibration study.
* ``ei`` / ``pi``: expected improvement and probability of improvement over the
  best observed value (3.1), on the distribution whose quantile function is
  linear between the calibrated quantiles (uniform density within adjacent
  quantile intervals), with linear tails to levels 0 and 1.
"""

from __future__ import annotations

import numpy as np

ACQUISITIONS = ("obs", "ts", "its", "ucb", "ei", "pi", "mean")


def _knots(Q: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantile function knots with tails extended to levels 0 and 1."""
    lv = np.asarray(levels, float)
    lo_slope = (Q[:, 1] - Q[:, 0]) / (lv[1] - lv[0])
    hi_slope = (Q[:, -1] - Q[:, -2]) / (lv[-1] - lv[-2])
    q0 = Q[:, 0] - lo_slope * lv[0]
    q1 = Q[:, -1] + hi_slope * (1.0 - lv[-1])
    return np.column_stack([q0, Q, q1]), np.concatenate([[0.0], lv, [1.0]])


def mean_of(Q: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Expectation of the piecewise-linear quantile function (trapezoid rule)."""
    q, p = _knots(Q, levels)
    return ((q[:, 1:] + q[:, :-1]) * 0.5 * np.diff(p)[None, :]).sum(axis=1)


def ucb(Q: np.ndarray, levels: np.ndarray, pair: int = 0) -> np.ndarray:
    return Q[:, pair]


def ts(Q: np.ndarray, levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    j = rng.integers(0, Q.shape[1], Q.shape[0])
    return Q[np.arange(Q.shape[0]), j]


def its(Q: np.ndarray, levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per candidate from the linearly interpolated quantile function."""
    q, p = _knots(Q, levels)
    u = rng.random(Q.shape[0])
    k = np.clip(np.searchsorted(p, u, side="right") - 1, 0, p.size - 2)  # segment of each draw
    rows = np.arange(Q.shape[0])
    t = (u - p[k]) / (p[k + 1] - p[k])
    return q[rows, k] + t * (q[rows, k + 1] - q[rows, k])


def obs(Q: np.ndarray, levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.minimum(mean_of(Q, levels), ts(Q, levels, rng))


def ei(Q: np.ndarray, levels: np.ndarray, best: float) -> np.ndarray:
    """-E[max(best - Y, 0)] with Y piecewise-uniform between quantile knots."""
    q, p = _knots(Q, levels)
    a, b = q[:, :-1], q[:, 1:]  # segment ends, a <= b
    mass = np.diff(p)[None, :]
    # E[max(best - Y, 0)] over Y ~ U[a, b] with mass m:
    width = np.maximum(b - a, 1e-300)
    full = best >= b  # whole segment improves: best - mean
    part = (best > a) & ~full  # partly: (best - a)^2 / (2 width)
    gain = np.where(full, best - (a + b) / 2.0, np.where(part, (best - a) ** 2 / (2.0 * width), 0.0))
    return -(gain * mass).sum(axis=1)


def pi(Q: np.ndarray, levels: np.ndarray, best: float) -> np.ndarray:
    """-P(Y < best); ties (no mass below best) broken by the lowest quantile."""
    q, p = _knots(Q, levels)
    a, b = q[:, :-1], q[:, 1:]
    width = np.maximum(b - a, 1e-300)
    frac = np.clip((best - a) / width, 0.0, 1.0)
    prob = (frac * np.diff(p)[None, :]).sum(axis=1)
    spread = max(float(np.ptp(Q)), 1e-12)
    return -prob + 1e-9 * (Q[:, 0] - best) / spread


def score(
    name: str,
    Q: np.ndarray,
    levels: np.ndarray,
    *,
    best: float | None,
    rng: np.random.Generator,
    ucb_pair: int = 0,
) -> np.ndarray:
    """Dispatch by name; lower is better."""
    if name == "obs":
        return obs(Q, levels, rng)
    if name == "ts":
        return ts(Q, levels, rng)
    if name == "its":
        return its(Q, levels, rng)
    if name == "ucb":
        return ucb(Q, levels, ucb_pair)
    if name == "mean":
        return mean_of(Q, levels)
    if name in ("ei", "pi"):
        if best is None:
            return mean_of(Q, levels)
        return ei(Q, levels, best) if name == "ei" else pi(Q, levels, best)
    raise ValueError(f"unknown acquisition {name!r}; choose from {ACQUISITIONS}")
