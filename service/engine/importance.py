"""Hyperparameter importance from the study's own surrogate: a functional-ANOVA first-order share
per parameter, with its spread over bootstrap refits.

For a fitted surrogate ``f`` (its median) over the search space with every parameter drawn
independently (``SearchSpace.sample``: scrambled Sobol, conditions applied), the first-order
effect of parameter ``j`` is ``Var(E[f | x_j]) / Var(f)``: the share of the model's variance that
``x_j`` alone explains (Sobol' first-order index; fANOVA's main effect). It is estimated on
``n_points`` model predictions by binning ``x_j`` (a categorical by choice, a number by ``bins``
equal-width bins), less the share the bins would explain by chance, ``(K - 1) / (n - 1)`` of the
rest. A conditional parameter counts only where it is active: its share is the between-bin
variance among the points where it is active, weighted by their fraction (``P(active)
Var(E[f | x_j, active]) / Var(f)``), so the effect of the parent that switches it on stays with
the parent. The shares are normalised to sum to 1, as Optuna's evaluators do.

Uncertainty: the model is refitted on ``n_boot`` bootstrap resamples of the trials; ``low`` and
``high`` are the 10th and 90th percentiles of each parameter's normalised share over those refits
(how much the ranking rests on which trials happened to be observed), stretched where needed to
hold the estimate itself (a refit sees about 63% of the distinct trials, so its shares are more
diffuse than the full fit's and a sharp estimate can fall outside their spread), and ``fit.r2_oob`` is the
out-of-bag R^2 of the refits' predictions (how far the model, and so its decomposition, can be
trusted: near 0 or below, the importances describe noise; null where it is undefined: no refit left
a trial out, or every value is the same).

Any finite value is an outcome (up to +-1.8e308), and the decomposition is computed where its
numbers are representable. The values are standardised (mean 0, sd 1) after an exact power-of-two
rescaling, so that no square overflows or underflows: multiplying every value by a constant or
adding one to them does not change the answer beyond rounding, and ordinary values are
standardised bit for bit as without it. A value more than ``TAME`` (1e6) robust scales from the
median (the median distance of the other values to it) is first pulled in towards it, to
``TAME * (1 + log(1 + log(r / TAME)))`` scales when it lies ``r`` scales away (continuous, with slope
1 at ``TAME``, strictly increasing, at most about ``8 * TAME`` for any finite values), computed so that
no step overflows. Without it, one diverged run of 1e20 among losses near 1 would leave every
other value the same number once the surrogate has standardised them and LightGBM has stored them
as 32-bit floats, and the model would be flat; with it, the value still counts as the worst by far
and the differences among the others stay resolved. Values within ``TAME`` scales are used exactly
as they are; beyond it, how far out a value lies barely moves a median model anyway.
A model whose predictions vary by less than rounding noise (a standard deviation under 1e-12 of the
standardised values) explains nothing: its shares are 0, not the noise's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import reprs
from .space import SearchSpace
from .surrogates import make_surrogate

__all__ = ["MIN_TRIALS", "TAME", "Importance", "importance"]

MIN_TRIALS = 4  # completed trials before there is anything to decompose
_LEVELS = (0.1, 0.5, 0.9)
# values farther than this many robust scales from the median are pulled in (``_tame``): beyond it
# a single value would blur the others, once standardised, below LightGBM's 32-bit labels' resolution
TAME = 1e6
# the variance, in the standardised values' units (sd 1), below which a model's predictions are flat:
# rounding noise of its sums is about 1e-16 of them; a real effect is at least the 32-bit labels' 1e-8
_FLAT = 1e-24
_LARGEST = float(np.finfo(float).max)


@dataclass(frozen=True)
class Importance:
    params: list[dict[str, Any]]  # {"param", "importance", "low", "high"}, most important first
    n_trials: int
    method: str
    r2_oob: float | None
    seconds: float

    def __repr__(self) -> str:
        top = self.params[0] if self.params else None
        return reprs.build(self, ("n_trials", str(self.n_trials)), ("method", repr(self.method)),
                           ("top", None if top is None else f"{reprs.value(top.get('param'))}: "
                                                            f"{reprs.value(top.get('importance'))}"),
                           ("params", str(len(self.params))), ("r2_oob", reprs.value(self.r2_oob)))

    def to_dict(self) -> dict[str, Any]:
        return {"importances": self.params, "n_trials": self.n_trials, "method": self.method,
                "fit": {"r2_oob": self.r2_oob, "n_boot": len(self.params[0]["shares"]) if self.params else 0},
                "seconds": self.seconds}


def _bins(space: SearchSpace, u: np.ndarray, bins: int) -> list[np.ndarray]:
    """Per parameter, each point's bin index (-1 where the parameter is inactive)."""
    out = []
    for j, p in enumerate(space.params):
        col = u[:, j]
        on = col >= 0
        if p.type in ("categorical", "ordinal"):
            b = p.from_unit(np.where(on, col, 0.0)).astype(int)
        else:
            b = np.minimum((np.clip(col, 0.0, 1.0) * bins).astype(int), bins - 1)
        out.append(np.where(on, b, -1))
    return out


