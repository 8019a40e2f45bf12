"""The Snapshot: everything ``fit`` produced that ``select`` needs, and its bytes.

A snapshot holds the candidate set (snapped unit rows), every candidate's raw
quantiles on the study's level grid (and, for CV+, each fold model's), the
calibration scores, and the best observed value. From these ``select`` can
build calibrated quantiles at *any* alpha without touching a model.
All values are in the engine's minimise orientation. A snapshot stored with
the covariate-shift weights of the removed ``shift="fcs"`` setting
(``cal_weight``, ``cand_weight``) loads without them, as an unweighted one.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import reprs
from .conformal import Bounds
from .space import SearchSpace

FORMAT_VERSION = 1
_ARRAYS = ("levels", "candidates", "raw", "scores", "fold_raw", "fold_of", "observed", "scale",
           "fold_scale", "observed_y", "observed_ok", "signal", "success", "gp_sd", "gp_scored_sd",
           "gp_fold_sd")
_FLOAT32 = ("raw", "fold_raw", "scale", "fold_scale", "signal", "success")  # per-candidate model outputs
_HEAD_ARRAYS = ("raw", "scores", "fold_raw", "fold_of", "scale", "fold_scale", "signal")


def as_stored(a: np.ndarray) -> np.ndarray:
    """What storage keeps of a per-candidate model output (float32), so that the stored snapshot
    equals the one in memory."""
    return a.astype(np.float32).astype(np.float64)


@dataclass
class Head:
    """Another outcome the fit models at the same candidates: an outcome constraint (feasible when
    its value is <= 0) or a further objective. Same conformal method as the snapshot; its own
    surrogate, calibration scores and output warp; values in the minimise orientation, warped.

    ``threshold``: a constraint's bound 0 on the warped scale. ``best``: an objective's best
    observed value (warped). ``sign``: +1, or -1 for a maximised objective (negated inside).
    """

    kind: str  # "constraint" | "objective"
    raw: np.ndarray  # (N, L)
    scores: np.ndarray | None = None
    fold_raw: np.ndarray | None = None
    fold_of: np.ndarray | None = None
    scale: np.ndarray | None = None
    fold_scale: np.ndarray | None = None
    signal: np.ndarray | None = None  # (N,) an objective head's signal fraction (Snapshot.signal)
    threshold: float = 0.0
    best: float = float("nan")
    sign: float = 1.0
    warp: dict[str, Any] | None = None
    _bounds: Bounds | None = field(default=None, init=False, repr=False, compare=False)

    def __repr__(self) -> str:
        return reprs.build(self, ("kind", repr(self.kind)), ("raw", reprs.value(self.raw)),
                           ("sign", reprs.value(self.sign)))

    def bounds(self, method: str) -> Bounds:
        if self._bounds is None:
            self._bounds = Bounds(method, self.raw, self.scores, self.fold_raw, self.fold_of, self.scale,
                                  self.fold_scale)
        return self._bounds


@dataclass(frozen=True)
class FitKind:
    """Which kind of fit made a snapshot (``engine.retune``) and why; stored as ``{"kind", "why"}``."""

    kind: str = "full"  # full (hyperparameters tuned) | update (the full refit's kept) | extend (engine.extend)
    why: str = ""  # the plan's reason

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "why": self.why}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> FitKind:
        d = d or {}
        return cls(d.get("kind", "full"), d.get("why", ""))


@dataclass
class SnapshotMeta:
    """What a fit says of itself beside its arrays. ``to_dict`` is the stored form, the header's
    ``meta``: the first four keys always, each other one only where the fit set it (not None; for
    ``n_failed``, not 0). ``from_dict`` reads any stored form, a missing key as its default."""

    device: str = "cpu"  # where the surrogate trained: cpu | cuda
    rank_p: float | None = None  # the warm-up's rank test p-value (fit._rank_p); None: no fold models
    crowd: dict[str, Any] = field(default_factory=dict)  # crowd.fit_info: GP kernels or a Lipschitz constant
    fit: FitKind = field(default_factory=FitKind)  # full refit, update or extend, and why
    tuned: dict[str, Any] | None = None  # Tuned.to_dict, what the next fit keeps; None: nothing to keep
    warp: dict[str, Any] | None = None  # the objective's output warp (Warp.to_dict); None: identity
    n_feasible: int | None = None  # feasible observations; None: no constraints
    n_failed: int = 0  # failed configurations the fit learned from
    directions: list[str] | None = None  # several objectives' directions; None: one objective
    device_fallback: str | None = None  # why a CUDA fit was refitted on the CPU
    # what an extend of this snapshot needs beside its arrays (engine.extend): the observations at
    # the candidates' last draw (``drawn_at``) and, for split, the training rows (``train``)
    carry: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": self.device, "rank_p": self.rank_p, "crowd": self.crowd,
                               "fit": self.fit.to_dict()}
        if self.tuned is not None:
            out["tuned"] = self.tuned
        if self.warp is not None:
            out["warp"] = self.warp
        if self.n_feasible is not None:
            out["n_feasible"] = self.n_feasible
        if self.n_failed:
            out["n_failed"] = self.n_failed
        if self.directions is not None:
            out["directions"] = self.directions
        if self.device_fallback is not None:
            out["device_fallback"] = self.device_fallback
        if self.carry is not None:
            out["carry"] = self.carry
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SnapshotMeta:
        if not isinstance(d, dict):
            raise ValueError("the header's meta is not an object")
        return cls(device=d.get("device", "cpu"), rank_p=d.get("rank_p"), crowd=d.get("crowd") or {},
                   fit=FitKind.from_dict(d.get("fit")), tuned=d.get("tuned"), warp=d.get("warp"),
                   n_feasible=d.get("n_feasible"), n_failed=d.get("n_failed", 0), directions=d.get("directions"),
                   device_fallback=d.get("device_fallback"), carry=d.get("carry"))


@dataclass
class Snapshot:
    n_obs: int  # observations the surrogate was fitted on
    method: str  # raw | split | cv+
    levels: np.ndarray  # (L,)
    candidates: np.ndarray  # (N, dim) snapped unit rows
    raw: np.ndarray  # (N, L) raw quantiles of the shown model
    best: float  # best observed value (minimise orientation)
    observed: np.ndarray  # (n, dim) unit rows the fit saw
    scores: np.ndarray | None = None  # (n_cal, P)
    fold_raw: np.ndarray | None = None  # (K, N, L), CV+
    fold_of: np.ndarray | None = None  # (n_cal,), CV+
    # (N,) the scores' multiplier at each candidate: a scaled surrogate's spread (its scores are
    # normalised by it), or for a refitted split the shown model's spread over the split model's
    # (conformal.ConformalFit.transport)
    scale: np.ndarray | None = None
    fold_scale: np.ndarray | None = None  # (K, N), CV+ of a scaled surrogate
    # (N,) the share of each candidate's predictive spread that is the objective's own, not
    # observation noise (surrogate.predict_signal_fraction): what the improvement acquisitions
    # narrow the calibrated quantiles by; None: not narrowed (a snapshot without it)
    signal: np.ndarray | None = None
    surrogate: str = ""
    fit_seconds: float = 0.0
    meta: SnapshotMeta = field(default_factory=SnapshotMeta)
    heads: list[Head] = field(default_factory=list)  # constraints / further objectives, same candidates
    # several objectives: every observation's objectives (n, m; minimise orientation, warped) and
    # whether it was feasible (n,): the Pareto front and reference point of the multi-objective select
    observed_y: np.ndarray | None = None
    observed_ok: np.ndarray | None = None
    # (N,) log probability that each candidate runs (engine.failures), -inf where it repeats a failure
    success: np.ndarray | None = None
    # (N,) a GP's predictive sd (standardised target) at each candidate, and the split model's: what
    # an extend (engine.extend) updates instead of computing the posterior at every candidate again
    gp_sd: np.ndarray | None = None
    gp_scored_sd: np.ndarray | None = None
    gp_fold_sd: np.ndarray | None = None  # (K, N) CV+'s fold models'
    _bounds: Bounds | None = field(default=None, init=False, repr=False, compare=False)
    _keys: list[bytes] | None = field(default=None, init=False, repr=False, compare=False)
    cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)  # select's

    def __repr__(self) -> str:
        return reprs.build(self, ("n_obs", str(self.n_obs)), ("method", repr(self.method)),
                           ("surrogate", repr(self.surrogate)), ("candidates", str(tuple(self.candidates.shape))),
                           ("heads", str(len(self.heads)) if self.heads else None),
                           ("fit_seconds", reprs.value(self.fit_seconds)))

    def candidate_keys(self) -> list[bytes]:
        """``SearchSpace.keys`` of the candidates, computed once per snapshot."""
        if self._keys is None:
            self._keys = SearchSpace.keys(self.candidates)
        return self._keys

    @property
    def bounds(self) -> Bounds:
        if self._bounds is None:
            self._bounds = Bounds(self.method, self.raw, self.scores, self.fold_raw, self.fold_of,
                                  self.scale, self.fold_scale)
        return self._bounds

    # ----------------------------------------------------------- (de)serialise
    def to_bytes(self) -> bytes:
        """Compact binary form (npz: float32 quantiles, JSON header) for storage."""
        arrays = {}
        for name in _ARRAYS:
            a = getattr(self, name)
            if a is None:
                continue
            if name in _FLOAT32:
                a = a.astype(np.float32)
            arrays[name] = a
        for i, h in enumerate(self.heads):
            for name in _HEAD_ARRAYS:
                a = getattr(h, name)
                if a is not None:
                    arrays[f"h{i}_{name}"] = a.astype(np.float32) if name in _FLOAT32 else a
        header = {
            "format": FORMAT_VERSION,
            "n_obs": self.n_obs,
            "method": self.method,
            "best": self.best,
            "surrogate": self.surrogate,
            "fit_seconds": self.fit_seconds,
            "meta": self.meta.to_dict(),
        }
        if self.heads:
            header["heads"] = [{"kind": h.kind, "threshold": h.threshold, "best": h.best, "sign": h.sign,
                                "warp": h.warp} for h in self.heads]
        buf = io.BytesIO()
        # not compressed: float32 predictions shrink by about a tenth under zlib, which took 10-20 ms
        # of every fit (a snapshot of 2000 candidates, CV+'s five fold models: 545 KB instead of 477 KB)
        np.savez(buf, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Snapshot:
        """Inverse of ``to_bytes``; any damage (truncation, junk, missing parts) is a ValueError."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                if not hasattr(z, "files"):
                    raise ValueError("a bare array, not a snapshot archive")
                header = json.loads(bytes(z["header"]).decode())
                arrays = {name: z[name] for name in _ARRAYS if name in z.files}
                heads = []
                for i, h in enumerate(header.get("heads") or []):
                    parts = {name: z[f"h{i}_{name}"] for name in _HEAD_ARRAYS if f"h{i}_{name}" in z.files}
                    for name in _FLOAT32:
                        if name in parts:
                            parts[name] = parts[name].astype(np.float64)
                    heads.append(Head(kind=str(h["kind"]), threshold=float(h["threshold"]),
                                      best=float(h["best"]), sign=float(h.get("sign", 1.0)),
                                      warp=h.get("warp"), **parts))
            if not isinstance(header, dict):
                raise ValueError("the header is not an object")
            if header.get("format") != FORMAT_VERSION:
                raise ValueError(f"unsupported snapshot format {header.get('format')!r}")
            for name in _FLOAT32:
                if name in arrays:
                    arrays[name] = arrays[name].astype(np.float64)
            return cls(
                n_obs=int(header["n_obs"]),
                method=str(header["method"]),
                best=float(header["best"]),
                surrogate=header.get("surrogate", ""),
                fit_seconds=header.get("fit_seconds", 0.0),
                meta=SnapshotMeta.from_dict(header.get("meta", {})),
                levels=arrays["levels"],
                candidates=arrays["candidates"],
                raw=arrays["raw"],
                observed=arrays["observed"],
                scores=arrays.get("scores"),
                fold_raw=arrays.get("fold_raw"),
                fold_of=arrays.get("fold_of"),
                scale=arrays.get("scale"),
                fold_scale=arrays.get("fold_scale"),
                signal=arrays.get("signal"),
                heads=heads,
                observed_y=arrays.get("observed_y"),
                observed_ok=arrays.get("observed_ok"),
                success=arrays.get("success"),
                gp_sd=arrays.get("gp_sd"),
                gp_scored_sd=arrays.get("gp_scored_sd"),
                gp_fold_sd=arrays.get("gp_fold_sd"),
            )
        except ValueError as e:
            raise ValueError(f"not a calibo snapshot: {e}") from e
        except (OSError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"not a calibo snapshot: {type(e).__name__}: {e}") from e
