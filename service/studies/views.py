"""What clients see of trials and studies, and how a prediction's point sets are stored."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..storage import StudyInfo, TrialRow, as_utc


def pack_points(points: np.ndarray | None) -> bytes | None:
    """Conformal point sets of one prediction, (2, P, n), as raw little-endian float64.

    Raw rather than ``.npy``: np.load parses its header with ast.literal_eval,
    which showed up on every tell.
    """
    if points is None:
        return None
    return np.ascontiguousarray(points, dtype="<f8").tobytes()


def unpack_points(data: bytes, pairs: int) -> np.ndarray:
    """Inverse of ``pack_points``; ``pairs`` (P) is the number of intervals of the prediction."""
    return np.frombuffer(data, dtype="<f8").reshape(2, pairs, -1)


def public_prediction(pred: dict[str, Any] | None) -> dict[str, Any] | None:
    """What clients see of a prediction: no internal point sets, orientation sign or output warp."""
    if pred is None:
        return None
    return {k: v for k, v in pred.items() if k not in ("points", "sign", "warp")}


def asked_view(t: TrialRow) -> dict[str, Any]:
    """A trial as the ask that created it answered it."""
    return {"id": t.id, "number": t.number, "params": t.params, "prediction": public_prediction(t.prediction)}


def trial_view(t: TrialRow) -> dict[str, Any]:
    return {
        "id": t.id,
        "study_id": t.study_id,
        "number": t.number,
        "state": t.state,
        "params": t.params,
        "value": t.value,
        "prediction": public_prediction(t.prediction),
        "worker_id": t.worker_id,
        "asked_at": as_utc(t.asked_at),
        "heartbeat_at": as_utc(t.heartbeat_at),
        "finished_at": as_utc(t.finished_at),
    }


def study_view(info: StudyInfo, default_ask_wait: float, fit: dict[str, bool]) -> dict[str, Any]:
    """The study view of the wire contract; ``fit`` is the fit pool's status for the study."""
    d = info.definition
    config = dict(d["config"])
    surrogate, acquisition = config.pop("surrogate"), config.pop("acquisition")
    service = d.get("service", {})
    wait = service.get("ask_wait_seconds")
    settings = {**config, **service,
                "ask_wait_seconds": default_ask_wait if wait is None else wait}
    return {
        "id": info.id,
        "name": info.name,
        "space": d["space"],
        "direction": d["direction"],
        "seed": d["seed"],
        "surrogate": surrogate,
        "acquisition": acquisition,
        "pruner": d.get("pruner") or {"name": "none"},
        "settings": settings,
        "created_at": info.created_at,
        "trials": info.counts,
        "best_trial": info.best_trial,
        "surrogate_status": {
            "snapshot_version": info.snapshot_version or None,
            "fitted_on": info.snapshot_n_obs,
            "lag": max(0, info.n_complete - info.snapshot_n_obs),  # fed pruned values count in n_obs
            "method": info.fit_method,
            "fitted_at": info.fitted_at,
            "fit_seconds": info.fit_seconds,
            "device": info.fit_device,
            "last_error": info.fit_error,
            **fit,
        },
        "adaptive": {
            "adapter": config["adapter"],
            "pairs": [{"coverage": round(1.0 - s["target"], 10), "target_alpha": s["target"],
                       "alpha": s["alpha"], "steps": s["steps"]} for s in info.adaptive],
        },
    }



def study_summary(info: StudyInfo) -> dict[str, Any]:
    """A study as listings show it (no space, settings or adaptive state)."""
    d = info.definition
    return {"id": info.id, "name": info.name, "direction": d["direction"], "seed": d["seed"],
            "surrogate": d["config"]["surrogate"], "acquisition": d["config"]["acquisition"],
            "created_at": info.created_at, "trials": info.counts, "best_trial": info.best_trial}
