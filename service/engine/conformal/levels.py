"""The level grid, its interval pairs, and the adaptive schedule of conformal methods.

A study has an even grid of quantile levels, sorted, symmetric about 1/2: the midpoints
``(i + 1/2) / M`` of ``M`` equal-mass bins (``midpoint_levels``). Level ``i`` and level
``M - 1 - i`` form an interval pair with nominal miscoverage ``alpha_i = 2 * levels[i]``.

Schedule (paper 002, section 5.1 and 6.3): raw quantiles below ``conformalize_from`` (32)
observations, CV+ (K = 5) below ``split_from`` (50), split conformal after.
"""

from __future__ import annotations

import numpy as np

METHODS = ("raw", "split", "cv+", "crossval", "jab+")
# methods with one shown model and one score set: lo(x) - V(x) q and hi(x) + V(x) q. "jackknife" is
# the method of snapshots stored by the removed early_scores="loo" setting (the shown model's
# leave-one-out scores): such a snapshot still selects by the same rule until the study's next fit.
SPLIT_RULE = ("split", "jackknife", "crossval", "jab+")


def midpoint_levels(m: int) -> np.ndarray:
    """``m`` equal-mass quantile levels (bin midpoints); ``m`` must be even."""
    if m < 2 or m % 2:
        raise ValueError("the number of quantile levels must be even and >= 2")
    return (np.arange(m) + 0.5) / m


def check_levels(levels: np.ndarray) -> np.ndarray:
    lv = np.asarray(levels, dtype=float)
    if lv.ndim != 1 or lv.size < 2 or lv.size % 2:
        raise ValueError("levels must be an even-length list")
    if np.any(np.diff(lv) <= 0) or lv[0] <= 0 or lv[-1] >= 1:
        raise ValueError("levels must be strictly increasing inside (0, 1)")
    if not np.allclose(lv + lv[::-1], 1.0):
        raise ValueError("levels must be symmetric about 0.5")
    return lv


def pair_alphas(levels: np.ndarray) -> np.ndarray:
    """Nominal miscoverage of each pair ``(i, M-1-i)``, widest interval first."""
    lv = np.asarray(levels)
    return 2.0 * lv[: lv.size // 2]


def schedule(n: int, conformalize_from: int = 32, split_from: int = 50, mode: str = "adaptive") -> str:
    """Which conformal method a fit on ``n`` observations uses: ``mode`` itself when it names a
    method, else (``"adaptive"``) raw, CV+ or split by ``n``."""
    if mode == "raw" or n < conformalize_from:
        return "raw"
    if mode in METHODS:
        return mode
    if mode != "adaptive":
        raise ValueError(f"unknown conformal mode {mode!r}")
    return "split" if n >= split_from else "cv+"
