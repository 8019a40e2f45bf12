"""Output warping: a monotone map of the observed values before the surrogate sees them.

Real tuning metrics are heavy-tailed (a bad configuration's MSE or log loss is many times a good
one's) and quantized (accuracy moves in steps of one sample). A surrogate fitted on the raw values
spends its flexibility on the bad tail, and its predictive spread, fitted to that tail, swamps the
differences between good configurations, which are the ones an acquisition must tell apart.
Warping the values first, as HEBO does (Cowen-Rivers et al., 2022, "HEBO: Pushing the limits of
sample-efficient hyper-parameter optimisation"), puts the good region on a comparable scale.

``yeo-johnson`` (the default): the values (minimise orientation) are centred on their median and
scaled by their median absolute deviation (their standard deviation when more than half tie, as
on a plateau), then mapped by the Yeo-Johnson power transform (Yeo & Johnson, 2000) with the
exponent ``lambda`` that maximises its normal likelihood, searched in [0, 2]. In that range the
transform is a strictly increasing bijection of the real line (lambda -> 0 compresses the upper
tail like a log, lambda -> 2 the lower one; 1 is the identity), so every quantile the surrogate
predicts maps back to a finite value and the order of outcomes is kept: conformal intervals,
coverage and ACI/DtACI mean the same before and after it.

The engine fits, conformalizes and runs its acquisitions on the warped values; a prediction is
mapped back to the user's units for display (quantiles, intervals, mean), and ``adapt`` warps a
told value with the warp stored on the prediction before comparing it with the conformal point
sets. ``yeo-johnson-tail``: the same centring and scaling, then the Yeo-Johnson transform on the side
it compresses only, the other side left as it is: with ``lambda < 1`` (a long tail of bad values,
the usual case of losses) the values above the median are compressed like a log and those below
it keep their scale; with ``lambda > 1`` the values below the median are compressed instead.
``lambda`` maximises the normal likelihood of this one-sided transform. The two-sided transform
with ``lambda < 1`` also *stretches* the values below the median (its lower branch is convex), so
the incumbent sits several warped units below the rest and every region the surrogate knows
little about, predicted near the median, looks hopeless beside it: the search keeps to the
incumbent's basin, and on a plateau of equal best values it stalls there. Compressing the
heavy tail is what the warp is for; the one-sided transform does only that. Both branches have
slope 1 at the median, so it is a strictly increasing, continuously differentiable bijection of
the real line, and every property above holds for it too.

``none`` keeps the values as they are.

Values the arithmetic above cannot take (any finite float is a valid outcome, up to +-1.8e308)
are first squashed: when a value exceeds 1e150 in magnitude, or lies more than 1e30 robust
scales from the median, every value is mapped by ``sign(y - c) log1p(|y - c| / b)`` (``c`` a
median value, ``b`` the median of the other values' distances to it), computed so that no step
overflows, and the warp is fitted to the squashed values. The map is strictly increasing, so the
order of outcomes and everything conformal is kept; the squashed values lie within +-1500, where
every surrogate and the power transform are safe. Ordinary values never trigger it, and their warp
and its stored form are the same as without it.

Centre and scale come from every observation. A search concentrates its trials near its incumbent,
and their median absolute deviation shrinks as it does, so differences near the incumbent span more
warped units as a study goes on. Weighting the observations to describe the whole space instead (the
quasi-random warm-up only, or cell-declustering weights) was measured as a variant: level with this
head to head, with a larger calibration gap (``docs/benchmarks/real-tuning-variants.md``, the warp's
reference).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize

TAIL = "yeo-johnson-tail"  # the one-sided transform
WARPS = ("none", "yeo-johnson", TAIL)
LAMBDA_RANGE = (0.0, 2.0)  # the Yeo-Johnson exponents for which the transform is onto the real line
MIN_POINTS = 4  # fewer values than this are left unwarped (nothing to estimate a shape from)
BIG = 1e300  # where the inverse saturates: JSON has no infinity
SAFE_ABS = 1e150  # values beyond this are squashed (their squares, and a scale's, would overflow)
SAFE_SCALES = 1e30  # ... and so are values this many robust scales from the median
_LARGEST = float(np.finfo(float).max)


@dataclass(frozen=True)
class Warp:
    """``z = yj((y - loc) / scale; lam)``: ``forward`` and its exact ``inverse``."""

    kind: str = "none"
    lam: float = 1.0
    loc: float = 0.0
    scale: float = 1.0
    # (c, b) of the squash applied before everything else (``squash``); None for ordinary values
    squash: tuple[float, float] | None = None

    @property
    def identity(self) -> bool:
        return self.kind == "none" and self.squash is None

    @property
    def one_sided(self) -> bool:
        return self.kind == TAIL

    def forward(self, y: ArrayLike) -> np.ndarray:
        y = np.asarray(y, dtype=float)
        if self.squash is not None:
            y = squash(y, *self.squash)
        if self.kind == "none":
            return y
        x = (y - self.loc) / self.scale
        z = _yj(x, self.lam)
        return _tail_only(x, z, self.lam) if self.one_sided else z

    def inverse(self, z: ArrayLike) -> np.ndarray:
        """The user-unit value of warped ``z``; beyond about 1e300 it saturates (a quantile a model
        extrapolates that far is shown as that bound, never as infinity)."""
        z = np.asarray(z, dtype=float)
        if self.identity:
            return z
        with np.errstate(over="ignore", invalid="ignore"):
            if self.kind == "none":
                y = z
            else:
                x = _yj_inverse(z, self.lam)
                if self.one_sided:  # the sign is kept (0 -> 0), so z's side is x's
                    x = _tail_only(z, x, self.lam)
                y = x * self.scale + self.loc
            y = np.nan_to_num(y, nan=self.loc, posinf=np.inf, neginf=-np.inf)
            if self.squash is not None:
                y = unsquash(y, *self.squash)
        out: NDArray[np.float64] = np.clip(np.nan_to_num(y, nan=self.loc, posinf=BIG, neginf=-BIG), -BIG, BIG)
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "lam": self.lam, "loc": self.loc, "scale": self.scale}
        if self.squash is not None:  # ordinary studies keep the stored form they had
            out["squash"] = list(self.squash)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Warp:
        if not d:
            return cls()
        sq = d.get("squash")
        return cls(str(d["kind"]), float(d["lam"]), float(d["loc"]), float(d["scale"]),
                   None if sq is None else (float(sq[0]), float(sq[1])))


def fit_warp(kind: str, y: np.ndarray) -> Warp:
    """The warp of ``kind`` fitted to the values ``y`` (minimise orientation)."""
    if kind not in WARPS:
        raise ValueError(f"warp must be one of {WARPS}, not {kind!r}")
    y = np.asarray(y, dtype=float)
    sq = squash_for(y)
    if sq is None:
        return _fit_warp(kind, y)
    return replace(_fit_warp(kind, squash(y, *sq)), squash=sq)


def _fit_warp(kind: str, y: np.ndarray) -> Warp:
    if kind == "none" or y.size < MIN_POINTS or np.ptp(y) <= 0:
        return Warp()
    loc = float(np.median(y))
    scale = float(np.median(np.abs(y - loc))) * 1.4826
    if not scale > 1e-12 * max(1.0, abs(loc)):  # more than half the values tie: a plateau
        scale = float(np.sqrt(np.mean((y - np.mean(y)) ** 2)))
    if not scale > 0:
        scale = float(np.std(y))
    x = (y - loc) / scale
    if kind == TAIL:
        # the likelihood's two pieces (compress above the median, or below it) meet at lambda = 1
        fits = [optimize.minimize_scalar(lambda lam: -_tail_llf(lam, x), bounds=b, method="bounded",
                                         options={"xatol": 1e-4})
                for b in ((LAMBDA_RANGE[0], 1.0), (1.0, LAMBDA_RANGE[1]))]
        res = min(fits, key=lambda r: r.fun if r.success else np.inf)
    else:
        jac = float(np.sum(np.sign(x) * np.log1p(np.abs(x))))
        res = optimize.minimize_scalar(lambda lam: -_yj_llf(lam, x, jac), bounds=LAMBDA_RANGE,
                                       method="bounded", options={"xatol": 1e-4})
    lam = float(np.clip(res.x, *LAMBDA_RANGE)) if res.success else 1.0
    return Warp(kind, lam, loc, scale)


def _halfway(y: np.ndarray, c: float) -> np.ndarray:
    """``|y - c| / 2``, which cannot overflow (``y - c`` can, for values near +-1.8e308)."""
    return np.abs(y / 2.0 - c / 2.0)


def squash_for(y: np.ndarray) -> tuple[float, float] | None:
    """``(c, b)`` of the squash ``y`` needs (see the module's docstring), or None for ordinary values.

    ``c`` is the lower median (one of the values), ``b`` the median distance to it of the values
    that differ from it."""
    if y.size == 0:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        if np.max(np.abs(y)) <= SAFE_ABS:
            loc = float(np.median(y))
            d = np.abs(y - loc)
            scale = float(np.median(d))
            if not scale > 0:
                scale = float(np.std(y))
            if not scale > 0 or np.max(d) <= SAFE_SCALES * scale:
                return None
    c = float(np.sort(y)[(y.size - 1) // 2])
    h = _halfway(y, c)
    h = h[h > 0]
    if h.size == 0:
        return None
    # b = 2 median(h), the median distance, from the median of h / 2 (the median of two values near
    # 1.8e308 averages them: their sum overflows); past the floats (values of both signs near
    # +-1.8e308) the largest float, which keeps the map a strictly increasing bijection (b > 0 is all
    # it needs) and every stored number finite
    quarter = float(np.median(h / 2.0)) / 2.0
    return c, 4.0 * quarter if quarter <= _LARGEST / 4.0 else _LARGEST


def squash(y: ArrayLike, c: float, b: float) -> np.ndarray:
    """``sign(y - c) * log1p(|y - c| / b)``, without overflow for any finite ``y``: within +-1500."""
    y = np.asarray(y, dtype=float)
    h = _halfway(y, c)
    with np.errstate(over="ignore", divide="ignore"):
        r = h / (b / 2.0)
        mag = np.where(np.isfinite(r), np.log1p(np.where(np.isfinite(r), r, 0.0)),
                       np.log(np.maximum(h, np.finfo(float).tiny)) - np.log(b / 2.0))
    return np.sign(y / 2.0 - c / 2.0) * mag


def unsquash(t: ArrayLike, c: float, b: float) -> np.ndarray:
    """The inverse of ``squash``; beyond the floats it is +-infinity (``Warp.inverse`` saturates)."""
    t = np.asarray(t, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        y: NDArray[np.float64] = c + np.sign(t) * (b * np.expm1(np.abs(t)))
        return y


def _tail_only(side: np.ndarray, warped: np.ndarray, lam: float) -> np.ndarray:
    """``warped`` on the side ``lam`` compresses (above 0 for ``lam < 1``, below for ``lam > 1``),
    the unwarped values (``side``'s own, for the forward map) on the other."""
    keep = side < 0 if lam < 1 else side >= 0
    return np.where(keep, side, warped)


def _tail_llf(lam: float, x: np.ndarray) -> float:
    """Normal log-likelihood of the one-sided transform of ``x`` (profile over mean and variance,
    plus the log Jacobian of the compressed side), as ``scipy.stats.yeojohnson_llf`` is of the
    two-sided one."""
    z = _tail_only(x, _yj(x, lam), lam)
    var = float(np.var(z))
    if not var > 0:
        return -np.inf
    pos = x >= 0
    jac = (lam - 1.0) * np.log1p(x[pos]).sum() if lam < 1 else (1.0 - lam) * np.log1p(-x[~pos]).sum()
    llf: float = -0.5 * x.size * np.log(var) + float(jac)  # an np.float64
    return llf


def _yj_llf(lam: float, x: np.ndarray, jac: float) -> float:
    """``scipy.stats.yeojohnson_llf(lam, x)``: the profile normal log-likelihood of the transform of
    ``x``, with its log Jacobian's sum ``jac`` (``sum(sign(x) log1p(|x|))``) given. Written out because
    scipy's array-API wrapper costs half a millisecond a call and a warp's fit makes twenty."""
    var = float(np.var(_yj(x, lam)))
    if not var >= np.finfo(float).smallest_normal:
        return -np.inf
    return -0.5 * x.size * float(np.log(var)) + (lam - 1.0) * jac


def _yj(x: np.ndarray, lam: float) -> np.ndarray:
    out = np.empty_like(x)
    pos = x >= 0
    xp, xn = x[pos], x[~pos]
    out[pos] = np.log1p(xp) if abs(lam) < 1e-12 else np.expm1(lam * np.log1p(xp)) / lam
    out[~pos] = -np.log1p(-xn) if abs(lam - 2) < 1e-12 else -np.expm1((2 - lam) * np.log1p(-xn)) / (2 - lam)
    return out


def _yj_inverse(z: np.ndarray, lam: float) -> np.ndarray:
    out = np.empty_like(z)
    pos = z >= 0
    zp, zn = z[pos], z[~pos]
    out[pos] = np.expm1(zp) if abs(lam) < 1e-12 else np.expm1(np.log1p(lam * zp) / lam)
    out[~pos] = -np.expm1(-zn) if abs(lam - 2) < 1e-12 else -np.expm1(np.log1p(-(2 - lam) * zn) / (2 - lam))
    return out
