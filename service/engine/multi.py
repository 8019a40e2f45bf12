"""Several objectives: Pareto fronts, hypervolume, and acquisitions over calibrated distributions.

Every function works in the engine's orientation: each objective *minimised* (a maximised one is
negated first), on whatever scale the caller gives (the engine passes each objective's warped
values, normalised by the observed range, so nothing here depends on units).

* ``pareto_mask``: which points no other point dominates.
* ``hypervolume``: the volume a set of points dominates up to a reference point, exact, by slicing
  the last objective (HSO; While et al. 2006): fine for the fronts of a tuning study (tens of points,
  2 to 4 objectives).
* ``reference_point``: the default reference, set from the observations in a scale-free way: each
  objective's worst observed value plus a tenth of its observed range (Ishibuchi et al. 2018 discuss
  the choice); a study may give its own.
* ``sample``: draws from a calibrated distribution given by its quantiles (piecewise linear between
  them, the Gaussian tails of ``acquisition.log_ei`` beyond), by inverse transform of shared uniform
  draws (common random numbers: candidates are compared on the same draws).
* ``ehvi``: expected hypervolume improvement over the current front, by Monte Carlo over the
  objectives' calibrated distributions (independent across objectives), exact improvement of each
  draw in 2-D (the area under the front's staircase it adds).
* ``parego``: the expected improvement of a Chebyshev scalarisation with random weights (Knowles
  2006, ParEGO), by Monte Carlo over the same distributions: cheap for 3 and 4 objectives.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

MULTI_ACQUISITIONS = ("ehvi", "parego")
SAMPLES = 128  # Monte Carlo draws per candidate and objective


# ------------------------------------------------------------------ fronts
def pareto_mask(Y: np.ndarray) -> np.ndarray:
    """(n,) True for the points of ``Y`` (n, m) that no other point dominates (minimisation);
    of equal points, the first is kept."""
    Y = np.asarray(Y, dtype=float)
    n = Y.shape[0]
    keep = np.ones(n, dtype=bool)
    for i in range(n):
        if not keep[i]:
            continue
        dominated = np.all(Y[i] <= Y, axis=1) & np.any(Y[i] < Y, axis=1)
        same = np.all(Y == Y[i], axis=1)
        same[: i + 1] = False
        keep &= ~(dominated | same)
    return keep


def hypervolume(Y: np.ndarray, ref: np.ndarray) -> float:
    """The volume dominated by the points ``Y`` (n, m) within the box below ``ref`` (minimisation)."""
    Y = np.asarray(Y, dtype=float)
    ref = np.asarray(ref, dtype=float)
    if Y.size == 0:
        return 0.0
    Y = Y[np.all(Y < ref, axis=1)]
    if Y.shape[0] == 0:
        return 0.0
    return float(_hso(Y[pareto_mask(Y)], ref))


def _hso(Y: np.ndarray, ref: np.ndarray) -> float:
    m = Y.shape[1]
    if m == 1:
        return float(ref[0] - Y[:, 0].min())
    if m == 2:
        order = np.argsort(Y[:, 0], kind="stable")
        x, y = Y[order, 0], Y[order, 1]
        best = np.minimum.accumulate(y)
        right = np.append(x[1:], ref[0])
        return float(np.sum((right - x) * (ref[1] - best)))
    order = np.argsort(Y[:, -1], kind="stable")
    Y = Y[order]
    total = 0.0
    for i in range(Y.shape[0]):
        top = Y[i + 1, -1] if i + 1 < Y.shape[0] else ref[-1]
        depth = top - Y[i, -1]
        if depth > 0:
            below = Y[: i + 1, :-1]
            total += depth * _hso(below[pareto_mask(below)], ref[:-1])
    return total


def reference_point(Y: np.ndarray) -> np.ndarray:
    """The default reference: each objective's worst observed value plus a tenth of its range."""
    Y = np.asarray(Y, dtype=float)
    lo, hi = Y.min(axis=0), Y.max(axis=0)
    span = np.where(hi > lo, hi - lo, np.maximum(np.abs(hi), 1.0))
    return hi + 0.1 * span


