"""Full refits and updates: when a fit tunes the GP's hyperparameters again, and when it keeps them.

Tuning a GP's hyperparameters (L-BFGS on the marginal likelihood, ``surrogates.qgp``) is the
largest part of a fit below a few hundred observations, and one more observation barely moves
them. So a fit is one of two kinds, and its snapshot says which (``meta.fit``):

* ``full``: every outcome's hyperparameters are tuned on the data (the fit of a study's first
  snapshot, and of each refit the schedule below calls for);
* ``update``: every outcome's model keeps the hyperparameters of the newest full refit (``Tuned``,
  carried on each snapshot as ``meta.tuned``) and is conditioned on every observation with
  them. Everything else is the fit's own: the warp is fitted to the values, the conformal method's
  models (CV+ folds, split's split model) are refitted with the kept kernel, and the calibration
  scores are the method's rule on those models, by the same code as a full refit's. An update is
  therefore exactly the full refit that would have tuned the same hyperparameters
  (``tests/test_retune.py`` holds that, and the scores' rule, against an independent GP).

A full refit is due (``plan``) when any of these holds, else the fit is an update:

* there is no full refit to take the hyperparameters from, or the surrogate keeps none (every
  surrogate but ``qgp`` refits fully every time);
* the conformal schedule changed method since the full refit (``raw`` -> ``cv+`` -> ``split``):
  a new method's models start from tuned hyperparameters;
* the data grew: the observations number at least ``1 + retune_growth`` times those of the full
  refit (``surrogate_options.retune_growth``, default ``RETUNE_GROWTH``; 0 tunes at every fit);
* the data moved: an outcome's values, warped and standardized as the surrogate sees them, differ
  from what the full refit's warp makes of them by more than ``WARP_MOVE`` standard deviations
  (root mean square): the values the hyperparameters were tuned on have another shape now. The
  warp's exponent alone is a poor measure: on a few dozen values it wanders by 0.2-0.3 while the
  warped values move by a few hundredths.

Every home (the service's fit jobs, the ``Optimizer``, ``CaliboSampler``) runs the same plan on
the same inputs, so a study's suggestions stay a function of its seed and its tells: a due full
refit runs in the fit that finds it due, not later in the background (where the fits after it would
depend on when it landed).

With growth 0.25, a sequential study of 120 trials makes 10 full refits after its warm-up (at about
15, 19, 24, 30, 38, 48 observations, the switch to split at 50, 63, 79, 99, ...), and updates
in between. The full refit's cost is paid once per quarter more data, not per trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .warp import Warp

if TYPE_CHECKING:
    from .snapshot import SnapshotMeta

RETUNE_GROWTH = 0.25
WARP_MOVE = 0.1
# the surrogates whose fitted hyperparameters a fit can hand on (``tuned_hyperparameters``, ``hyper=``)
KEEPS_HYPERPARAMETERS = ("qgp",)


def _plain(h: dict[str, Any]) -> dict[str, Any]:
    """Hyperparameters as JSON numbers (lengthscale a list)."""
    return {"outputscale": float(h["outputscale"]), "noise": float(h["noise"]),
            "lengthscale": [float(x) for x in np.atleast_1d(h["lengthscale"])]}


@dataclass(frozen=True)
class Tuned:
    """The hyperparameters of a study's newest full refit, one entry per modelled outcome in the
    fit's order (the objective, further objectives, constraints), with what the plan compares."""

    n_obs: int  # observations of the full refit
    method: str  # its conformal method
    hyper: tuple[dict[str, Any], ...]  # per outcome: outputscale, lengthscale (d,), noise
    warps: tuple[dict[str, Any] | None, ...]  # per outcome: its warp then (``Warp.to_dict``), None if identity

    def to_dict(self) -> dict[str, Any]:
        return {"n_obs": self.n_obs, "method": self.method, "hyper": [_plain(h) for h in self.hyper],
                "warps": list(self.warps)}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Tuned | None:
        """The stored form back; None for a snapshot without one (or one this code cannot read)."""
        if not isinstance(d, dict):
            return None
        try:
            hyper = tuple(_plain(h) for h in d["hyper"])
            warps = tuple(w if isinstance(w, dict) else None for w in d["warps"])
            return cls(int(d["n_obs"]), str(d["method"]), hyper, warps)
        except (KeyError, TypeError, ValueError):
            return None

    @classmethod
    def of(cls, meta: SnapshotMeta | None) -> Tuned | None:
        """What a snapshot's ``meta`` carries for the next fit."""
        return cls.from_dict(meta.tuned if meta is not None else None)


def growth(options: dict[str, Any]) -> float:
    return float(options.get("retune_growth", RETUNE_GROWTH))


def usable(tuned: Tuned | None, surrogate: str, n_outcomes: int, dim: int) -> bool:
    """Whether a fit can condition its models on ``tuned``'s hyperparameters at all: a surrogate
    that takes them, one set per outcome, a lengthscale per feature."""
    return (tuned is not None and surrogate in KEEPS_HYPERPARAMETERS and len(tuned.hyper) == n_outcomes
            and all(len(h["lengthscale"]) in (1, dim) for h in tuned.hyper))


def plan(tuned: Tuned | None, surrogate: str, options: dict[str, Any], n: int, method: str,
         n_outcomes: int, dim: int) -> tuple[Tuned | None, str]:
    """The hyperparameters a fit on ``n`` observations keeps (None: a full refit) and why."""
    if surrogate not in KEEPS_HYPERPARAMETERS:
        return None, f"{surrogate} keeps no hyperparameters"
    if tuned is None:
        return None, "no full refit to keep hyperparameters from"
    if not usable(tuned, surrogate, n_outcomes, dim):
        return None, "the outcomes or the features changed"
    if tuned.method != method:
        return None, f"the conformal method changed: {tuned.method} -> {method}"
    g = growth(options)
    if n >= tuned.n_obs * (1.0 + g) or n < tuned.n_obs:
        return None, f"the data grew from {tuned.n_obs} to {n} observations"
    return tuned, f"hyperparameters of the full refit on {tuned.n_obs} observations"


def _standard(z: np.ndarray) -> np.ndarray:
    sd = float(z.std())
    std: NDArray[np.float64] = (z - z.mean()) / (sd if sd > 0 else 1.0)
    return std


def warp_moved(tuned: Tuned, warps: Sequence[Warp], values: Sequence[np.ndarray]) -> str | None:
    """Why the outcomes' values, warped now, are too far from what the full refit's warp makes of
    them to keep its hyperparameters (None: not moved). Both are standardized, as the surrogate sees
    them; moved is a root mean square difference above ``WARP_MOVE`` (in standard deviations)."""
    for j, (then, now, v) in enumerate(zip(tuned.warps, warps, values, strict=True)):
        old = Warp.from_dict(then)
        if old.identity and now.identity:
            continue
        moved = float(np.sqrt(np.mean((_standard(old.forward(v)) - _standard(now.forward(v))) ** 2)))
        if not np.isfinite(moved) or moved > WARP_MOVE:
            return f"outcome {j}'s warp moved ({moved:.2f} sd from the full refit's)"
    return None
