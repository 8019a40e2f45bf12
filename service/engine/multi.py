"""Several objectives: Pareto fronts, hypervolume, and acquisitions over calibrated distributions.

Every function works in the engine's orientation: each objective *minimised* (a maximised one is
negated first), on whatever scale the caller gives (the engine passes each objective's warped
values, normalised by the observed range, so nothing here depends on units).

* ``pareto_mask``: which points no other point dominates (by one sort for two objectives).
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
  draw in 2-D (the area under the front's staircase it adds, found by binary search on the sorted
  staircase and cumulative areas: O(log n) per draw for a front of n points); in 3-D, slab by slab
  of the third objective (``_slabs``: each slab's 2-D staircase), O(n log n) per draw.
* ``parego``: the expected improvement of a Chebyshev scalarisation with random weights (Knowles
  2006, ParEGO), by Monte Carlo over the same distributions: cheap for 3 and 4 objectives.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtri

from .acquisition import median

MULTI_ACQUISITIONS = ("ehvi", "parego")
SAMPLES = 128  # Monte Carlo draws per candidate and objective


# ------------------------------------------------------------------ fronts
def pareto_mask(Y: np.ndarray) -> np.ndarray:
    """(n,) True for the points of ``Y`` (n, m) that no other point dominates (minimisation);
    of equal points, the first is kept."""
    Y = np.asarray(Y, dtype=float)
    if Y.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    return _pareto_mask_2d(Y) if Y.shape[1] == 2 else _pareto_mask_sorted(Y)


def pareto_mask_pairwise(Y: np.ndarray) -> np.ndarray:
    """``pareto_mask`` for any number of objectives, point by point against all the others (the
    plain computation the faster masks are checked and timed against)."""
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


def _pareto_mask_sorted(Y: np.ndarray) -> np.ndarray:
    """``pareto_mask`` for any number of objectives, in lexicographic order: a point can only be
    dominated (or equalled) by one before it, so each point still standing drops every later one it
    dominates or equals, once; the loop runs over the front's points, not over all of them."""
    idx = np.lexsort((np.arange(Y.shape[0]), *Y.T[::-1]))
    C = Y[idx]
    i = 0
    while i < C.shape[0]:
        stay = np.any(C < C[i], axis=1)
        stay[: i + 1] = True
        idx, C = idx[stay], C[stay]
        i += 1
    keep = np.zeros(Y.shape[0], dtype=bool)
    keep[idx] = True
    return keep


def _pareto_mask_2d(Y: np.ndarray) -> np.ndarray:
    """``pareto_mask`` of two objectives in O(n log n): in lexicographic order (first objective, then
    the second, then position), a point is kept when its second objective is below every earlier
    one's (an earlier point with a second objective as low dominates it, or equals it and comes first)."""
    order = np.lexsort((np.arange(Y.shape[0]), Y[:, 1], Y[:, 0]))
    y = Y[order, 1]
    before = np.minimum.accumulate(np.concatenate([[np.inf], y[:-1]]))
    keep = np.zeros(Y.shape[0], dtype=bool)
    keep[order] = y < before
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
    point: NDArray[np.float64] = hi + 0.1 * span
    return point


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
def _staircase(front: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 2-D ``front``'s non-dominated points below ``ref``, sorted by the first objective (which
    then increases strictly while the second decreases strictly): (xs, ys)."""
    F = np.asarray(front, dtype=float).reshape(-1, 2)
    F = F[np.all(F < ref, axis=1)]
    if F.shape[0]:
        F = F[pareto_mask(F)]
        F = F[np.argsort(F[:, 0], kind="stable")]
    return F[:, 0], F[:, 1]


def _hvi(xs: np.ndarray, ys: np.ndarray, ref: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``hvi_2d`` on a ``_staircase``, vectorised by binary search rather than over the front's segments.

    The front's attainment curve is a staircase ``h``: ``R2`` left of ``xs[0]``, ``ys[i]`` on
    ``[xs[i], xs[i+1])`` (``R1`` ending the last), non-increasing. A point ``(a, b)`` adds the area
    between ``b`` and ``h`` from ``a`` to where ``h`` first drops to ``b`` or below: with ``j`` the
    segment of ``a`` and ``k`` the first at or below ``b``, its part of segment ``j`` plus the whole
    segments ``j+1 .. k-1``, the latter from cumulative sums (exactly zero when there are none)."""
    R1, R2 = float(ref[0]), float(ref[1])
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    n = xs.size
    right = np.append(xs, R1)  # right end of segment i (0 .. n)
    h = np.concatenate([[R2], ys])  # height of segment i
    # area under h of the whole segments 1 .. i (segment 0 is unbounded on the left)
    area = np.concatenate([[0.0], np.cumsum((right[1:] - right[:-1]) * ys)])
    j = np.searchsorted(xs, a, side="right")  # segment of a: front points at or left of it
    k = 1 + n - np.searchsorted(ys[::-1], b, side="right")  # first segment whose height is <= b (n+1: none)
    k = np.where(b < R2, k, 0)
    gain = (j < k) & (a < R1)
    last = np.maximum(k - 1, j)  # the last segment wholly above b (j itself when none follows)
    first = (right[j] - a) * (h[j] - b)
    whole = (area[last] - area[j]) - b * (right[last] - right[j])
    return np.where(gain, first + whole, 0.0)


