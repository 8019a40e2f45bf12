"""The calibration view of a study: prediction at ask against outcome, coverage, alphas."""

from __future__ import annotations

from typing import Any

import numpy as np

from calibo.engine import StudyState, metrics

from ..storage import StudyInfo
from .definitions import StudyDef
from .views import CalibratedTrial, CalibrationBlock, CalibrationView


def objective_records(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A trial's calibration record per objective: a multi-objective study stores one record per
    objective under ``objectives``; a single-objective record is its own only one."""
    return record["objectives"] if record.get("objectives") else [record]


def calibration_view(sd: StudyDef, info: StudyInfo, rows: list[tuple[int, int, dict[str, Any], dict[str, Any]]],
                     window: int = 20) -> CalibrationView:
    """``rows``: (trial id, number, params, record) of completed trials that had a prediction.

    The top level is the study's objective (a multi-objective study's first); ``objectives`` (several
    objectives) and ``constraints`` hold each one's own coverage, rolling coverage and alphas."""
    study_id = sd.id
    trials: list[CalibratedTrial] = []
    records, params, whole = [], [], []
    for tid, number, p, rec in rows:
        main = objective_records(rec)[0]
        if "covered" not in main:
            continue
        records.append(main)
        whole.append(rec)
        params.append(p)
        trials.append({
            "trial_id": tid, "number": number, "method": main["method"], "value": main["value"],
            "mean": main.get("mean"), "levels": main.get("levels"), "quantiles": main.get("quantiles"),
            "intervals": [{"coverage": c, "alpha": a, "lower": lo, "upper": hi, "covered": cov,
                           "width": w}
                          for c, a, lo, hi, cov, w in zip(main["coverage"], main["alpha"], main["lower"],
                                                          main["upper"], main["covered"], main["width"],
                                                          strict=True)],
            "beta": main.get("beta"),
        })
    state = StudyState.from_dict(info.state)
    nominal = [round(1.0 - s.target, 10) for s in state.states]
    current = [s.alpha for s in state.states]
    if not records:
        return {"study_id": study_id, "n": 0, "nominal": nominal, "trials": trials, "current_alpha": current,
                "summary": {"n": 0}, "conformal": {"n": 0}, "cumulative_coverage": [], "rolling_coverage": [],
                "alpha_trajectory": []}
    covered = np.array([r["covered"] for r in records], dtype=float)
    features = sd.space.encode([sd.space.validate(p) for p in params])
    out: CalibrationView = {
        "study_id": study_id,
        "n": len(records),
        "nominal": nominal,
        "trials": trials,
        "current_alpha": current,
        "cumulative_coverage": metrics.cumulative_coverage(covered).tolist(),
        "rolling_coverage": metrics.trailing_coverage(covered, window).tolist(),
        "alpha_trajectory": [r["alpha"] for r in records],
        "summary": metrics.summarize(records, features, window=window),
        "conformal": metrics.summarize(records, features, window=window, conformal_only=True),
        "window": window,
    }
    if sd.multi:  # each objective's calibration, the first (the top level) among them
        states = [state.states, *state.objectives]
        out["objectives"] = [_block(f"objective {j}", direction, whole, "objectives", j, features, window, states)
                             for j, direction in enumerate(sd.directions)]
    if sd.constraints:  # each constraint's calibration: its own intervals, coverage and alphas
        out["constraints"] = [_block(name, None, whole, "constraints", j, features, window,
                                     state.constraints)
                              for j, name in enumerate(sd.constraints)]
    return out


def _block(name: str, direction: str | None, records: list[dict[str, Any]], key: str, j: int,
           features: np.ndarray, window: int, states: list[list[Any]]) -> CalibrationBlock:
    """The calibration of outcome ``j`` under ``key`` (an objective or a constraint) of ``records``."""
    rows = [i for i, r in enumerate(records) if r.get(key)]
    recs = [records[i][key][j] for i in rows]
    cov = np.array([r["covered"] for r in recs], dtype=float)
    out: CalibrationBlock = {
        "name": name, "n": len(recs),
        "cumulative_coverage": metrics.cumulative_coverage(cov).tolist() if recs else [],
        "rolling_coverage": metrics.trailing_coverage(cov, window).tolist() if recs else [],
        "alpha_trajectory": [r["alpha"] for r in recs],
        "summary": metrics.summarize(recs, features[rows], window=window) if recs else {"n": 0},
        "conformal": (metrics.summarize(recs, features[rows], window=window, conformal_only=True)
                      if recs else {"n": 0}),
        "current_alpha": [s.alpha for s in states[j]] if j < len(states) else [],
    }
    if direction is not None:
        out["direction"] = direction
    return out
