"""Acquisition functions over calibrated quantile arrays.

Every function works in the engine's internal orientation (*minimise*; a
maximised objective is negated before it reaches the surrogate) and returns a
score per candidate where **lower is better**. ``Q`` is (N, L): calibrated
quantiles at the study's levels, sorted along each row.

* ``ucb``: ACHO's optimistic bound (paper 001, eq. 22; for minimisation the
  lower end) of the widest interval pair.
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
* ``logei`` (the default): the logarithm of the expected improvement over the
  best observed value, on the same piecewise-uniform body between the outermost
  calibrated quantiles but with Gaussian tails beyond them: below the lowest
  quantile ``q_1`` (level ``l_1``) the distribution continues as the normal whose
  ``l_1`` and ``l_2`` quantiles are ``q_1`` and ``q_2`` (and likewise above). The
  tails give every candidate a positive expected improvement, so candidates the
  bounded body would all score at exactly zero (most of them, once the search
  has found a good region) are still told apart by how far, in their own
  spread, they are from improving; the logarithm keeps that comparison exact
  where the improvement underflows (Ament et al., 2023, "Unexpected Improvements
  to Expected Improvement for Bayesian Optimization", eq. 9). Unlike ``pi``, it
  values the size of an improvement: a candidate predicted to tie the best with
  a narrow spread (a plateau of equal observed values) has a small expected
  improvement, not the probability of one half ``pi`` gives it.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.special import erfcx, log_ndtr, ndtr, ndtri

ACQUISITIONS = ("logei", "obs", "ts", "its", "ucb", "ei", "pi", "mean")
# the lower-is-better scores of these are -log(utility): a crowd's penalty adds -log(phi) to them
LOG_UTILITY = ("logei",)
POSITIVE_UTILITY = ("ei", "pi")  # -score >= 0: a crowd's penalty multiplies it
# an improvement on the best observed value: what the objective (not an observation) could achieve,
# scored on the noise-free narrowing of the quantiles where the engine has one (scoring.scored);
# the sampling and bound acquisitions keep the calibrated quantiles their papers specify
IMPROVEMENT = ("logei", "ei", "pi")


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
    mean: NDArray[np.float64] = ((q[:, 1:] + q[:, :-1]) * 0.5 * np.diff(p)[None, :]).sum(axis=1)
    return mean


def median(Q: np.ndarray) -> np.ndarray:
    """The median of each row of quantiles on a symmetric level grid (the innermost pair's midpoint)."""
    L = Q.shape[1]
    mid: NDArray[np.float64] = 0.5 * (Q[:, L // 2 - 1] + Q[:, L // 2])
    return mid


def ucb(Q: np.ndarray, levels: np.ndarray) -> np.ndarray:
    return Q[:, 0]


def ts(Q: np.ndarray, levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    j = rng.integers(0, Q.shape[1], Q.shape[0])
    draw: NDArray[np.float64] = Q[np.arange(Q.shape[0]), j]
    return draw


def its(Q: np.ndarray, levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per candidate from the linearly interpolated quantile function."""
    q, p = _knots(Q, levels)
    u = rng.random(Q.shape[0])
    k = np.clip(np.searchsorted(p, u, side="right") - 1, 0, p.size - 2)  # segment of each draw
    rows = np.arange(Q.shape[0])
    t = (u - p[k]) / (p[k + 1] - p[k])
    draw: NDArray[np.float64] = q[rows, k] + t * (q[rows, k + 1] - q[rows, k])
    return draw


def obs(Q: np.ndarray, levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    score: NDArray[np.float64] = np.minimum(mean_of(Q, levels), ts(Q, levels, rng))
    return score


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
    score: NDArray[np.float64] = -(gain * mass).sum(axis=1)
    return score


def pi(Q: np.ndarray, levels: np.ndarray, best: float) -> np.ndarray:
    """-P(Y < best); ties (no mass below best) broken by the lowest quantile."""
    q, p = _knots(Q, levels)
    a, b = q[:, :-1], q[:, 1:]
    width = np.maximum(b - a, 1e-300)
    frac = np.clip((best - a) / width, 0.0, 1.0)
    prob = (frac * np.diff(p)[None, :]).sum(axis=1)
    spread = max(float(np.ptp(Q)), 1e-12)
    score: NDArray[np.float64] = -prob + 1e-9 * (Q[:, 0] - best) / spread
    return score


_C1 = 0.5 * math.log(2.0 * math.pi)
_C2 = 0.5 * math.log(math.pi / 2.0)


def log_h(z: np.ndarray) -> np.ndarray:
    """``log(phi(z) + z Phi(z))``: the log of a unit normal's expected improvement at standardised
    gap ``z``, stable for very negative ``z`` (Ament et al., 2023, eq. 9)."""
    z = np.asarray(z, dtype=float)
    out = np.empty_like(z)
    hi = z > -1.0
    zh = z[hi]
    out[hi] = np.log(np.exp(-0.5 * zh * zh - _C1) + zh * np.exp(log_ndtr(zh)))
    # below -1e6, x below rounds to 0 (it is about -1/z^2): the asymptote h(z) ~ phi(z) / z^2 is
    # exact there to a relative 3/z^2
    mid = ~hi & (z > -1e6)
    zm = z[mid]
    # log(1 - exp(x)) with x = log(erfcx(-z / sqrt 2) |z|) + log(sqrt(pi / 2)) < 0
    x = np.minimum(np.log(erfcx(-zm / math.sqrt(2.0)) * np.abs(zm)) + _C2, -1e-300)
    near = x > -math.log(2.0)
    log1mexp = np.empty_like(x)
    log1mexp[near] = np.log(-np.expm1(x[near]))
    log1mexp[~near] = np.log1p(-np.exp(x[~near]))
    out[mid] = -0.5 * zm * zm - _C1 + log1mexp
    lo = ~hi & ~mid
    out[lo] = -0.5 * z[lo] ** 2 - _C1 - 2.0 * np.log(np.abs(z[lo]))
    return out


def log_ei(Q: np.ndarray, levels: np.ndarray, best: float) -> np.ndarray:
    """log E[max(best - Y, 0)] for the body-and-Gaussian-tails distribution (see ``logei``).

    The body between ``q_1`` and ``q_L`` is piecewise uniform (mass ``l_{k+1} - l_k`` between
    ``q_k`` and ``q_{k+1}``); below ``q_1`` the mass ``l_1`` follows ``N(mu, s^2)`` with
    ``s = (q_2 - q_1) / (z_2 - z_1)`` and ``mu = q_1 - s z_1`` (``z_k`` the normal quantiles of
    the levels), so that with ``b = min(best, q_1)`` and ``u = (b - mu) / s``,
    ``E[(best - Y) 1{Y < b}] = (best - b) Phi(u) + s h(u)``, summed in log space; the upper tail
    (a normal matched at ``q_{L-1}``, ``q_L``) only counts when ``best > q_L``.
    """
    lv = np.asarray(levels, float)
    n, L = Q.shape
    zl = ndtri(lv)
    # body: E[(best - Y)^+ ; q_1 <= Y <= q_L] over uniform segments
    a, b = Q[:, :-1], Q[:, 1:]
    mass = np.diff(lv)[None, :]
    width = np.maximum(b - a, 1e-300)
    full = best >= b
    part = (best > a) & ~full
    gain = np.where(full, best - (a + b) / 2.0, np.where(part, (best - a) ** 2 / (2.0 * width), 0.0))
    body = (gain * mass).sum(axis=1)
    # lower tail: Y ~ N(mu, s) restricted to Y < q_1 (its mass there is exactly l_1)
    s_lo = np.maximum((Q[:, 1] - Q[:, 0]) / (zl[1] - zl[0]), 1e-12 * (1.0 + np.abs(Q[:, 0])))
    mu_lo = Q[:, 0] - s_lo * zl[0]
    cut = np.minimum(best, Q[:, 0])
    u = (cut - mu_lo) / s_lo  # E[(best - Y) 1{Y < cut}] = (best - cut) Phi(u) + s h(u)
    log_tail = np.logaddexp(np.log(s_lo) + log_h(u),
                            np.where(best > cut, np.log(np.maximum(best - cut, 1e-300)) + log_ndtr(u), -np.inf))
    # upper tail: only when the best lies above the highest quantile; the normal above q_L has mass
    # 1 - l_L, and E[(best - Y) 1{q_L < Y < best}] = (best - mu)(Phi(c) - l_L) + s (phi(c) - phi(z_L))
    s_hi = np.maximum((Q[:, -1] - Q[:, -2]) / (zl[-1] - zl[-2]), 1e-12 * (1.0 + np.abs(Q[:, -1])))
    mu_hi = Q[:, -1] - s_hi * zl[-1]
    c = (best - mu_hi) / s_hi
    pdf = np.exp(-0.5 * c * c - _C1) - math.exp(-0.5 * zl[-1] ** 2 - _C1)
    upper = np.where(best > Q[:, -1], (best - mu_hi) * (ndtr(c) - lv[-1]) + s_hi * pdf, 0.0)
    upper = np.maximum(upper, 0.0)
    with np.errstate(divide="ignore"):
        logei: NDArray[np.float64] = np.logaddexp(np.log(body + upper), log_tail)
        return logei


def log_prob_below(Q: np.ndarray, levels: np.ndarray, t: float) -> np.ndarray:
    """log P(Y <= t) per row for the body-and-Gaussian-tails distribution of ``log_ei``.

    What a constraint's calibrated quantiles say of its feasibility (``t`` its bound): linear
    between the quantiles, the normal tails beyond, so it is never exactly 0 or 1 and the log of a
    product over constraints stays finite and ordered however unlikely feasibility is.
    """
    lv = np.asarray(levels, float)
    zl = ndtri(lv)
    n = Q.shape[0]
    out = np.empty(n)
    lo = t < Q[:, 0]
    hi = t > Q[:, -1]
    mid = ~lo & ~hi
    if lo.any():
        s = np.maximum((Q[lo, 1] - Q[lo, 0]) / (zl[1] - zl[0]), 1e-12 * (1.0 + np.abs(Q[lo, 0])))
        out[lo] = log_ndtr((t - Q[lo, 0]) / s + zl[0])
    if hi.any():
        s = np.maximum((Q[hi, -1] - Q[hi, -2]) / (zl[-1] - zl[-2]), 1e-12 * (1.0 + np.abs(Q[hi, -1])))
        out[hi] = log_ndtr((t - Q[hi, -1]) / s + zl[-1])
    if mid.any():
        Qm = Q[mid]
        k = np.clip((Qm <= t).sum(axis=1) - 1, 0, lv.size - 2)  # the segment [q_k, q_k+1] holding t
        rows = np.arange(Qm.shape[0])
        a, b = Qm[rows, k], Qm[rows, k + 1]
        frac = np.clip((t - a) / np.maximum(b - a, 1e-300), 0.0, 1.0)
        out[mid] = np.log(lv[k] + frac * (lv[k + 1] - lv[k]))
    return out


def logei(Q: np.ndarray, levels: np.ndarray, best: float) -> np.ndarray:
    """-log EI (lower is better)."""
    return -log_ei(Q, levels, best)


def score(
    name: str,
    Q: np.ndarray,
    levels: np.ndarray,
    *,
    best: float | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Dispatch by name; lower is better."""
    if name == "obs":
        return obs(Q, levels, rng)
    if name == "ts":
        return ts(Q, levels, rng)
    if name == "its":
        return its(Q, levels, rng)
    if name == "ucb":
        return ucb(Q, levels)
    if name == "mean":
        return mean_of(Q, levels)
    if name == "logei":
        return mean_of(Q, levels) if best is None else logei(Q, levels, best)
    if name in ("ei", "pi"):
        if best is None:
            return mean_of(Q, levels)
        return ei(Q, levels, best) if name == "ei" else pi(Q, levels, best)
    raise ValueError(f"unknown acquisition {name!r}; choose from {ACQUISITIONS}")