# ------------------------------------------------------------ distributions
def sample(Q: np.ndarray, levels: np.ndarray, u: np.ndarray) -> np.ndarray:
    """(N, S) draws ``F^-1(u)`` of each row's distribution, given by its quantiles ``Q`` (N, L)."""
    lv = np.asarray(levels, dtype=float)
    zl = ndtri(lv)
    u = np.clip(np.asarray(u, dtype=float), 1e-12, 1.0 - 1e-12)
    N = Q.shape[0]
    out = np.empty((N, u.size))
    k = np.clip(np.searchsorted(lv, u, side="right") - 1, 0, lv.size - 2)  # the body segment of each draw
    t = (u - lv[k]) / (lv[k + 1] - lv[k])
    body = Q[:, k] + t[None, :] * (Q[:, k + 1] - Q[:, k])
    s_lo = np.maximum((Q[:, 1] - Q[:, 0]) / (zl[1] - zl[0]), 1e-12)
    s_hi = np.maximum((Q[:, -1] - Q[:, -2]) / (zl[-1] - zl[-2]), 1e-12)
    zu = ndtri(u)
    lower = Q[:, :1] + s_lo[:, None] * (zu[None, :] - zl[0])
    upper = Q[:, -1:] + s_hi[:, None] * (zu[None, :] - zl[-1])
    out[:] = body
    below, above = u < lv[0], u > lv[-1]
    out[:, below] = lower[:, below]
    out[:, above] = upper[:, above]
    return out


def uniforms(m: int, rng: np.random.Generator, n: int = SAMPLES) -> np.ndarray:
    """(m, n) stratified uniform draws, one row per objective, independently shuffled."""
    base = (np.arange(n) + rng.random((m, n))) / n
    return np.stack([rng.permutation(row) for row in base])


