"""Calibration metrics over a study's (prediction at ask, outcome) records.

Arrays are (T, P): T trials in order, P interval pairs (widest first).

* coverage: fraction of outcomes inside the interval they were predicted with;
  breach rate is its complement (paper 001's metric).
* rolling coverage error (paper 002, Table 1): the mean, over consecutive
  non-overlapping windows of 20 trials, of |window coverage - nominal|.
* LLR of breaches vs params (Table 1): likelihood-ratio statistic of a logistic
  regression of the breach indicator on the configuration features against
  the intercept-only model; near 0 when breaches do not depend on where the
  configuration is.
* RMSCE (paper 003, eq. 3.8, after Kuleshov et al.): with ``p_hat_j`` the
  fraction of outcomes at or below their predicted ``p_j`` quantile,
  ``sqrt(sum_j w_j (p_j - p_hat_j)^2)`` with ``w_j = 1/m`` by default (the
  thesis prints the sum without the root its name implies).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray


def coverage(covered: np.ndarray) -> np.ndarray:
    c = np.asarray(covered, dtype=float)
    return c.mean(axis=0) if c.size else np.full(c.shape[-1] if c.ndim == 2 else 0, np.nan)


def coverage_gap(coverage_: Sequence[float], nominal: Sequence[float]) -> float:
    """The calibration gap: the mean over interval pairs of |empirical coverage - nominal coverage|."""
    return float(np.mean(np.abs(np.subtract(coverage_, nominal))))


def breach_rate(covered: np.ndarray) -> np.ndarray:
    return 1.0 - coverage(covered)


def cumulative_coverage(covered: np.ndarray) -> np.ndarray:
    """(T, P) running coverage after each trial."""
    c = np.asarray(covered, dtype=float)
    return np.cumsum(c, axis=0) / np.arange(1, c.shape[0] + 1)[:, None]


def trailing_coverage(covered: np.ndarray, window: int = 20) -> np.ndarray:
    """(T, P) coverage over the last ``window`` trials (fewer at the start) after each trial."""
    c = np.asarray(covered, dtype=float)
    cs = np.vstack([np.zeros((1, c.shape[1])), np.cumsum(c, axis=0)])
    t = np.arange(1, c.shape[0] + 1)
    start = np.maximum(t - window, 0)
    out: NDArray[np.float64] = (cs[t] - cs[start]) / (t - start)[:, None]
    return out


def rolling_coverage_error(covered: np.ndarray, nominal: ArrayLike, window: int = 20) -> np.ndarray:
    c = np.asarray(covered, dtype=float)
    nom = np.asarray(nominal, dtype=float)
    k = c.shape[0] // window
    if k == 0:
        return np.full(nom.shape, np.nan)
    w = c[: k * window].reshape(k, window, -1).mean(axis=1)  # (k, P)
    err: NDArray[np.float64] = np.abs(w - nom[None, :]).mean(axis=0)
    return err


def mean_width(widths: np.ndarray) -> np.ndarray:
    """Mean width per level over the bounded intervals (an unbounded one, ``None`` or infinite in a
    record, has no width to average: ``unbounded_share`` counts them); NaN where none is bounded."""
    w = np.asarray(widths, dtype=float)  # None reads as NaN
    if not w.size:
        return np.full(w.shape[-1] if w.ndim == 2 else 0, np.nan)
    bounded = np.isfinite(w)
    n = bounded.sum(axis=0)
    total = np.where(bounded, w, 0.0).sum(axis=0)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def unbounded_share(widths: np.ndarray) -> np.ndarray:
    """Share of the intervals per level with an unbounded end (see ``mean_width``)."""
    w = np.asarray(widths, dtype=float)
    return (~np.isfinite(w)).mean(axis=0) if w.size else np.full(w.shape[-1] if w.ndim == 2 else 0, np.nan)


def llr_breaches(X: np.ndarray, breached: np.ndarray) -> float:
    """2 * (loglik(logistic on X) - loglik(intercept only)) for the breach indicator."""
    from sklearn.linear_model import LogisticRegression

    b = np.asarray(breached, dtype=int).ravel()
    X = np.asarray(X, dtype=float)
    n = b.size
    k = b.sum()
    if n == 0 or k == 0 or k == n:
        return 0.0
    p0 = k / n
    ll0 = k * np.log(p0) + (n - k) * np.log(1 - p0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LogisticRegression(C=1e4, max_iter=2000).fit(X, b)
    p = np.clip(model.predict_proba(X)[:, 1], 1e-12, 1 - 1e-12)
    ll1 = float(np.sum(b * np.log(p) + (1 - b) * np.log(1 - p)))
    return float(max(0.0, 2.0 * (ll1 - ll0)))


def rmsce(quantiles: ArrayLike, levels: ArrayLike, y: ArrayLike,
          weights: ArrayLike | None = None) -> float:
    q = np.asarray(quantiles, dtype=float)
    lv = np.asarray(levels, dtype=float)
    yv = np.asarray(y, dtype=float)
    if q.shape[0] == 0:
        return float("nan")
    p_hat = (yv[:, None] <= q).mean(axis=0)
    w = np.full(lv.size, 1.0 / lv.size) if weights is None else np.asarray(weights, float)
    return float(np.sqrt(np.sum(w * (lv - p_hat) ** 2)))


def summarize(records: Sequence[dict[str, Any]], features: np.ndarray | None = None,
              window: int = 20, conformal_only: bool = False) -> dict[str, Any]:
    """All metrics from ``adapt``'s records (and, for LLR, the trials' features)."""
    rows = [r for r in records if not conformal_only or r["method"] != "raw"]
    if not rows:
        return {"n": 0}
    cov_levels = np.asarray(rows[0]["coverage"], dtype=float)
    covered = np.array([r["covered"] for r in rows], dtype=float)
    widths = np.array([r["width"] for r in rows], dtype=float)
    out: dict[str, Any] = {
        "n": len(rows),
        "nominal": cov_levels.tolist(),
        "coverage": coverage(covered).tolist(),
        "breach_rate": breach_rate(covered).tolist(),
        "rolling_coverage_error": rolling_coverage_error(covered, cov_levels, window).tolist(),
        "mean_width": mean_width(widths).tolist(),
        "unbounded_share": unbounded_share(widths).tolist(),
    }
    if features is not None:
        idx = [i for i, r in enumerate(records) if not conformal_only or r["method"] != "raw"]
        X = np.asarray(features)[idx]
        out["llr"] = [llr_breaches(X, 1 - covered[:, j]) for j in range(covered.shape[1])]
    if all("quantiles" in r for r in rows):
        out["rmsce"] = rmsce([r["quantiles"] for r in rows], rows[0]["levels"], [r["value"] for r in rows])
    return out
