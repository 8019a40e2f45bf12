"""What clients see of trials and studies, and how a prediction's point sets are stored."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..storage import StudyInfo, TrialRow, as_utc, feasible


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


def split_points(pred: dict[str, Any] | None) -> tuple[dict[str, Any] | None, bytes | None]:
    """A prediction without its conformal point sets (the objective's and each constraint's), and
    those sets as one blob; the prediction records each set's length under ``points_n``."""
    if pred is None:
        return None, None
    parts = [pred, *pred.get("constraints", ())]
    arrays = [p.get("points") for p in parts]
    if all(a is None for a in arrays):
        return pred, None
    out = {k: v for k, v in pred.items() if k != "points"}
    if pred.get("constraints"):
        out["constraints"] = [{k: v for k, v in c.items() if k != "points"} for c in pred["constraints"]]
    out["points_n"] = [0 if a is None else int(np.shape(a)[-1]) for a in arrays]
    return out, b"".join(pack_points(a) for a in arrays if a is not None)


def join_points(pred: dict[str, Any] | None, data: bytes | None) -> dict[str, Any] | None:
    """Inverse of ``split_points``: the prediction with its point sets back in place (for adapt)."""
    if pred is None or data is None:
        return pred
    sizes = pred.get("points_n") or [len(data) // (8 * 2 * len(pred["intervals"]))]
    out = dict(pred)
    parts = [out] + ([dict(c) for c in pred["constraints"]] if pred.get("constraints") else [])
    at = 0
    for part, n in zip(parts, sizes, strict=False):
        if n:
            pairs = len(part["intervals"])
            size = 8 * 2 * pairs * n
            part["points"] = unpack_points(data[at : at + size], pairs)
            at += size
    if len(parts) > 1:
        out["constraints"] = parts[1:]
    return out


INTERNAL = ("points", "sign", "warp", "points_n")


def public_prediction(pred: dict[str, Any] | None) -> dict[str, Any] | None:
    """What clients see of a prediction: no internal point sets, orientation sign or output warp."""
    if pred is None:
        return None
    out = {k: v for k, v in pred.items() if k not in INTERNAL}
    if pred.get("constraints"):
        out["constraints"] = [{k: v for k, v in c.items() if k not in INTERNAL} for c in pred["constraints"]]
    return out


def asked_view(t: TrialRow) -> dict[str, Any]:
    """A trial as the ask that created it answered it."""
    out = {"id": t.id, "number": t.number, "study_id": t.study_id, "params": t.params,
           "prediction": public_prediction(t.prediction)}
    if t.origin is not None:
        out["origin"] = t.origin
    if t.user_attrs:
        out["user_attrs"] = t.user_attrs
    return out


def trial_view(t: TrialRow) -> dict[str, Any]:
    return {
        "id": t.id,
        "study_id": t.study_id,
        "number": t.number,
        "state": t.state,
        "params": t.params,
        "value": t.value,
        "values": t.values,
        "constraints": t.constraints,
        "feasible": None if t.constraints is None else feasible(t.constraints),
        "origin": t.origin or "asked",
        "user_attrs": t.user_attrs or {},
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
        "constraints": d.get("constraints", []),
        "user_attrs": info.user_attrs or {},
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
            "pairs": _pairs(info.adaptive),
            "constraints": [_pairs(states) for states in (info.head_adaptive or {}).get("constraints", [])],
        },
    }


def _pairs(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"coverage": round(1.0 - s["target"], 10), "target_alpha": s["target"], "alpha": s["alpha"],
             "steps": s["steps"]} for s in states]



def study_summary(info: StudyInfo) -> dict[str, Any]:
    """A study as listings show it (no space, settings or adaptive state)."""
    d = info.definition
    return {"id": info.id, "name": info.name, "direction": d["direction"], "seed": d["seed"],
            "surrogate": d["config"]["surrogate"], "acquisition": d["config"]["acquisition"],
            "constraints": d.get("constraints", []), "user_attrs": info.user_attrs or {},
            "created_at": info.created_at, "trials": info.counts, "best_trial": info.best_trial}