def _shares(f: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """First-order variance share of each grouping of the points, less its chance share; a
    grouping's points in group -1 (the parameter inactive) are left out and the share among the
    rest is weighted by their part of the total variance."""
    n = f.size
    var = f.var()
    out = np.zeros(len(groups))
    if not var > _FLAT:  # a flat model (or one whose variance is rounding noise) explains nothing
        return out
    for j, g in enumerate(groups):
        on = g >= 0
        fa, ga = f[on], g[on]
        va = fa.var() if fa.size > 1 else 0.0
        if not va > 0:
            continue
        _, inv, counts = np.unique(ga, return_inverse=True, return_counts=True)
        means = np.bincount(inv, weights=fa) / counts
        s = float((counts * (means - fa.mean()) ** 2).sum() / (fa.size * va))
        k = counts.size
        out[j] = max(0.0, s - (k - 1) / (fa.size - 1) * (1.0 - s)) * fa.size * va / (n * var)
    return out


def _tame(y: np.ndarray) -> np.ndarray:
    """``y`` with each value more than ``TAME`` robust scales from the median pulled in (the module
    docstring); ``y`` itself where none is. Any finite values: no step overflows.

    The centre ``c`` is the lower median (one of the values) and the scale ``b`` the median distance
    to it of the values that differ from it (a plateau of equal values does not make it 0), both as
    ``engine.warp`` squashes values; distances are handled halved, since ``y - c`` can overflow."""
    if y.size == 0:
        return y
    c = float(np.sort(y)[(y.size - 1) // 2])
    h = np.abs(y / 2.0 - c / 2.0)  # |y - c| / 2
    if not (h > 0).any():
        return y
    # b / 2 (the median of two halves near 1.8e308 would overflow); at least the smallest normal float,
    # so that r, and the distance it is pulled in to, stay finite even among subnormal values
    half_b = max(2.0 * float(np.median(h[h > 0] / 2.0)), float(np.finfo(float).tiny))
    with np.errstate(over="ignore", divide="ignore"):
        far = h / half_b > TAME  # r = |y - c| / b; an overflow to inf is far too
    if not far.any():
        return y
    log_r = np.log(h[far]) - np.log(half_b)
    r = TAME * (1.0 + np.log1p(log_r - np.log(TAME)))  # <= the r it replaces: the value moves towards c
    hc = np.minimum(half_b * r, h[far])
    out = y.copy()
    out[far] = np.clip(2.0 * (c / 2.0 + np.sign(y[far] / 2.0 - c / 2.0) * hc), -_LARGEST, _LARGEST)
    return out


def _standardised(y: np.ndarray) -> np.ndarray:
    """``(y - mean) / sd`` (``y - mean`` where every value is the same) for any finite ``y``: the values
    are first rescaled by a power of two to below 1 in magnitude, which is exact, so neither the mean
    nor the squares in the variance can overflow or underflow, and ordinary values come out bit for
    bit as without it."""
    top = float(np.max(np.abs(y)))
    if top > 0:
        y = np.ldexp(y, -int(np.frexp(top)[1]))
    std: NDArray[np.float64] = (y - y.mean()) / (y.std() or 1.0)
    return std


def importance(observations: Sequence[tuple[dict[str, Any], float]], space: SearchSpace, *,
               surrogate: str = "qgbm", seed: int = 0, n_boot: int = 8, n_points: int = 2048,
               bins: int = 16, max_trials: int = 2000) -> Importance:
    """Each parameter's first-order importance (see the module docstring) from ``observations``
    (``(params, value)`` of completed trials; a value's direction does not change a variance).
    Time is bounded: only the latest ``max_trials`` trials are fitted, ``n_boot`` times."""
    t0 = time.perf_counter()
    configs = [space.validate(p) for p, _ in observations]
    y = np.asarray([float(v) for _, v in observations], dtype=float)
    keep = np.isfinite(y)
    configs, y = [c for c, k in zip(configs, keep, strict=True) if k], y[keep]
    configs, y = configs[-max_trials:], y[-max_trials:]
    n = len(y)
    if n < MIN_TRIALS:
        raise ValueError(f"importance needs at least {MIN_TRIALS} completed trials with a finite value, got {n}")
    X = space.encode(configs)
    y = _standardised(_tame(y))
    rng = np.random.default_rng(seed)
    u = space.sample(n_points, seed)
    grid = space.features(u)
    groups = _bins(space, u, bins)
    shares, oob_sq, oob_n = [], 0.0, 0
    for b in range(n_boot):
        rows = np.arange(n) if b == 0 else rng.integers(0, n, n)
        model = make_surrogate(surrogate, _LEVELS, seed=seed + b).fit(X[rows], y[rows])
        f = model.predict_quantiles(grid, _LEVELS)[:, 1]
        s = _shares(f, groups)
        shares.append(s / s.sum() if s.sum() > 0 else s)
        out = np.setdiff1d(np.arange(n), rows)
        if b > 0 and out.size:
            pred = model.predict_quantiles(X[out], _LEVELS)[:, 1]
            oob_sq += float(((pred - y[out]) ** 2).sum())
            oob_n += out.size
    S = np.asarray(shares)  # (n_boot, P); row 0: the fit on every trial
    # y is standardised: its variance is 1, or 0 where every value is the same (R^2 undefined)
    r2 = None if oob_n == 0 or not y.std() > 0 else float(1.0 - oob_sq / oob_n)
    if r2 is not None and not np.isfinite(r2):
        r2 = None
    params: list[dict[str, Any]]
    params = [{"param": p.name, "importance": float(S[0, j]),
               "low": float(min(S[0, j], np.percentile(S[:, j], 10))),
               "high": float(max(S[0, j], np.percentile(S[:, j], 90))),
               "shares": [float(x) for x in S[:, j]]}
              for j, p in enumerate(space.params)]
    params.sort(key=lambda d: (-d["importance"], d["param"]))
    return Importance(params, n, f"first-order fANOVA of {surrogate}, {n_boot} bootstrap fits",
                      r2, time.perf_counter() - t0)
