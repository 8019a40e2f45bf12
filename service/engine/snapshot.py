"""The Snapshot: everything ``fit`` produced that ``select`` needs, and its bytes.

A snapshot holds the candidate set (snapped unit rows), every candidate's raw
quantiles on the study's level grid (and, for CV+, each fold model's), the
calibration scores, and the best observed value. From these ``select`` can
build calibrated quantiles at *any* alpha without touching a model.
All values are in the engine's minimise orientation. With ``shift="fcs"`` a
split-rule snapshot also holds the covariate-shift weights of its calibration
points and candidates (``engine.shift``); snapshots written without them load
as unweighted.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .conformal import Bounds
from .space import SearchSpace

FORMAT_VERSION = 1
_ARRAYS = ("levels", "candidates", "raw", "scores", "fold_raw", "fold_of", "observed", "scale",
           "fold_scale", "cal_weight", "cand_weight")
_FLOAT32 = ("raw", "fold_raw", "scale", "fold_scale")  # per-candidate model outputs


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
    scale: np.ndarray | None = None  # (N,) spread of a scaled surrogate (scores are normalised by it)
    fold_scale: np.ndarray | None = None  # (K, N), CV+ of a scaled surrogate
    cal_weight: np.ndarray | None = None  # (n_cal,) FCS weight of each score's point (engine.shift)
    cand_weight: np.ndarray | None = None  # (N,) FCS weight of each candidate
    surrogate: str = ""
    fit_seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    _bounds: Bounds | None = field(default=None, init=False, repr=False, compare=False)
    _keys: list[bytes] | None = field(default=None, init=False, repr=False, compare=False)
    cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)  # select's

    def candidate_keys(self) -> list[bytes]:
        """``SearchSpace.keys`` of the candidates, computed once per snapshot."""
        if self._keys is None:
            self._keys = SearchSpace.keys(self.candidates)
        return self._keys

    @property
    def bounds(self) -> Bounds:
        if self._bounds is None:
            self._bounds = Bounds(self.method, self.raw, self.scores, self.fold_raw, self.fold_of,
                                  self.scale, self.fold_scale, self.cal_weight, self.cand_weight)
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
        header = {
            "format": FORMAT_VERSION,
            "n_obs": self.n_obs,
            "method": self.method,
            "best": self.best,
            "surrogate": self.surrogate,
            "fit_seconds": self.fit_seconds,
            "meta": self.meta,
        }
        buf = io.BytesIO()
        np.savez_compressed(buf, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **arrays)
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
                meta=header.get("meta", {}),
                levels=arrays["levels"],
                candidates=arrays["candidates"],
                raw=arrays["raw"],
                observed=arrays["observed"],
                scores=arrays.get("scores"),
                fold_raw=arrays.get("fold_raw"),
                fold_of=arrays.get("fold_of"),
                scale=arrays.get("scale"),
                fold_scale=arrays.get("fold_scale"),
                cal_weight=arrays.get("cal_weight"),
                cand_weight=arrays.get("cand_weight"),
            )
        except ValueError as e:
            raise ValueError(f"not a calibo snapshot: {e}") from e
        except (OSError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"not a calibo snapshot: {type(e).__name__}: {e}") from e
