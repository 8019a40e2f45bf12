"""Search spaces: parameter types, encode/decode, sampling, mutation, validation.

Three representations of a configuration:

* **params** - the user's dict, ``{"lr": 0.01, "depth": 6, "booster": "gbtree"}``.
* **unit** - one coordinate per parameter in ``[0, 1]`` (log-scaled where asked;
  categoricals and ordinals by the centre of their choice's bin). Sampling and
  mutation happen here; a unit row is always *snapped*, i.e. it is exactly the
  unit image of a valid configuration, so two rows are equal iff the
  configurations are.
* **features** - the model matrix: numeric and ordinal parameters as their unit
  coordinate, categoricals one-hot.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import qmc

from .errors import ParamError, SpaceError
from .limits import (
    MAX_CHOICE_TEXT,
    MAX_CHOICES,
    MAX_FEATURES,
    MAX_PARAM_NAME,
    MAX_PARAMS,
    check_text,
)

PARAM_TYPES = ("float", "int", "categorical", "ordinal")
__all__ = ["PARAM_TYPES", "Param", "ParamError", "SearchSpace", "SpaceError"]


# Float coordinates of the unit cube live on a grid of 2**-30: every grid point is
# exact in binary floating point, and decode -> encode lands within far less than
# half a step of where it started, so snapping is idempotent bit for bit and a
# configuration has exactly one unit row (its key) however often it travels.
UNIT_GRID = float(2**30)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _as_float(x: Any) -> float | None:
    """``float(x)`` for a finite number, else None (NaN, infinity, ints beyond a double)."""
    if not _is_number(x):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    # ----------------------------------------------------------------- build
    @classmethod
    def from_dict(cls, name: str, d: Any) -> Param:
        if not isinstance(name, str) or not name:
            raise SpaceError("space", "parameter names must be non-empty strings")
        check_text(name, "space", MAX_PARAM_NAME, error=SpaceError)
        where = f"space.{name}"
        if not isinstance(d, dict):
            raise SpaceError(where, "must be an object with a 'type'")
        unknown = set(d) - {"type", "low", "high", "log", "choices"}
        if unknown:
            raise SpaceError(f"{where}.{sorted(unknown)[0]}", "unknown key")
        kind = d.get("type")
        if kind not in PARAM_TYPES:
            raise SpaceError(f"{where}.type", f"must be one of {', '.join(PARAM_TYPES)}")
        if kind in ("float", "int"):
            if "choices" in d:
                raise SpaceError(f"{where}.choices", f"not allowed for type {kind}")
            low, high, log = d.get("low"), d.get("high"), d.get("log", False)
            for key, v in (("low", low), ("high", high)):
                f = _as_float(v)
                if f is None:
                    raise SpaceError(f"{where}.{key}", "must be a finite number")
                if kind == "int" and f != int(v):
                    raise SpaceError(f"{where}.{key}", "must be an integer for type int")
            if not isinstance(log, bool):
                raise SpaceError(f"{where}.log", "must be true or false")
            if not float(low) < float(high):
                raise SpaceError(f"{where}.low", "low must be strictly less than high")
            if log and float(low) <= 0:
                raise SpaceError(f"{where}.low", "log scale needs low > 0")
            if not math.isfinite(float(high) - float(low)):
                raise SpaceError(f"{where}.high", "the range high - low must be a finite number")
            if kind == "int":
                return cls(name, kind, int(low), int(high), log)
            return cls(name, kind, float(low), float(high), log)
        # categorical / ordinal
        for key in ("low", "high", "log"):
            if key in d:
                raise SpaceError(f"{where}.{key}", f"not allowed for type {kind}")
        choices = d.get("choices")
        if not isinstance(choices, (list, tuple)) or len(choices) == 0:
            raise SpaceError(f"{where}.choices", "must be a non-empty list")
        if len(choices) > MAX_CHOICES:
            raise SpaceError(f"{where}.choices", f"at most {MAX_CHOICES} choices (got {len(choices)})")
        for c in choices:
            if isinstance(c, str):
                check_text(c, f"{where}.choices", MAX_CHOICE_TEXT, allow_empty=True, error=SpaceError)
            if not (isinstance(c, (str, bool)) or c is None or _is_number(c)):
                raise SpaceError(f"{where}.choices", "choices must be strings, numbers, booleans or null")
            if _is_number(c) and _as_float(c) is None:
                raise SpaceError(f"{where}.choices", "numeric choices must be finite")
        if len({_choice_key(c) for c in choices}) != len(choices):
            raise SpaceError(f"{where}.choices", "choices must be distinct")
        return cls(name, kind, choices=tuple(choices))

    def to_dict(self) -> dict[str, Any]:
        if self.type in ("float", "int"):
            return {"type": self.type, "low": self.low, "high": self.high, "log": self.log}
        return {"type": self.type, "choices": list(self.choices)}

    # ------------------------------------------------------------- transforms
    @property
    def n_features(self) -> int:
        return len(self.choices) if self.type == "categorical" else 1

    def _bounds(self) -> tuple[float, float]:
        """The continuous interval the unit coordinate is mapped onto."""
        lo, hi = float(self.low), float(self.high)  # type: ignore[arg-type]
        if self.type == "int":
            lo, hi = lo - 0.5, hi + 0.5  # each integer owns a bin of equal width
        if self.log:
            return math.log(lo), math.log(hi)
        return lo, hi

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        """Unit coordinates -> values (floats; indices for categorical/ordinal)."""
        u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
        if self.type in ("categorical", "ordinal"):
            k = len(self.choices)
            return np.minimum((u * k).astype(int), k - 1).astype(float)
        lo, hi = self._bounds()
        v = lo + u * (hi - lo)
        if self.log:
            v = np.exp(v)
        if self.type == "int":
            v = np.clip(np.round(v), self.low, self.high)
        else:
            v = np.clip(v, self.low, self.high)
        return v

    def to_unit(self, v: np.ndarray) -> np.ndarray:
        """Values (or choice indices) -> snapped unit coordinates."""
        v = np.asarray(v, dtype=float)
        if self.type in ("categorical", "ordinal"):
            return (v + 0.5) / len(self.choices)
        lo, hi = self._bounds()
        x = np.log(v) if self.log else v
        u = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
        if self.type == "float":
            u = np.round(u * UNIT_GRID) / UNIT_GRID
        return u

    def snap(self, u: np.ndarray) -> np.ndarray:
        return self.to_unit(self.from_unit(u))

    # ------------------------------------------------------------- validation
    def validate(self, value: Any) -> Any:
        """Return the canonical value, or raise ParamError naming this parameter."""
        if self.type in ("categorical", "ordinal"):
            return self.choices[self.index_of(value)]
        if not _is_number(value):
            raise ParamError(self.name, f"expected a number, got {type(value).__name__}")
        x = _as_float(value)
        if x is None:
            raise ParamError(self.name, "must be a finite number")
        if self.type == "int":
            if x != round(x):
                raise ParamError(self.name, f"expected an integer, got {value!r}")
            x = int(round(x))
        if x < self.low or x > self.high:  # type: ignore[operator]
            raise ParamError(self.name, f"{value!r} is outside [{self.low}, {self.high}]")
        return x

    def index_of(self, value: Any) -> int:
        key = _choice_key(value)
        if key is not None:
            for i, c in enumerate(self.choices):
                if _choice_key(c) == key:
                    return i
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ParamError(self.name, f"{shown} is not one of {list(self.choices)!r}")


def _choice_key(c: Any) -> tuple[str, Any] | None:
    """A choice's identity: True and 1 apart, 1 and 1.0 together; None for non-choices."""
    if isinstance(c, bool) or c is None:
        return ("const", c)
    if _is_number(c):
        f = _as_float(c)
        return None if f is None else ("num", f)
    if isinstance(c, str):
        return ("str", c)
    return None