# ------------------------------------------------------------ acquisitions
def hvi_2d(front: np.ndarray, ref: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The hypervolume each point (a, b) adds to the 2-D ``front`` below ``ref`` (arrays of any shape)."""
    R1, R2 = float(ref[0]), float(ref[1])
    F = front[np.all(front < ref, axis=1)] if front.size else front.reshape(0, 2)
    if F.shape[0]:
        F = F[pareto_mask(F)]
        F = F[np.argsort(F[:, 0], kind="stable")]
    xs = np.concatenate([F[:, 0], [R1]]) if F.shape[0] else np.array([R1])
    heights = np.concatenate([[R2], F[:, 1]]) if F.shape[0] else np.array([R2])  # h(x) on [x_{j-1}, x_j)
    lefts = np.concatenate([[-np.inf], F[:, 0]]) if F.shape[0] else np.array([-np.inf])
    a = np.asarray(a, dtype=float)[..., None]
    b = np.asarray(b, dtype=float)[..., None]
    lo = np.maximum(lefts, a)
    hi = np.minimum(xs, R1)
    width = np.maximum(hi - lo, 0.0)
    height = np.maximum(np.minimum(heights, R2) - b, 0.0)
    return np.sum(width * height, axis=-1)


def ehvi(draws: list[np.ndarray], front: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(N,) expected hypervolume improvement: ``draws`` holds one (N, S) array per objective (two)."""
    if len(draws) != 2:
        raise ValueError("ehvi is exact for two objectives; use parego for three or four")
    return hvi_2d(front, ref, draws[0], draws[1]).mean(axis=1)


def parego(draws: list[np.ndarray], incumbent: float, weights: np.ndarray) -> np.ndarray:
    """(N,) expected improvement of the augmented Chebyshev scalarisation ``max_i w_i y_i + RHO sum_i
    w_i y_i`` (``chebyshev``) over ``incumbent``, its best observed value (objectives on a common scale)."""
    return np.maximum(incumbent - chebyshev(np.stack(draws, axis=-1), weights), 0.0).mean(axis=1)


def simplex_weights(m: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform weights on the simplex (ParEGO draws one set per choice)."""
    w = rng.exponential(size=m)
    return w / w.sum()


def pareto_ranks(Y: np.ndarray) -> np.ndarray:
    """(n,) non-domination rank of each point (0: the front; 1: the front once it is removed; ...);
    equal points share a rank."""
    Y = np.asarray(Y, dtype=float)
    dom = np.all(Y[:, None, :] <= Y[None, :, :], axis=2) & np.any(Y[:, None, :] < Y[None, :, :], axis=2)
    rank = np.full(Y.shape[0], -1)
    left = np.ones(Y.shape[0], dtype=bool)
    r = 0
    while left.any():
        on = left & ~dom[left].any(axis=0)
        rank[on] = r
        left &= ~on
        r += 1
    return rank


# ------------------------------------------------------------ the acquisition
SCREEN = 256  # candidates whose Monte Carlo EHVI is computed, the rest ranked by their optimistic corner
FLOOR = 1e3  # score offset of candidates whose expected improvement is zero (lower is better)


def _gap(med: np.ndarray, front: np.ndarray) -> np.ndarray:
    """(N,) how far each point must move down in every objective at once to be non-dominated by the
    ``front`` (the additive epsilon indicator); 0 for a point the front does not dominate."""
    if front.shape[0] == 0:
        return np.zeros(med.shape[0])
    return np.maximum(np.min(np.max(med[:, None, :] - front[None, :, :], axis=2), axis=1), 0.0)


def scores(kind: str, Qs: list[np.ndarray], levels: np.ndarray, front: np.ndarray, ref: np.ndarray,
           u: np.ndarray, weights: np.ndarray | None = None, incumbent: float | None = None) -> np.ndarray:
    """(N,) lower-is-better scores of candidates whose objectives (minimised, on a common scale) have
    the calibrated quantiles ``Qs`` (one (N, L) array per objective).

    ``ehvi``: ``-log EHVI`` over ``front`` below ``ref`` by Monte Carlo on the shared uniforms ``u``
    (m, S), for the ``SCREEN`` candidates whose optimistic corner (every objective at its lowest
    calibrated quantile) adds the most hypervolume; ``parego``: ``-log`` of the expected improvement
    of the Chebyshev scalarisation with ``weights`` over ``incumbent`` (the best scalarised value
    observed). A candidate with no expected improvement (or not screened) scores ``FLOOR`` plus how
    far its medians are from improving, so such candidates still come in a sensible order.
    """
    N = Qs[0].shape[0]
    out = np.empty(N)
    if N == 0:
        return out
    lv = np.asarray(levels, dtype=float)
    mid = np.stack([Q[:, lv.size // 2 - 1: lv.size // 2 + 1].mean(axis=1) for Q in Qs], axis=1)
    if kind == "ehvi":
        out[:] = FLOOR + _gap(mid, front)
        corner = np.stack([Q[:, 0] for Q in Qs], axis=1)
        opt = hvi_2d(front, ref, corner[:, 0], corner[:, 1])
        take = np.argsort(-opt, kind="stable")[:SCREEN]
        take = take[opt[take] > 0] if (opt > 0).any() else take
        draws = [sample(Q[take], lv, u[j]) for j, Q in enumerate(Qs)]
        e = ehvi(draws, front, ref)
        pos = e > 0
        out[take[pos]] = -np.log(e[pos])
        return out
    if kind == "parego":
        if weights is None or incumbent is None:
            raise ValueError("parego needs weights and the incumbent")
        e = parego([sample(Q, lv, u[j]) for j, Q in enumerate(Qs)], incumbent, weights)
        out[:] = FLOOR + np.maximum(chebyshev(mid, weights) - incumbent, 0.0)
        pos = e > 0
        out[pos] = -np.log(e[pos])
        return out
    raise ValueError(f"unknown multi-objective acquisition {kind!r}; choose from {MULTI_ACQUISITIONS}")


RHO = 0.05  # ParEGO's augmentation


def chebyshev(Y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The augmented Chebyshev scalarisation of the rows of ``Y`` (n, m)."""
    return np.max(weights * Y, axis=-1) + RHO * np.sum(weights * Y, axis=-1)


def resolve(kind: str, m: int) -> str:
    """The acquisition ``auto`` stands for with ``m`` objectives: EHVI for two, ParEGO beyond."""
    if kind == "auto":
        return "ehvi" if m == 2 else "parego"
    if kind == "ehvi" and m != 2:
        raise ValueError("ehvi is for two objectives; use parego (or auto) for three or four")
    return kind
