"""A study's engine settings: ``EngineConfig``, every one named by the method's papers or a how-to.

Each setting here is one a user has a reason to change (the settings reference says when). Variants
that lost their benchmark are not settings: the behaviour they were compared against is the
engine's constant. A stored study or state that still names one of them loads with the default in
its place (``migrate``), and says so (``removed``).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from . import acquisition as acq
from . import multi, reprs
from .adaptive import ADAPTERS
from .conformal import midpoint_levels
from .errors import ConfigError
from .limits import SETTING_RANGES, check_setting, check_surrogate_options
from .surrogates import SURROGATES
from .warp import WARPS

CONFORMAL_MODES = ("adaptive", "split", "cv+", "crossval", "jab+", "raw")
MAX_OBJECTIVES = 4

# Settings a study could name before their variants left the product, each with the value the
# engine now always uses. Their code and figures last lived at commit 26d3c61 (docs: benchmarks,
# variants). A stored definition naming one loads with the default in its place.
REMOVED: dict[str, Any] = {
    "warp_reference": "observed",
    "incumbent": "observed",
    "noise_free": True,
    "shift": "none",
    "levels": None,
    "warmup_observed": 1.0,
    "split_refit": True,
    "split_scores": "transported",
    "early_scores": "cv+",
    "ucb_pair": 0,
    "crowd": "believer",
    "diversity": 0.05,
    "local_search": 20,
}
REMOVED_AT = "26d3c61"

# The constants that were settings (see REMOVED): the best drawn candidates fit's acquisition local
# search starts from (20 measured ahead of 5 on real tuning).
LOCAL_SEARCH = 20

# The fewest observations the model may take over from, once its out-of-fold predictions rank the
# results better than chance at this significance (``EngineConfig.warmed_up``). Optuna's GPSampler
# starts after 10 trials, fixed.
WARMUP_LEAST = 5
WARMUP_SIGNIFICANCE = 0.05

# The acquisition scores the calibrated quantiles from this many observations on, the surrogate's own
# before (the quantile HPO paper's schedule, 5.1 and 6.3); every prediction shown is conformalized
# from ``conformalize_from`` on (by default the first fit).
SEARCH_CONFORMALIZED_FROM = 32


@dataclass(frozen=True)
class EngineConfig:
    """How a study's surrogate is fitted, calibrated and used. Plain, serialisable.

    The papers' settings: the surrogate and its options (paper 002's QGBM, QRF, QL, QGP, QE; ACHO's
    locally weighted estimators; the BANANAS ensemble), the acquisition, the conformal method and its
    schedule (raw below ``conformalize_from``, CV+ with ``cv_folds`` below ``split_from``, split with
    ``cal_fraction`` after; CrossVal-CP, JaB+ with ``n_bootstraps``), the quantile grid
    (``n_levels``), the warm start (``n_warmup``), the candidate set (``n_candidates``, mutations of
    the ``top_k`` best for ``mutation_fraction`` of it), and the adaptive layer (``adapter``: ACI
    with ``aci_gamma``, DtACI with ``dtaci_window``). The how-tos': the output ``warp``, and for
    several objectives ``multi_acquisition`` and ``reference_point``.
    """

    surrogate: str = "qgp"  # chosen by benchmarks/search.py; paper 002 picked QE, measured slower and worse here
    acquisition: str = "logei"  # log expected improvement with Gaussian tails (engine.acquisition)
    warp: str = "yeo-johnson"  # output warp before the fit (engine.warp): none | yeo-johnson | yeo-johnson-tail
    adapter: str = "aci"  # aci | dtaci | none (ACI calibrates better over a study's horizon: docs, ACI and DtACI)
    conformal: str = "adaptive"  # adaptive (CV+ then split) | split | cv+ | crossval | jab+ | raw
    n_levels: int = 10  # equal-mass quantile levels; pairs give 90/70/50/30/10% intervals
    n_warmup: int = 15  # the most finished quasi-random trials before the model takes over (warmed_up)
    conformalize_from: int = 5  # CV+ from the first fit: its fold models also tell when the warm-up ends
    split_from: int = 50
    n_candidates: int = 2000
    top_k: int = 5
    mutation_fraction: float = 0.5
    cv_folds: int = 5
    cal_fraction: float = 0.25
    n_bootstraps: int = 20  # bootstrap models of jab+
    aci_gamma: float = 0.05  # ACI learning rate; a 100-trial horizon needs a fast one
    dtaci_window: int = 50
    multi_acquisition: str = "auto"  # several objectives: auto (ehvi for 2, parego for 3-4) | ehvi (2-3) | parego
    reference_point: tuple[float, ...] | None = None  # several objectives: the hypervolume's, in their units
    surrogate_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def bad(name: str, msg: str) -> None:
            raise ConfigError(name, msg)

        if self.surrogate not in SURROGATES:
            bad("surrogate", f"must be one of {sorted(SURROGATES)}")
        if self.acquisition not in acq.ACQUISITIONS:
            bad("acquisition", f"must be one of {list(acq.ACQUISITIONS)}")
        if self.adapter not in ADAPTERS:
            bad("adapter", f"must be one of {list(ADAPTERS)}")
        if self.conformal not in CONFORMAL_MODES:
            bad("conformal", f"must be one of {list(CONFORMAL_MODES)}")
        if self.warp not in WARPS:
            bad("warp", f"must be one of {list(WARPS)}")
        if self.multi_acquisition not in ("auto", *multi.MULTI_ACQUISITIONS):
            bad("multi_acquisition", f"must be one of {['auto', *multi.MULTI_ACQUISITIONS]}")
        if self.reference_point is not None:
            ref = self.reference_point
            if (isinstance(ref, (str, bytes)) or not isinstance(ref, (list, tuple))
                    or not 2 <= len(ref) <= MAX_OBJECTIVES
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                               for v in ref)):
                bad("reference_point", f"must be a list of 2 to {MAX_OBJECTIVES} finite numbers, one per objective")
            object.__setattr__(self, "reference_point", tuple(float(v) for v in ref))
        for name in SETTING_RANGES:
            check_setting(name, getattr(self, name))
        if self.n_levels % 2:
            bad("n_levels", "must be even (the levels pair up into intervals)")
        object.__setattr__(self, "surrogate_options",
                           check_surrogate_options(self.surrogate, self.surrogate_options))

    def fits(self, n_observed: int) -> bool:
        """Whether a fit is worth making on ``n_observed`` observations: from ``warmup_least`` on.
        Its snapshot decides whether the model takes over yet (``warmed_up``)."""
        return n_observed >= self.warmup_least

    def warmed_up(self, n_observed: int, rank_p: float | None = None) -> bool:
        """Whether suggestions come from a fitted model yet (else from the warm-up sequence).

        The warm-up's length follows the data: the model takes over from ``warmup_least``
        observations (``WARMUP_LEAST``, 5) once it ranks results it did not see better than chance
        (``rank_p``, the fit's one-sided p-value of the out-of-fold Spearman correlation, the largest
        over the objectives, below
        ``WARMUP_SIGNIFICANCE``: ``ConformalFit.rank_p``; at 5 observations that takes a near-perfect
        order, at 10 a correlation of about 0.56; a later fit that no longer passes hands back to the
        quasi-random sequence), and in any case once ``n_warmup`` trials have
        finished (at least 4, the fewest a fit takes). Without it (a fit with no fold models:
        ``conformalize_from`` above the fit's size, or a split, JaB+ or raw study) the model waits
        for ``n_warmup``. Running trials do not count: a crowd
        takes the model as soon as a sequential user would, on the results it has."""
        if n_observed < self.warmup_least:
            return False
        return (rank_p is not None and rank_p < WARMUP_SIGNIFICANCE) or n_observed >= max(4, self.n_warmup)

    @property
    def warmup_least(self) -> int:
        """The fewest observations a fit is made on, and the model may take over from
        (``warmed_up``): ``WARMUP_LEAST``, or ``n_warmup`` when smaller (at least 4)."""
        return max(4, min(self.n_warmup, WARMUP_LEAST))

    @property
    def level_grid(self) -> np.ndarray:
        return midpoint_levels(self.n_levels)

    def for_objectives(self, n_objectives: int) -> EngineConfig:
        """This configuration as a study with ``n_objectives`` objectives takes it: a multi-objective
        study's QGP scores its conformal residuals in units of the GP's sd (``scores: normalized``)
        unless the settings choose. The expected hypervolume improvement compares candidates by the
        shape of their uncertainty, which one conformal width added everywhere (the quantile scores)
        flattens; on the multi-objective benchmark the normalised scores with ACI won 17 / 9 at 100
        trials with 8 in flight against the quantile scores and kept every objective's calibration gap
        within 0.05 (docs: benchmarks, multi-objective). Resolved when a study is defined and stored
        with it, so a study keeps the scores it was created with."""
        if n_objectives < 2 or self.surrogate != "qgp" or "scores" in self.surrogate_options:
            return self
        return replace(self, surrogate_options={**self.surrogate_options, "scores": "normalized"})

    def __repr__(self) -> str:
        """The settings that differ from the defaults (``EngineConfig()`` when none do)."""
        changed = [(f.name, reprs.value(getattr(self, f.name))) for f in fields(self)
                   if getattr(self, f.name) != (f.default_factory() if f.default_factory is not MISSING else f.default)]
        return reprs.build(self, *changed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> EngineConfig:
        """The settings ``d`` names; ConfigError for an unknown one, and for one that is no longer a
        setting (``REMOVED``). Stored definitions go through ``migrate`` first."""
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        for name in sorted(set(d) - known):
            if name in REMOVED:
                raise ConfigError(name, f"is no longer a setting: calibo always uses {REMOVED[name]!r} "
                                        "(docs: benchmarks, variants)")
            raise ConfigError(name, "unknown setting")
        return cls(**d)

    @classmethod
    def from_stored(cls, d: dict[str, Any] | None) -> EngineConfig:
        """A stored configuration (a study's definition, an ``Optimizer`` state): removed settings
        are dropped, their defaults taking their place (``removed`` says which were named)."""
        return cls.from_dict(migrate(d)[0])


def migrate(d: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(settings, removed)``: the stored settings ``d`` without the removed ones, and those it named
    with a value other than the constant the engine now uses (what a study's view reports)."""
    d = dict(d or {})
    gone = {k: d.pop(k) for k in list(d) if k in REMOVED}
    return d, {k: v for k, v in gone.items() if v != REMOVED[k]}
