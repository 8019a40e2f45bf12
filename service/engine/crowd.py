"""Selection with trials in flight: what the model says about the running points.

A crowd of workers asks while others still train, so ``select`` must choose
with ``P`` configurations running and their outcomes unknown. Two ways, by
surrogate:

* ``believer`` (GP surrogates): condition the predictive spread
  on the running points. A GP's posterior variance does not depend on the
  values still to come, only on where they will be observed (GP-BUCB,
  Desautels et al. 2014; the kriging believer, Ginsbourger et al. 2010). With
  ``v(x)`` the latent posterior variance after the observed data, ``k`` the
  fitted kernel and ``rho = k / k(0)`` its correlation, the posterior
  covariance of two points is taken as ``rho(a, b) sqrt(v(a) v(b))`` (the
  fitted kernel's correlation between the posterior sds; exact for points far
  from the data, a Schur product so always a valid covariance). Fantasising
  a noisy observation at each running point ``p`` (noise ``s_n^2``, the
  fitted white noise) lowers the variance of every candidate ``x`` by rank-one
  updates, one per running point:

      c(x)  = rho(x, p) sqrt(v(x) v(p)) - sum_k w_k(x) w_k(p)
      w(x)  = c(x) / sqrt(v'(p) + s_n^2),      v'(x) = v'(x) - w(x)^2

  and the calibrated predictive distribution of ``x`` is narrowed about its
  median by ``sqrt((v'(x) + s_n^2) / (v(x) + s_n^2))``. The believed value of
  a running point is its calibrated median, so the incumbent an acquisition
  improves on is ``min(best, medians of the running points)`` (the kriging
  believer's fantasy: the posterior mean is unchanged by it). Candidates near
  a running point then offer little: the shrink and the radius both come from
  the fitted length scales and the predictions, not from a constant.
* ``penalize`` (every other surrogate: no kernel to condition with): local
  penalisation (Gonzalez et al., AISTATS 2016, eq. 3-5). A running point ``p`` with prediction ``mu(p)``, spread
  ``s(p)`` excludes, with probability, the ball in which the model's
  Lipschitz constant ``L`` says the minimum cannot lie:

      phi(x; p) = 1/2 erfc(-z),   z = (L |x - p| - (mu(p) - best)) / (sqrt(2) s(p))

  and the (positive) utility of ``x`` is multiplied by ``prod_p phi(x; p)``.
  ``L`` is the largest slope of the model's median between a candidate and its
  nearest neighbour (unit-cube distance), computed by ``fit``.

A fixed exclusion radius around every running point, and penalisation of GP
surrogates too, were measured against the believer and left the product
(``docs/benchmarks/crowd.md``).

``fit`` stores what these need in ``snapshot.meta.crowd`` (kernel
hyperparameters in target units, ``L``); ``select`` pays ``O(N P F)`` for ``P``
running points and ``N`` candidates with ``F`` features.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray
from scipy.special import erfc, ndtri

from .acquisition import median

SQRT5 = math.sqrt(5.0)
MAX_COLUMNS = 1024  # kernel columns a snapshot keeps for the selects on it (N floats each)


# ------------------------------------------------------------------------ fit
def kernel_of(model: Any) -> dict[str, Any] | None:
    """A GP surrogate's kernel in target units (``gp_kernel``), or None for other families."""
    model = getattr(model, "members", [model])[0]  # CrossVal / JaB+ average: the first member's
    get = getattr(model, "gp_kernel", None)
    return get() if get is not None else None


def lipschitz(cand: np.ndarray, med: np.ndarray) -> float:
    """Largest slope of ``med`` between each candidate and its nearest neighbour (unit cube)."""
    n = cand.shape[0]
    if n < 2:
        return 0.0
    sq = (cand * cand).sum(1)
    slopes = np.empty(n)
    for lo in range(0, n, 512):  # (512, n) blocks keep the memory small
        d2 = sq[lo:lo + 512, None] + sq[None, :] - 2.0 * cand[lo:lo + 512] @ cand.T
        d2[np.arange(d2.shape[0]), np.arange(lo, lo + d2.shape[0])] = np.inf
        d2[d2 <= 1e-18] = np.inf  # duplicates carry no slope
        nn = np.argmin(d2, axis=1)
        dist = np.sqrt(d2[np.arange(d2.shape[0]), nn])
        slopes[lo:lo + d2.shape[0]] = np.where(np.isfinite(dist), np.abs(med[lo:lo + 512] - med[nn]) / dist, 0.0)
    return float(slopes.max())