def hvi_2d(front: np.ndarray, ref: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The hypervolume each point (a, b) adds to the 2-D ``front`` below ``ref`` (arrays of any shape)."""
    xs, ys = _staircase(front, ref)
    return _hvi(xs, ys, ref, a, b)


def _slabs(front: np.ndarray, ref: np.ndarray) -> list[tuple[float, float, np.ndarray, np.ndarray]]:
    """Three objectives: the region below ``ref`` that the ``front`` does not dominate, cut into slabs
    of the third objective at the front's values: ``(lo, hi, xs, ys)``, where between ``lo`` and ``hi``
    the front points at or below ``lo`` in the third objective dominate, and ``(xs, ys)`` is their
    2-D ``_staircase`` in the first two (as HSO slices the hypervolume; While et al. 2006)."""
    F = np.asarray(front, dtype=float).reshape(-1, 3)
    F = F[np.all(F < ref, axis=1)]
    if F.shape[0]:
        F = F[pareto_mask(F)]
        F = F[np.argsort(F[:, 2], kind="stable")]
    edges = np.concatenate([[-np.inf], F[:, 2], [ref[2]]])
    # points with equal third objectives enter together (an empty slab between them is skipped)
    return [(float(edges[k]), float(edges[k + 1]), *_staircase(F[:k, :2], ref[:2]))
            for k in range(F.shape[0] + 1) if edges[k + 1] > edges[k]]


def _hvi_3d(slabs: list[tuple[float, float, np.ndarray, np.ndarray]], ref: np.ndarray,
            a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The hypervolume each point (a, b, c) adds to the front of ``_slabs``: in every slab above
    ``c``, the slab's depth from ``c`` times the area the point adds to the slab's 2-D staircase."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (a, b, c)))
    shape = a.shape
    a, b, c = a.ravel(), b.ravel(), c.ravel()
    out = np.zeros(a.size)
    live = np.ones(a.size, dtype=bool)  # points that may still gain in a slab
    for lo, hi, xs, ys in slabs:
        here = np.flatnonzero(live & (c < hi))
        if here.size == 0:
            continue
        area = _hvi(xs, ys, ref[:2], a[here], b[here])
        out[here] += (hi - np.maximum(lo, c[here])) * area
        # the staircases only grow upward: a point the slab's staircase dominates gains in no later slab
        live[here[area <= 0.0]] = False
    return out.reshape(shape)


def hvi_3d(front: np.ndarray, ref: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The hypervolume each point (a, b, c) adds to the 3-D ``front`` below ``ref`` (arrays of any shape)."""
    ref = np.asarray(ref, dtype=float)
    return _hvi_3d(_slabs(front, ref), ref, a, b, c)


def ehvi(draws: list[np.ndarray], front: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(N,) expected hypervolume improvement: ``draws`` holds one (N, S) array per objective (two or
    three)."""
    if len(draws) == 2:
        hvi: NDArray[np.float64] = hvi_2d(front, ref, draws[0], draws[1]).mean(axis=1)
        return hvi
    if len(draws) == 3:
        hvi = hvi_3d(front, ref, *draws).mean(axis=1)
        return hvi
    raise ValueError("ehvi is exact for two or three objectives; use parego for four")


def parego(draws: list[np.ndarray], incumbent: float, weights: np.ndarray) -> np.ndarray:
    """(N,) expected improvement of the augmented Chebyshev scalarisation ``max_i w_i y_i + RHO sum_i
    w_i y_i`` (``chebyshev``) over ``incumbent``, its best observed value (objectives on a common scale)."""
    ei: NDArray[np.float64] = np.maximum(incumbent - chebyshev(np.stack(draws, axis=-1), weights), 0.0).mean(axis=1)
    return ei


def simplex_weights(m: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform weights on the simplex (ParEGO draws one set per choice)."""
    w = rng.exponential(size=m)
    simplex: NDArray[np.float64] = w / w.sum()
    return simplex


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
SCREEN = 256  # candidates whose Monte Carlo expectation is computed, the rest ranked by their medians
SCREEN_3D = 64  # three objectives' EHVI: the candidates (of the SCREEN best corners) it is computed for
SAMPLES_3D = 64  # and its Monte Carlo draws
FLOOR = 1e3  # score offset of candidates whose expected improvement is zero (lower is better)


def _gap(med: np.ndarray, front: np.ndarray) -> np.ndarray:
    """(N,) how far each point must move down in every objective at once to weakly dominate a point
    of the ``front`` (``min_f max_i (p_i - f_i)``, an additive epsilon indicator); 0 for a point that
    already does.

    Two objectives and a mutually non-dominated front (what the engine passes): on the front sorted
    by the first objective, ``p - f`` falls in the first objective and rises in the second, so the
    larger of the two is smallest where they cross, which a binary search on ``f_1 - f_2`` finds (the
    same value as trying every point, in O(log n) per point rather than O(n))."""
    if front.shape[0] == 0:
        return np.zeros(med.shape[0])
    if front.shape[1] != 2 or not pareto_mask(front).all():
        gap: NDArray[np.float64] = np.maximum(_epsilon(med, front), 0.0)
        return gap
    F = front[np.argsort(front[:, 0], kind="stable")]
    i = np.searchsorted(F[:, 0] - F[:, 1], med[:, 0] - med[:, 1], side="left")
    near = np.clip(i[:, None] + np.array([-1, 0, 1]), 0, F.shape[0] - 1)  # the crossing and its neighbours
    d = np.maximum(med[:, 0, None] - F[near, 0], med[:, 1, None] - F[near, 1])
    gap = np.maximum(d.min(axis=1), 0.0)
    return gap


def _epsilon(P: np.ndarray, front: np.ndarray) -> np.ndarray:
    """(N,) ``min_f max_i (p_i - f_i)`` over a non-empty ``front``, point by point, in (512, n, m) blocks."""
    out = np.empty(P.shape[0])
    for lo in range(0, P.shape[0], 512):
        out[lo:lo + 512] = np.min(np.max(P[lo:lo + 512, None, :] - front[None, :, :], axis=2), axis=1)
    return out


def _margin(P: np.ndarray, front: np.ndarray) -> np.ndarray:
    """(N,) how far each point could worsen in every objective at once and stay undominated by the
    ``front`` (``min_f max_i (f_i - p_i)``, the epsilon of ``_gap`` seen from the front; negative for
    a dominated point): a cheap order in which to look for the points that add hypervolume."""
    if front.shape[0] == 0:
        return np.full(P.shape[0], np.inf)
    return _epsilon(-P, -front)


def _screened(optimistic: np.ndarray) -> np.ndarray:
    """Rows of the ``SCREEN`` candidates whose optimistic corner gains most (of those that gain
    anything, when any does): the ones whose Monte Carlo expectation is computed."""
    take = np.argsort(-optimistic, kind="stable")[:SCREEN]
    return take[optimistic[take] > 0] if (optimistic > 0).any() else take


def _scored_by(out: np.ndarray, take: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``out`` with the rows ``take`` whose ``expected`` improvement is positive scored ``-log`` of it."""
    pos = expected > 0
    out[take[pos]] = -np.log(expected[pos])
    return out


def scores(kind: str, Qs: list[np.ndarray], levels: np.ndarray, front: np.ndarray, ref: np.ndarray,
           u: np.ndarray, weights: np.ndarray | None = None, incumbent: float | None = None) -> np.ndarray:
    """(N,) lower-is-better scores of candidates whose objectives (minimised, on a common scale) have
    the calibrated quantiles ``Qs`` (one (N, L) array per objective).

    ``ehvi``: ``-log EHVI`` over ``front`` below ``ref`` by Monte Carlo on the shared uniforms ``u``
    (m, S), for the ``SCREEN`` candidates whose optimistic corner (every objective at its lowest
    calibrated quantile) adds the most hypervolume (three objectives: of the ``SCREEN`` candidates
    most clearly undominated (``_margin``), the ``SCREEN_3D`` whose corner adds the most, with
    ``SAMPLES_3D`` draws, since each draw costs a binary search per slab); ``parego``: ``-log`` of the
    expected improvement of the Chebyshev scalarisation with ``weights`` over ``incumbent`` (the best
    scalarised value observed), for the ``SCREEN`` candidates whose optimistic corner improves it
    most. A candidate with no expected improvement (or not screened) scores ``FLOOR`` plus how far
    its medians are from improving, so such candidates still come in a sensible order.
    """
    N = Qs[0].shape[0]
    out = np.empty(N)
    if N == 0:
        return out
    lv = np.asarray(levels, dtype=float)
    mid = np.stack([median(Q) for Q in Qs], axis=1)
    if kind == "ehvi":
        if len(Qs) not in (2, 3):
            raise ValueError("ehvi is exact for two or three objectives; use parego for four")
        out[:] = FLOOR + _gap(mid, front)
        if len(Qs) == 3:  # fewer rows and draws: every draw pays one binary search per slab of the front
            slabs = _slabs(front, ref)  # once for the corners and the draws
            corner = np.stack([Q[:, 0] for Q in Qs], axis=1)
            near = np.argsort(-_margin(corner, front), kind="stable")[:SCREEN]
            opt = np.zeros(N)
            opt[near] = _hvi_3d(slabs, ref, *corner[near].T)
            take = _screened(opt)[:SCREEN_3D]
            draws = [sample(Q[take], lv, u[j, :SAMPLES_3D]) for j, Q in enumerate(Qs)]
            return _scored_by(out, take, _hvi_3d(slabs, ref, *draws).mean(axis=1))
        xs, ys = _staircase(front, ref)  # once for the corners and the draws
        take = _screened(_hvi(xs, ys, ref, Qs[0][:, 0], Qs[1][:, 0]))
        draws = [sample(Q[take], lv, u[j]) for j, Q in enumerate(Qs)]
        return _scored_by(out, take, _hvi(xs, ys, ref, draws[0], draws[1]).mean(axis=1))  # ehvi(draws, ...)
    if kind == "parego":
        if weights is None or incumbent is None:
            raise ValueError("parego needs weights and the incumbent")
        out[:] = FLOOR + np.maximum(chebyshev(mid, weights) - incumbent, 0.0)
        # the scalarisation is monotone in every objective: the optimistic corner bounds the gain
        take = _screened(incumbent - chebyshev(np.stack([Q[:, 0] for Q in Qs], axis=1), weights))
        return _scored_by(out, take, parego([sample(Q[take], lv, u[j]) for j, Q in enumerate(Qs)],
                                            incumbent, weights))
    raise ValueError(f"unknown multi-objective acquisition {kind!r}; choose from {MULTI_ACQUISITIONS}")


RHO = 0.05  # ParEGO's augmentation


def chebyshev(Y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The augmented Chebyshev scalarisation of the rows of ``Y`` (n, m)."""
    scal: NDArray[np.float64] = np.max(weights * Y, axis=-1) + RHO * np.sum(weights * Y, axis=-1)
    return scal


def resolve(kind: str, m: int) -> str:
    """The acquisition ``auto`` stands for with ``m`` objectives: EHVI for two, ParEGO beyond (EHVI
    takes three too when asked for: better at 100-200 trials on DTLZ2, worse at 25, and slower)."""
    if kind == "auto":
        return "ehvi" if m == 2 else "parego"
    if kind == "ehvi" and m not in (2, 3):
        raise ValueError("ehvi is for two or three objectives; use parego (or auto) for four")
    return kind
