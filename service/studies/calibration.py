"""The calibration view of a study: prediction at ask against outcome, coverage, alphas."""

from __future__ import annotations

from typing import Any

import numpy as np

from calibo.engine import metrics

from ..storage import StudyInfo
from .definitions import StudyDef


def calibration_view(sd: StudyDef, info: StudyInfo, rows: list[tuple[int, int, dict[str, Any], dict[str, Any]]],
                     window: int = 20) -> dict[str, Any]:
    """``rows``: (trial id, number, params, record) of completed trials that had a prediction."""
    study_id = sd.id
    trials, records, params = [], [], []
    for tid, number, p, rec in rows:
        if "covered" not in rec:
            continue
        records.append(rec)
        params.append(p)
        trials.append({
            "trial_id": tid, "number": number, "method": rec["method"], "value": rec["value"],
            "mean": rec.get("mean"), "levels": rec.get("levels"), "quantiles": rec.get("quantiles"),
            "intervals": [{"coverage": c, "alpha": a, "lower": lo, "upper": hi, "covered": cov,
                           "width": w}
                          for c, a, lo, hi, cov, w in zip(rec["coverage"], rec["alpha"], rec["lower"],
                                                          rec["upper"], rec["covered"], rec["width"],
                                                          strict=True)],
            "beta": rec.get("beta"),
        })
    nominal = [round(1.0 - s["target"], 10) for s in info.adaptive]
    out: dict[str, Any] = {
        "study_id": study_id,
        "n": len(records),
        "nominal": nominal,
        "trials": trials,
        "current_alpha": [s["alpha"] for s in info.adaptive],
    }
    if not records:
        out.update(summary={"n": 0}, conformal={"n": 0}, cumulative_coverage=[], rolling_coverage=[],
                   alpha_trajectory=[])
        return out
    covered = np.array([r["covered"] for r in records], dtype=float)
    features = sd.space.encode([sd.space.validate(p) for p in params])
    out["cumulative_coverage"] = metrics.cumulative_coverage(covered).tolist()
    out["rolling_coverage"] = metrics.trailing_coverage(covered, window).tolist()
    out["alpha_trajectory"] = [r["alpha"] for r in records]
    out["summary"] = metrics.summarize(records, features, window=window)
    out["conformal"] = metrics.summarize(records, features, window=window, conformal_only=True)
    out["window"] = window
    if sd.constraints:  # each constraint's calibration: its own intervals, coverage and alphas
        out["constraints"] = []
        for j, name in enumerate(sd.constraints):
            recs = [r["constraints"][j] for r in records if r.get("constraints")]
            rows = [i for i, r in enumerate(records) if r.get("constraints")]
            cov = np.array([r["covered"] for r in recs], dtype=float)
            out["constraints"].append({
                "name": name, "n": len(recs),
                "cumulative_coverage": metrics.cumulative_coverage(cov).tolist() if recs else [],
                "rolling_coverage": metrics.trailing_coverage(cov, window).tolist() if recs else [],
                "alpha_trajectory": [r["alpha"] for r in recs],
                "summary": metrics.summarize(recs, features[rows], window=window) if recs else {"n": 0},
                "conformal": (metrics.summarize(recs, features[rows], window=window, conformal_only=True)
                              if recs else {"n": 0}),
                "current_alpha": [s["alpha"] for s in (info.head_adaptive or {}).get("constraints", [[]])[j]]
                if info.head_adaptive else [],
            })
    return out
