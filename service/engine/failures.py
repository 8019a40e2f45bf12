"""Failed trials as observations: a calibrated probability that a configuration runs at all.

A tuning run crashes where a configuration does not fit in memory, a learning rate diverges, a
library refuses a combination. A failed trial has no value for the outcome model, but it is an
observation all the same: of where the objective can be evaluated. The fit models success against
failure over every finished trial with a classifier (randomised trees over the model features: the
regions that fail are usually boxes, thresholds or combinations of choices, which trees carve
well), calibrated by isotonic regression on out-of-fold predictions (``CalibratedClassifierCV``),
and stores the log probability of success at every candidate. Isotonic, not Platt scaling: on a
crash box and a crash half-plane in two dimensions, from 30 to 200 uniform trials, it was the
better calibrated (largest gap between predicted and observed success over fifths of the
predictions 0.02-0.12 against Platt's 0.08-0.27, which stays under-confident: 0.2 inside a region
that always fails), and beat the raw trees' probabilities at every size (tests/test_failures.py).
``select`` weighs the acquisition with it as it weighs outcome constraints
(``scoring.with_feasibility``: log EI plus the log probability), so a crash region's uncertainty
no longer draws the next trial into it.

Near-duplicates of a failed configuration (every numeric coordinate within ``NEAR`` of the range,
the same choices and the same active parameters) are never proposed: a configuration that failed
fails again, and one a step of ``NEAR`` away is almost surely the same run.

A chance constraint on top of the weighting: a suggestion runs with calibrated probability at least
``LIKELY`` wherever a candidate does. The weighting alone is not enough where failures leave the
outcome model blind: a crash region holds no observed value, so the outcome model's uncertainty, and
its expected improvement, stay large there, and outgrow the probability weight. With the weighting
alone, in process on the failure benchmark (2 seeds, 60 trials), calibo failed 48, 26 and 26 times per
run on divergent_lr, memory_limit and hartmann6_halfspace, with suggestions the classifier gave 0.05
to 0.2; with the constraint at 0.5: 23, 14 and 17; at 0.8: 14, 7 and 12, best values level or better.

Fewer than ``MIN_EACH`` failures (or successes) make no classifier, only the near-duplicate rule:
the calibration needs both classes in every fold.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np

from .space import SearchSpace

NEAR = 0.01  # a candidate this close to a failed configuration in every coordinate (unit range) repeats it
LIKELY = 0.8  # the least calibrated probability of running a suggestion has, where any candidate has it
MIN_EACH = 3  # failures and successes a calibrated classifier needs (one of each per fold)
LOG_FLOOR = math.log(1e-6)  # the least probability of success a candidate is given (a finite log)
N_TREES = 64


def near_failed(space: SearchSpace, candidates: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """Per candidate (snapped unit rows), whether it repeats a failed configuration (snapped unit
    rows): the same choice of every categorical parameter, the same parameters active, and every
    numeric coordinate within ``NEAR``."""
    out = np.zeros(candidates.shape[0], dtype=bool)
    if not failed.shape[0] or not candidates.shape[0]:
        return out
    exact = np.array([p.type == "categorical" for p in space.params], dtype=bool)
    tol = np.where(exact, 0.0, NEAR)
    for start in range(0, candidates.shape[0], 512):  # (chunk, n_failed, dim) at a time
        c = candidates[start:start + 512, None, :]
        f = failed[None, :, :]
        same_active = (c < 0) == (f < 0)
        close = np.abs(c - f) <= tol + 1e-12
        out[start:start + 512] = np.all(same_active & close, axis=2).any(axis=1)
    return out


def likely(success: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """Which candidates may be suggested, given their log probability of running (``log_success``):
    the ``alive`` ones that are not near-duplicates of a failure and run with probability at least
    ``LIKELY``; where none does, every alive one that is no near-duplicate (the acquisition's
    weighting alone then keeps away from failures)."""
    alive = alive & np.isfinite(success)
    sure = alive & (success >= math.log(LIKELY))
    return sure if sure.any() else alive


def log_success(space: SearchSpace, ok: np.ndarray, failed: np.ndarray, candidates: np.ndarray,
                seed: int) -> np.ndarray | None:
    """The calibrated log probability that each candidate runs (snapped unit rows ``ok``: the
    configurations that gave a value; ``failed``: those that failed), floored at ``LOG_FLOOR``, and
    ``-inf`` for a near-duplicate of a failed configuration; None without a failure."""
    if not failed.shape[0]:
        return None
    out = np.zeros(candidates.shape[0])
    if min(ok.shape[0], failed.shape[0]) >= MIN_EACH and candidates.shape[0]:
        out = np.maximum(np.log(np.clip(_classifier(space, ok, failed, seed)(space.features(candidates)),
                                        1e-300, 1.0)), LOG_FLOOR)
    out[near_failed(space, candidates, failed)] = -np.inf
    return out


def _classifier(space: SearchSpace, ok: np.ndarray, failed: np.ndarray,
                seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """P(success | features): randomised trees, calibrated by isotonic regression on their out-of-fold
    predictions (one model per fold, averaged: sklearn's CalibratedClassifierCV)."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import ExtraTreesClassifier
    from sklearn.model_selection import StratifiedKFold

    X = space.features(np.vstack([ok, failed]))
    y = np.r_[np.ones(ok.shape[0], dtype=int), np.zeros(failed.shape[0], dtype=int)]
    folds = int(min(5, ok.shape[0], failed.shape[0]))
    trees = ExtraTreesClassifier(n_estimators=N_TREES, min_samples_leaf=1, max_features=None,
                                 random_state=seed, n_jobs=1)
    model = CalibratedClassifierCV(trees, method="isotonic",
                                   cv=StratifiedKFold(folds, shuffle=True, random_state=seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y)
    success = list(model.classes_).index(1)
    return lambda Xc: model.predict_proba(Xc)[:, success]

