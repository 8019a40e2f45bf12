"""Conformalized quantile regression: split CQR, CV+, CrossVal-CP, JaB+, and the adaptive schedule.

Where it lives: ``levels`` (the level grid, its interval pairs, the schedule of methods), ``fit``
(the surrogate fits and non-conformity scores of each method: ``conformalize``) and ``bounds``
(intervals from the scores at any alpha: ``Bounds`` for the candidates, ``pair_intervals`` and
``beta_of`` for one stored prediction).
"""

from .bounds import (
    Bounds,
    beta_of,
    interval_from_points,
    issued_beta,
    nested,
    pair_interval,
    pair_intervals,
)
from .fit import Average, ConformalFit, conformalize, fold_scores, model_scores, scores, spread_ratio
from .levels import METHODS, SPLIT_RULE, check_levels, midpoint_levels, pair_alphas, schedule

__all__ = [
    "METHODS",
    "SPLIT_RULE",
    "Average",
    "Bounds",
    "ConformalFit",
    "beta_of",
    "check_levels",
    "conformalize",
    "fold_scores",
    "interval_from_points",
    "issued_beta",
    "midpoint_levels",
    "model_scores",
    "nested",
    "pair_alphas",
    "pair_interval",
    "pair_intervals",
    "schedule",
    "scores",
    "spread_ratio",
]