def fit_info(model: Any, cand: np.ndarray, raw: np.ndarray,
             objective_models: Sequence[Any] = ()) -> dict[str, Any]:
    """What ``select`` needs to condition on running points, stored as ``meta.crowd``.

    The GP kernels cost nothing to keep (``objective_models``: the models of a multi-objective
    study's further objectives, each conditioned with its own kernel); the Lipschitz constant
    (O(N^2), 50 ms at 2000 candidates) is computed only where penalisation will read it: for a
    surrogate without a kernel.
    """
    info: dict[str, Any] = {}
    kernel = kernel_of(model)
    if kernel is not None:
        info["kernel"] = kernel
        if objective_models:
            info["objective_kernels"] = [kernel_of(m) for m in objective_models]
    else:
        info["lipschitz"] = lipschitz(cand, median(raw))
    return info


# --------------------------------------------------------------------- select
def _matern52(d: np.ndarray) -> np.ndarray:
    r = SQRT5 * d
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


def _dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    dist: NDArray[np.float64] = np.sqrt(np.maximum(d2, 0.0))
    return dist


def _spread(Q: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Gaussian-equivalent sd from the widest pair of quantiles."""
    z = ndtri(levels)
    sd: NDArray[np.float64] = np.maximum((Q[:, -1] - Q[:, 0]) / (z[-1] - z[0]), 1e-12)
    return sd


class Believer:
    """Fantasies at the running points (see the module docstring), in blocks.

    Adding the rows ``R`` at once is the same as adding them one by one: with
    ``W`` (N, k) the whitened cross-covariances of the fantasies so far,
    ``C = rho(., R) sqrt(v v_R) - W W_R^T``, ``S = C_R + s_n^2 I = G G^T`` and
    ``W <- [W, C G^-T]``; the variance left is ``v - rowsum(W^2)``.
    """

    def __init__(self, kernel: dict[str, Any], feats: np.ndarray, raw: np.ndarray, levels: np.ndarray,
                 columns: dict[int, np.ndarray] | None = None) -> None:
        """``columns``: correlation columns by candidate row, kept across selects on one snapshot."""
        self.columns = {} if columns is None else columns
        ls = np.asarray(kernel["lengthscale"], float)
        self.F = feats / ls[None, :]  # features in length-scale units
        self.F2 = (self.F * self.F).sum(1)
        self.noise = max(float(kernel["noise"]), 1e-12)
        s2 = _spread(raw, levels) ** 2  # the raw GP's predictive variance, noise included
        self.total = s2
        self.v = np.maximum(s2 - self.noise, 1e-12 * s2)  # latent posterior variance
        self.sv = np.sqrt(self.v)
        self.W = np.empty((s2.size, 0))  # whitened cross-covariances, one column per fantasy
        self.left = self.v

    def add(self, rows: list[int]) -> None:
        """Fantasise noisy observations at the candidates ``rows`` (running or chosen points)."""
        if not rows:
            return
        R = np.asarray(rows)
        C = self._correlation(rows) * (self.sv[:, None] * self.sv[None, R])
        if self.W.shape[1]:
            C -= self.W @ self.W[R].T
        S = C[R] + self.noise * np.eye(R.size)
        G = np.linalg.cholesky(S + 1e-12 * np.trace(S) / R.size * np.eye(R.size))
        Wn = C @ np.linalg.inv(G).T  # C G^-T: G is at most a few dozen rows, C has N
        self.W = np.hstack([self.W, Wn])
        self.left = np.maximum(self.left - (Wn * Wn).sum(1), 0.0)

    def _correlation(self, rows: list[int]) -> np.ndarray:
        """(N, len(rows)) kernel correlations with the candidates ``rows``, computed once per row."""
        # read through a local copy: filling the cache clears it, which must not lose this block's
        # rows that were cached before
        cols = {r: self.columns.get(r) for r in dict.fromkeys(rows)}
        new = [r for r, c in cols.items() if c is None]
        if new:
            # one matrix-vector product per row: a column's bits must not depend on which rows it was
            # computed with (a matrix product's blocking does), or a select that finds some columns
            # cached would score differently from one that computes them all afresh
            cross = np.stack([self.F @ self.F[r] for r in new], axis=1)
            d2 = self.F2[:, None] + self.F2[None, new] - 2.0 * cross
            if len(self.columns) + len(new) > MAX_COLUMNS:
                self.columns.clear()
            for r, col in zip(new, _matern52(np.sqrt(np.maximum(d2, 0.0))).T, strict=True):
                cols[r] = self.columns[r] = col
        return np.stack([cast(np.ndarray, cols[r]) for r in rows], axis=1)  # every row filled above

    def shrink(self) -> np.ndarray:
        """(N,) factor of every candidate's spread after the fantasies."""
        factor: NDArray[np.float64] = np.sqrt((self.left + self.noise) / self.total)
        return factor


def _fantasy_shrink(kernel: dict[str, Any], feats: np.ndarray, raw: np.ndarray, run_feats: np.ndarray,
                    run_raw: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """(n,) spread factor of the rows ``feats`` (raw quantiles ``raw``) once noisy observations at the
    running points ``run_feats`` (``run_raw``) are fantasised: ``Believer`` on the rows and the
    running points together."""
    n = feats.shape[0]
    b = Believer(kernel, np.vstack([feats, run_feats]), np.vstack([raw, run_raw]), levels)
    b.add(list(range(n, n + run_feats.shape[0])))
    return b.shrink()[:n]


class Fantasies:
    """The trials in flight fantasised at points outside a snapshot's candidate set (fit's
    acquisition search), as ``Crowd`` does for the candidates in select: each objective's spread
    narrowed with its own kernel (the first objective's narrowing where it has none) and the running
    points believed at their calibrated medians.

    ``kernels``: each objective's fitted kernel (the first one's must be a GP's); ``run``: each
    objective's ``(raw, scored)`` quantiles at the running points ``run_feats``."""

    def __init__(self, kernels: Sequence[dict[str, Any] | None], run_feats: np.ndarray,
                 run: Sequence[tuple[np.ndarray, np.ndarray]], levels: np.ndarray) -> None:
        self.kernels = list(kernels)
        self.run_feats = run_feats
        self.run_raw = [raw for raw, _ in run]
        self.levels = levels
        every = list(range(run_feats.shape[0]))
        self.points = believed_points([q for _, q in run], every)  # (P, m): the kriging believer's
        self._first = run[0][1], every

    def best(self, best: float) -> float:
        """The incumbent once every running point is believed at its median (``believed_best``)."""
        return believed_best(best, *self._first)

    def narrowed(self, feats: np.ndarray, predicted: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
        """Each objective's scored quantiles at the rows ``feats`` (``predicted``: its ``(raw, scored)``
        there), narrowed by the fantasies."""
        def shrink(j: int) -> np.ndarray:
            kernel = self.kernels[j]
            assert kernel is not None  # the first objective's is a GP's; a further one is narrowed only with its own
            return _fantasy_shrink(kernel, feats, predicted[j][0], self.run_feats, self.run_raw[j],
                                   self.levels)

        first = shrink(0)
        return [narrow(Q, first if j == 0 or self.kernels[j] is None else shrink(j))
                for j, (_, Q) in enumerate(predicted)]


def narrow(Q: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """Calibrated quantiles narrowed about their median by ``factor`` (N,)."""
    med = median(Q)[:, None]
    narrowed: NDArray[np.float64] = med + factor[:, None] * (Q - med)
    return narrowed


def believed_best(best: float, Q: np.ndarray, rows: list[int]) -> float:
    """The incumbent once every running point is believed at its calibrated median."""
    return min(best, float(median(Q[rows]).min())) if rows else best


def believed_points(Qs: list[np.ndarray], rows: list[int]) -> np.ndarray:
    """(len(rows), m) the running points believed at their calibrated medians, one column per
    objective (``Qs``: each objective's quantiles): several objectives' kriging believer."""
    return np.stack([median(Q[rows]) for Q in Qs], axis=1) if rows else np.empty((0, len(Qs)))


def penalty(cand: np.ndarray, Q: np.ndarray, levels: np.ndarray, lipschitz_: float, best: float,
            rows: list[int]) -> np.ndarray:
    """(N,) product of the local penalisers of the running points ``rows``."""
    out = np.ones(cand.shape[0])
    if not rows:
        return out
    mu = median(Q[rows])
    s = _spread(Q[rows], levels)
    d = _dist(cand, cand[rows])  # (N, P)
    z = (lipschitz_ * d - (mu - best)[None, :]) / (math.sqrt(2.0) * s[None, :])
    phi: NDArray[np.float64] = np.prod(0.5 * erfc(-z), axis=1)
    return phi


def penalised_scores(sc: np.ndarray, phi: np.ndarray, acquisition: str) -> np.ndarray:
    """Scores (lower is better) of utilities multiplied by ``phi``.

    PI and EI utilities (``-score``) are non-negative already; log EI's score is
    ``-log(utility)``, so the product is ``score - log(phi)``; the others go
    through a softplus of their standardised utility (Gonzalez et al., 2016, 3.2).
    """
    from .acquisition import LOG_UTILITY, POSITIVE_UTILITY

    if acquisition in LOG_UTILITY:
        with np.errstate(divide="ignore"):
            penalised: NDArray[np.float64] = sc - np.log(phi)
            return penalised
    u = -sc
    if acquisition in POSITIVE_UTILITY:
        u = np.maximum(u, 0.0) + 1e-12
    else:
        sd = float(np.std(u)) or 1.0
        u = np.logaddexp(0.0, (u - float(np.mean(u))) / sd)
    scores: NDArray[np.float64] = -(u * phi)
    return scores


class Crowd:
    """One ``select``'s view of the running points, and of the batch it chooses.

    ``add(row)`` marks a candidate as running (or just chosen); ``scores`` gives
    the acquisition with every marked point accounted for. ``mode`` is
    ``"believer"`` when the snapshot's surrogate has a GP kernel, else
    ``"penalize"``.
    """

    def __init__(self, snapshot: Any, space: Any, Q: np.ndarray) -> None:
        info = snapshot.meta.crowd
        self.cand = snapshot.candidates
        self.levels = snapshot.levels
        self.best = snapshot.best
        self.Q = Q
        self.rows: list[int] = []
        kernel = info.get("kernel")
        self.mode = "believer" if kernel is not None else "penalize"  # not a GP: no kernel to condition with
        self._believer: Believer | None = None
        self._make = (snapshot, space, kernel)
        # a multi-objective study's further objectives: each conditioned with its own kernel
        heads = [h for h in snapshot.heads if h.kind == "objective"]
        kernels = info.get("objective_kernels") or [None] * len(heads)
        self._objectives = [(k, h.raw) for k, h in zip(kernels, heads, strict=True)]
        self._objective_believers: list[Believer | None] | None = None
        if self.mode == "penalize":
            L = info.get("lipschitz")
            if L is None:  # a snapshot fitted before crowd info was stored
                if "lipschitz" not in snapshot.cache:
                    snapshot.cache["lipschitz"] = lipschitz(self.cand, median(snapshot.raw))
                L = snapshot.cache["lipschitz"]
            self.lipschitz = float(L)

    def rows_of(self, unit: np.ndarray, keys: list[bytes], index: dict[bytes, int]) -> list[int]:
        """Candidate rows of running points; one the snapshot lacks stands in as its nearest candidate."""
        out = []
        for u, k in zip(unit, keys, strict=True):
            row = index.get(k)
            if row is None:
                row = int(np.argmin(((self.cand - u[None, :]) ** 2).sum(1)))
            out.append(row)
        return out

    @property
    def believer(self) -> Believer | None:
        """The GP fantasies, built at the first running point (a sequential select never pays for it)."""
        if self._believer is None and self.mode == "believer":
            snapshot, _, kernel = self._make
            assert kernel is not None  # the mode is "believer" only with a kernel
            self._believer = Believer(kernel, self._features(), snapshot.raw, self.levels,
                                      snapshot.cache.setdefault("columns", {}))
        return self._believer

    def _features(self) -> np.ndarray:
        snapshot, space, _ = self._make
        if "features" not in snapshot.cache:
            snapshot.cache["features"] = space.features(self.cand)
        feats: NDArray[np.float64] = snapshot.cache["features"]
        return feats

    def shrinks(self) -> list[np.ndarray]:
        """Every objective's spread factor after the fantasies (the first objective's, then each
        further objective's with its own fitted kernel; one without a kernel takes the first's)."""
        believer = self.believer
        assert believer is not None  # asked in the "believer" mode only
        main = believer.shrink()
        if self._objective_believers is None:
            snapshot = self._make[0]
            self._objective_believers = [
                None if k is None else Believer(k, self._features(), raw, self.levels,
                                                snapshot.cache.setdefault(f"columns{j}", {}))
                for j, (k, raw) in enumerate(self._objectives, start=1)]
            for b in self._objective_believers:
                if b is not None:
                    b.add(self.rows)
        return [main] + [main if b is None else b.shrink() for b in self._objective_believers]

    def add(self, rows: list[int]) -> None:
        """Mark the candidates ``rows`` as running (or chosen)."""
        self.rows.extend(rows)
        if not rows:
            return
        if self.mode == "believer":
            believer = self.believer
            assert believer is not None  # the mode is "believer": it is built
            believer.add(rows)
            for b in self._objective_believers or ():
                if b is not None:
                    b.add(rows)

    def scores(self, score_fn: Callable[[np.ndarray, float], np.ndarray], acquisition: str) -> np.ndarray:
        """``score_fn(Q, best)`` with the running points accounted for (lower is better)."""
        if not self.rows:
            return score_fn(self.Q, self.best)
        if self.mode == "believer":
            believer = self.believer
            assert believer is not None  # the mode is "believer": it is built
            return score_fn(narrow(self.Q, believer.shrink()), believed_best(self.best, self.Q, self.rows))
        phi = penalty(self.cand, self.Q, self.levels, self.lipschitz, self.best, self.rows)
        return penalised_scores(score_fn(self.Q, self.best), phi, acquisition)
