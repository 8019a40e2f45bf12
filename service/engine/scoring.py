"""How candidates are scored beyond one objective's acquisition: several objectives (``MultiScore``),
the probability of feasibility under constraint models, and the noise-free narrowing the
improvement acquisitions score. ``fit``'s local search and ``select`` score the same way."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from . import acquisition as acq
from . import crowd, multi
from .config import EngineConfig
from .errors import ConfigError
from .warp import Warp


class MultiScore:
    """The multi-objective acquisition (``engine.multi``) on a study's observations.

    The objectives are compared on a common, scale-free footing: each one's warped values (minimised)
    are shifted and divided by their observed range, so 0 is the best and 1 the worst value
    observed. The front is the feasible observations' non-dominated set; the reference point is the
    study's (``config.reference_point``, in the objectives' own units, mapped the same way) or, by
    default, 1.1 in every objective: the worst observed value plus a tenth of the observed range.
    """

    def __init__(self, config: EngineConfig, signs: Sequence[float], Y: np.ndarray, ok: np.ndarray,
                 warps: Sequence[Warp], levels: np.ndarray, rng: np.random.Generator,
                 samples: int = multi.SAMPLES) -> None:
        self.m = Y.shape[1]
        self.kind = multi.resolve(config.multi_acquisition, self.m)
        self.levels = levels
        self.lo = Y.min(axis=0)
        span = np.ptp(Y, axis=0)
        self.span = np.where(span > 0, span, 1.0)
        Yn = (Y - self.lo) / self.span
        self.observed = Yn[ok]
        self.front = self.observed[multi.pareto_mask(self.observed)] if self.observed.shape[0] else self.observed
        if config.reference_point is not None:
            if len(config.reference_point) != self.m:
                raise ConfigError("reference_point", f"must have one value per objective ({self.m})")
            r = np.array([float(w.forward(np.array([s * v]))[0])
                          for w, s, v in zip(warps, signs, config.reference_point, strict=True)])
            self.ref = (r - self.lo) / self.span
        else:
            self.ref = multi.reference_point(Yn)
        self.u = multi.uniforms(self.m, rng, samples)
        self.weights = multi.simplex_weights(self.m, rng)

    def __call__(self, Qs: Sequence[np.ndarray], believed: np.ndarray | None = None) -> np.ndarray:
        """Lower-is-better scores of candidates with the (warped, minimised) quantiles ``Qs``, one
        array per objective; ``believed``: running points' predicted objectives (warped) that count
        as observed (the kriging believer)."""
        Qn = [(Q - self.lo[j]) / self.span[j] for j, Q in enumerate(Qs)]
        observed, front = self.observed, self.front
        if believed is not None and believed.shape[0]:
            observed = np.vstack([observed, (believed - self.lo) / self.span])
            front = observed[multi.pareto_mask(observed)]
        incumbent = None
        if self.kind == "parego":
            base = observed if observed.shape[0] else self.ref[None, :]
            incumbent = float(multi.chebyshev(base, self.weights).min())
        return multi.scores(self.kind, Qn, self.levels, front, self.ref, self.u, self.weights, incumbent)


def with_feasibility(sc: np.ndarray, log_pf: np.ndarray, acquisition: str, any_feasible: bool) -> np.ndarray:
    """An acquisition's scores (lower is better) weighed by each candidate's log probability of
    satisfying every constraint (Gardner et al., 2014; Gelbart et al., 2014).

    log EI adds it (EI times the probability); EI and PI utilities are multiplied by it; the
    others (UCB, Thompson draws, the mean) choose among candidates at least as likely feasible as
    not, the likeliest when none is. Before any feasible observation there is no incumbent to
    improve on, and the probability of feasibility alone is the acquisition.
    """
    if not any_feasible:
        return -log_pf
    if acquisition in acq.LOG_UTILITY:
        score: NDArray[np.float64] = sc - log_pf
        return score
    if acquisition in acq.POSITIVE_UTILITY:
        score = sc * np.exp(log_pf)
        return score
    likely = log_pf >= math.log(0.5)
    if not likely.any():
        return -log_pf
    return np.where(likely, sc, np.inf)


def narrows(config: EngineConfig, several: bool) -> bool:
    """Whether the acquisition scores the noise-free narrowing (``scored``): the improvement
    acquisitions do, and so do several objectives (EHVI and ParEGO are improvements)."""
    return several or config.acquisition in acq.IMPROVEMENT


def scored(Q: np.ndarray, signal: np.ndarray | None) -> np.ndarray:
    """What an improvement acquisition (``acquisition.IMPROVEMENT``, and the multi-objective ones)
    scores of calibrated quantiles ``Q``: with the fit's signal fractions, ``Q`` narrowed about its
    median to the objective's own spread.

    The calibrated quantiles cover an *observation*; an improvement is one of the objective. Where
    the surrogate explains the spread near observed points as noise (a plateau of tied or quantized
    values), an observation there may land below the best by chance, but the objective does not:
    scoring the noisy spread makes every new point on a plateau of the best value look like an even
    chance of improving, and the search stays there. Optuna's GPSampler and BoTorch score the latent
    function's posterior for the same reason."""
    return Q if signal is None else crowd.narrow(Q, signal)