@dataclass(frozen=True)
class SearchSpace:
    """A study's parameters: build one with ``SearchSpace.from_dict({"lr": {"type": "float",
    "low": 1e-4, "high": 0.1, "log": True}, ...})``; ``validate`` checks a configuration,
    ``to_unit`` / ``from_unit`` / ``features`` are the engine's encodings (module docstring)."""

    params: tuple[Param, ...]
    _feature_slices: tuple[slice, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        slices, start = [], 0
        for p in self.params:
            slices.append(slice(start, start + p.n_features))
            start += p.n_features
        object.__setattr__(self, "_feature_slices", tuple(slices))

    @classmethod
    def from_dict(cls, d: Any) -> SearchSpace:
        if isinstance(d, SearchSpace):
            return d
        if not isinstance(d, dict) or not d:
            raise SpaceError("space", "must be a non-empty object of parameters")
        if len(d) > MAX_PARAMS:
            raise SpaceError("space", f"at most {MAX_PARAMS} parameters (got {len(d)})")
        space = cls(tuple(Param.from_dict(name, spec) for name, spec in d.items()))
        if space.n_features > MAX_FEATURES:
            raise SpaceError("space", f"at most {MAX_FEATURES} encoded features: numeric parameters plus "
                                      f"every categorical choice (got {space.n_features})")
        return space

    def to_dict(self) -> dict[str, Any]:
        return {p.name: p.to_dict() for p in self.params}

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def dim(self) -> int:
        """Number of parameters (columns of a unit matrix)."""
        return len(self.params)

    @property
    def n_features(self) -> int:
        return sum(p.n_features for p in self.params)

    @property
    def size(self) -> int | None:
        """How many distinct configurations there are; None when a float makes it unbounded."""
        n = 1
        for p in self.params:
            if p.type == "float":
                return None
            n *= len(p.choices) if p.type in ("categorical", "ordinal") else int(p.high) - int(p.low) + 1
        return n

    # ----------------------------------------------------------- validation
    def validate(self, params: Any) -> dict[str, Any]:
        """Check a told configuration; return it canonicalised (ints as int...)."""
        if not isinstance(params, dict):
            raise ParamError("params", "must be an object mapping parameter names to values")
        unknown = [k for k in params if k not in self.names]
        if unknown:
            raise ParamError(str(unknown[0]), "unknown parameter")
        out = {}
        for p in self.params:
            if p.name not in params:
                raise ParamError(p.name, "missing")
            out[p.name] = p.validate(params[p.name])
        return out

    # -------------------------------------------------------- representations
    def to_unit(self, configs: list[dict[str, Any]]) -> np.ndarray:
        """Validated configurations -> snapped unit matrix (n, dim)."""
        u = np.empty((len(configs), self.dim))
        for j, p in enumerate(self.params):
            if p.type in ("categorical", "ordinal"):
                vals = [p.index_of(c[p.name]) for c in configs]
            else:
                vals = [c[p.name] for c in configs]
            u[:, j] = p.to_unit(np.asarray(vals, dtype=float))
        return u

    def from_unit(self, u: np.ndarray) -> list[dict[str, Any]]:
        u = np.atleast_2d(u)
        cols = []
        for j, p in enumerate(self.params):
            v = p.from_unit(u[:, j])
            if p.type in ("categorical", "ordinal"):
                cols.append([p.choices[int(i)] for i in v])
            elif p.type == "int":
                cols.append([int(x) for x in v])
            else:
                cols.append([float(x) for x in v])
        return [dict(zip(self.names, row, strict=True)) for row in zip(*cols, strict=True)]

    def snap(self, u: np.ndarray) -> np.ndarray:
        u = np.atleast_2d(np.asarray(u, dtype=float))
        out = np.empty_like(u)
        for j, p in enumerate(self.params):
            out[:, j] = p.snap(u[:, j])
        return out

    def features(self, u: np.ndarray) -> np.ndarray:
        """Snapped unit matrix -> model features (n, n_features)."""
        u = np.atleast_2d(u)
        x = np.zeros((u.shape[0], self.n_features))
        for j, (p, sl) in enumerate(zip(self.params, self._feature_slices, strict=True)):
            if p.type == "categorical":
                idx = p.from_unit(u[:, j]).astype(int)
                x[np.arange(u.shape[0]), sl.start + idx] = 1.0
            else:
                x[:, sl.start] = u[:, j]
        return x

    def encode(self, configs: list[dict[str, Any]]) -> np.ndarray:
        return self.features(self.to_unit(configs))

    @staticmethod
    def keys(u: np.ndarray) -> list[bytes]:
        """Hashable identity of snapped unit rows (equal iff same configuration).

        Snapping is exact (see ``UNIT_GRID``), so the bytes of the row are the key.
        """
        r = np.ascontiguousarray(np.atleast_2d(u), dtype=np.float64) + 0.0  # folds -0.0 into 0.0
        return [row.tobytes() for row in r]

    def key(self, params: dict[str, Any]) -> bytes:
        """The key of one validated configuration (see ``keys``)."""
        return self.keys(self.to_unit([params]))[0]

    # --------------------------------------------------------------- sampling
    def sample(self, n: int, seed: int | np.random.Generator, *, skip: int = 0) -> np.ndarray:
        """``n`` scrambled-Sobol points (snapped unit rows), after ``skip`` earlier draws.

        The same (seed, skip + n) gives the same prefix, so a warm start can be
        drawn one point at a time and stay one low-discrepancy sequence.
        """
        if n <= 0:
            return np.empty((0, self.dim))
        sampler = qmc.Sobol(self.dim, scramble=True, seed=seed)
        if skip:
            sampler.fast_forward(skip)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # balance needs powers of two; prefixes are fine
            return self.snap(sampler.random(n))

    def sample_uniform(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.snap(rng.random((n, self.dim)))

    def mutate(
        self,
        parents: np.ndarray,
        n: int,
        rng: np.random.Generator,
        *,
        scale: float = 0.1,
    ) -> np.ndarray:
        """``n`` mutations of snapped unit rows ``parents`` (chosen round-robin).

        Numeric and ordinal coordinates move by Gaussian noise of sd ``scale``
        (reflected into [0, 1]); a categorical switches to another choice.
        Each coordinate mutates with probability 1/2, and at least one does.
        """
        parents = np.atleast_2d(parents)
        if n <= 0 or parents.shape[0] == 0:
            return np.empty((0, self.dim))
        base = parents[np.arange(n) % parents.shape[0]]
        child = base.copy()
        mask = rng.random(child.shape) < 0.5
        none = ~mask.any(axis=1)
        mask[none, rng.integers(0, self.dim, none.sum())] = True
        for j, p in enumerate(self.params):
            m = mask[:, j]
            if p.type == "categorical":
                k = len(p.choices)
                if k < 2:
                    continue
                cur = p.from_unit(child[m, j]).astype(int)
                child[m, j] = p.to_unit((cur + rng.integers(1, k, m.sum())) % k)
            else:
                x = child[m, j] + rng.normal(0.0, scale, m.sum())
                x = np.abs(x)
                x = 1.0 - np.abs(1.0 - x)  # reflect into [0, 1]
                child[m, j] = np.clip(x, 0.0, 1.0)
        return self.snap(child)
