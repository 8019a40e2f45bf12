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


NESTED = ("objectives", "constraints")  # a prediction's nested per-outcome predictions, in stored order


def _parts(pred: dict[str, Any]) -> list[dict[str, Any]]:
    """The prediction and each nested one (every objective's after the first, each constraint's)."""
    return [pred, *(p for key in NESTED for p in pred.get(key) or ())]


def split_points(pred: dict[str, Any] | None) -> tuple[dict[str, Any] | None, bytes | None]:
    """A prediction without its conformal point sets (its own, and each objective's and constraint's),
    and those sets as one blob; the prediction records each set's length under ``points_n``."""
    if pred is None:
        return None, None
    arrays = [p.get("points") for p in _parts(pred)]
    if all(a is None for a in arrays):
        return pred, None
    out = {k: v for k, v in pred.items() if k != "points"}
    for key in NESTED:
        if pred.get(key):
            out[key] = [{k: v for k, v in c.items() if k != "points"} for c in pred[key]]
    out["points_n"] = [0 if a is None else int(np.shape(a)[-1]) for a in arrays]
    return out, b"".join(pack_points(a) for a in arrays if a is not None)


def join_points(pred: dict[str, Any] | None, data: bytes | None) -> dict[str, Any] | None:
    """Inverse of ``split_points``: the prediction with its point sets back in place (for adapt)."""
    if pred is None or data is None:
        return pred
    sizes = pred.get("points_n") or [len(data) // (8 * 2 * len(pred["intervals"]))]
    out = dict(pred)
    for key in NESTED:
        if pred.get(key):
            out[key] = [dict(c) for c in pred[key]]
    at = 0
    for part, n in zip(_parts(out), sizes, strict=False):
        if n:
            pairs = len(part["intervals"])
            size = 8 * 2 * pairs * n
            part["points"] = unpack_points(data[at : at + size], pairs)
            at += size
    return out


INTERNAL = ("points", "sign", "warp", "points_n")


def public_prediction(pred: dict[str, Any] | None) -> dict[str, Any] | None:
    """What clients see of a prediction: no internal point sets, orientation sign or output warp."""
    if pred is None:
        return None
    out = {k: v for k, v in pred.items() if k not in INTERNAL}
    for key in NESTED:
        if pred.get(key):
            out[key] = [{k: v for k, v in c.items() if k not in INTERNAL} for c in pred[key]]
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
        "value": t.value if t.values is None else None,  # a multi-objective trial has values only
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


def study_view(info: StudyInfo, default_ask_wait: float, fit: dict[str, bool],
               pareto: dict[str, Any] | None = None) -> dict[str, Any]:
    """The study view of the wire contract; ``fit`` is the fit pool's status for the study;
    ``pareto`` a multi-objective study's front (``studies.pareto``)."""
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
        "directions": d.get("directions"),
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
        "pareto": None if pareto is None else {k: pareto[k] for k in ("size", "hypervolume", "reference_point")},
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
            "objectives": [_pairs(states) for states in (info.head_adaptive or {}).get("objectives", [])],
        },
    }


def _pairs(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"coverage": round(1.0 - s["target"], 10), "target_alpha": s["target"], "alpha": s["alpha"],
             "steps": s["steps"]} for s in states]



def study_summary(info: StudyInfo) -> dict[str, Any]:
    """A study as listings show it (no space, settings or adaptive state)."""
    d = info.definition
    return {"id": info.id, "name": info.name, "direction": d["direction"], "directions": d.get("directions"),
            "seed": d["seed"],
            "surrogate": d["config"]["surrogate"], "acquisition": d["config"]["acquisition"],
            "constraints": d.get("constraints", []), "user_attrs": info.user_attrs or {},
            "created_at": info.created_at, "trials": info.counts, "best_trial": info.best_trial}
