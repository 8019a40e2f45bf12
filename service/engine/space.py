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

Conditional parameters. A parameter may carry ``"condition": {"parent": "kernel",
"values": ["rbf", "poly"]}``: it is *active* when its parent is active and takes one
of those values (a categorical, ordinal or int parent; chains nest; a cycle is
refused). A configuration holds exactly its active parameters. In the unit
representation an inactive parameter's coordinate is ``INACTIVE`` (-1, outside the
cube), so a configuration still has exactly one row and one key, and configurations
that differ only in parameters they do not use are the same. The surrogate does not
see an inactive parameter as if a value had been drawn for it (as SMAC's imputation
and ConfigSpace's inactive values do not): an inactive categorical is all zeros in
its one-hot block, and a numeric or ordinal conditional parameter has two features,
its coordinate (the centre of the range when inactive) and an activity indicator, so
configurations that both lack it are equal there and one that has it differs from
one that lacks it by the same amount whatever its value. Sampling, mutation and
the fit-time local search draw every coordinate and then apply the conditions; a
parameter that a mutation activates gets a fresh draw.
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
PARENT_TYPES = ("categorical", "ordinal", "int")  # what a condition may test
INACTIVE = -1.0  # the unit coordinate of a parameter its conditions switch off
__all__ = ["INACTIVE", "PARAM_TYPES", "Param", "ParamError", "SearchSpace", "SpaceError"]


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
    condition: tuple[str, tuple[Any, ...]] | None = None  # (parent name, values that activate it)

    # ----------------------------------------------------------------- build
    @classmethod
    def from_dict(cls, name: str, d: Any) -> Param:
        if not isinstance(name, str) or not name:
            raise SpaceError("space", "parameter names must be non-empty strings")
        check_text(name, "space", MAX_PARAM_NAME, error=SpaceError)
        where = f"space.{name}"
        if not isinstance(d, dict):
            raise SpaceError(where, "must be an object with a 'type'")
        unknown = set(d) - {"type", "low", "high", "log", "choices", "condition"}
        if unknown:
            raise SpaceError(f"{where}.{sorted(unknown)[0]}", "unknown key")
        condition = _condition(d.get("condition"), where) if "condition" in d else None
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
                return cls(name, kind, int(low), int(high), log, condition=condition)
            return cls(name, kind, float(low), float(high), log, condition=condition)
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
        return cls(name, kind, choices=tuple(choices), condition=condition)

    def to_dict(self) -> dict[str, Any]:
        if self.type in ("float", "int"):
            out: dict[str, Any] = {"type": self.type, "low": self.low, "high": self.high, "log": self.log}
        else:
            out = {"type": self.type, "choices": list(self.choices)}
        if self.condition is not None:
            out["condition"] = {"parent": self.condition[0], "values": list(self.condition[1])}
        return out

    # ------------------------------------------------------------- transforms
    @property
    def n_features(self) -> int:
        """Model columns: a categorical's one-hot block; a number's coordinate (and, when it is
        conditional, its activity indicator)."""
        if self.type == "categorical":
            return len(self.choices)
        return 2 if self.condition is not None else 1

    def decoded(self, u: np.ndarray) -> np.ndarray:
        """What a condition on this parameter compares: choice indices, or integer values."""
        return self.from_unit(u)

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


def _condition(c: Any, where: str) -> tuple[str, tuple[Any, ...]]:
    """A condition's (parent, values) as written; the values are checked against the parent later."""
    at = f"{where}.condition"
    if not isinstance(c, dict):
        raise SpaceError(at, "must be an object with 'parent' and 'values'")
    unknown = set(c) - {"parent", "values"}
    if unknown:
        raise SpaceError(f"{at}.{sorted(unknown)[0]}", "unknown key")
    parent, values = c.get("parent"), c.get("values")
    if not isinstance(parent, str) or not parent:
        raise SpaceError(f"{at}.parent", "must be the name of another parameter")
    if not isinstance(values, (list, tuple)) or not values:
        raise SpaceError(f"{at}.values", "must be a non-empty list of the parent's values")
    if len(values) > MAX_CHOICES:
        raise SpaceError(f"{at}.values", f"at most {MAX_CHOICES} values (got {len(values)})")
    return parent, tuple(values)


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
    # per conditional parameter, in an order where parents come first: (column, parent column,
    # the parent's decoded values that activate it)
    _conditions: tuple[tuple[int, int, frozenset], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        slices, start = [], 0
        for p in self.params:
            slices.append(slice(start, start + p.n_features))
            start += p.n_features
        object.__setattr__(self, "_feature_slices", tuple(slices))
        object.__setattr__(self, "_conditions", self._resolve_conditions())

    def _resolve_conditions(self) -> tuple[tuple[int, int, frozenset], ...]:
        index = {p.name: j for j, p in enumerate(self.params)}
        rules: dict[int, tuple[int, frozenset]] = {}
        for j, p in enumerate(self.params):
            if p.condition is None:
                continue
            parent_name, values = p.condition
            where = f"space.{p.name}.condition"
            if parent_name not in index:
                raise SpaceError(f"{where}.parent", f"{parent_name!r} is not a parameter of the space")
            if parent_name == p.name:
                raise SpaceError(f"{where}.parent", "a parameter cannot be its own parent")
            parent = self.params[index[parent_name]]
            if parent.type not in PARENT_TYPES:
                raise SpaceError(f"{where}.parent", f"a condition tests a {', '.join(PARENT_TYPES)} parameter, "
                                                    f"not {parent.type} {parent_name!r}")
            decoded = set()
            for v in values:
                try:
                    canon = parent.validate(v)
                except ParamError as e:
                    raise SpaceError(f"{where}.values", f"{v!r} is not a value of {parent_name!r}: "
                                                        f"{e.message}") from None
                decoded.add(parent.index_of(canon) if parent.type != "int" else int(canon))
            rules[j] = (index[parent_name], frozenset(decoded))
        order, state = [], {}

        def visit(j: int, path: list[int]) -> None:
            if state.get(j) == "done":
                return
            if state.get(j) == "open":
                names = " -> ".join(self.params[k].name for k in [*path, j])
                raise SpaceError(f"space.{self.params[j].name}.condition", f"conditions form a cycle: {names}")
            state[j] = "open"
            if j in rules:
                visit(rules[j][0], [*path, j])
                order.append((j, *rules[j]))
            state[j] = "done"

        for j in rules:
            visit(j, [])
        return tuple(order)

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
    def conditional(self) -> bool:
        return bool(self._conditions)

    @property
    def size(self) -> int | None:
        """How many distinct configurations there are (an upper bound when parameters are conditional);
        None when a float makes it unbounded."""
        n = 1
        for p in self.params:
            if p.type == "float":
                return None
            n *= len(p.choices) if p.type in ("categorical", "ordinal") else int(p.high) - int(p.low) + 1
        return n

    # ------------------------------------------------------------ conditions
    def active_mask(self, u: np.ndarray) -> np.ndarray:
        """(n, dim) whether each parameter is active in each (snapped) unit row."""
        u = np.atleast_2d(u)
        active = np.ones(u.shape, dtype=bool)
        for j, parent, values in self._conditions:
            on = active[:, parent] & np.isin(self.params[parent].decoded(u[:, parent]), list(values))
            active[:, j] = on
        return active

    def _apply_conditions(self, u: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """Inactive coordinates set to INACTIVE; a parameter switched on that has none gets a draw
        (from ``rng``) or the centre of its range. ``u`` holds snapped coordinates or INACTIVE."""
        if not self._conditions:
            return u
        u = u.copy()
        for j, parent, values in self._conditions:
            p_on = u[:, parent] >= 0
            on = p_on & np.isin(self.params[parent].decoded(np.clip(u[:, parent], 0.0, 1.0)), list(values))
            u[~on, j] = INACTIVE
            fill = on & (u[:, j] < 0)
            if fill.any():
                fresh = rng.random(int(fill.sum())) if rng is not None else np.full(int(fill.sum()), 0.5)
                u[fill, j] = self.params[j].snap(fresh)
        return u

    # ----------------------------------------------------------- validation
    def validate(self, params: Any) -> dict[str, Any]:
        """Check a told configuration; return it canonicalised (ints as int...)."""
        if not isinstance(params, dict):
            raise ParamError("params", "must be an object mapping parameter names to values")
        unknown = [k for k in params if k not in self.names]
        if unknown:
            raise ParamError(str(unknown[0]), "unknown parameter")
        out: dict[str, Any] = {}
        inactive: dict[str, str] = {}
        for p in self._validation_order():
            if p.condition is not None:
                parent, values = p.condition
                if parent in inactive:
                    inactive[p.name] = f"its parent {parent!r} is inactive"
                elif not any(_choice_key(out[parent]) == _choice_key(v) for v in values):
                    inactive[p.name] = f"it is active only when {parent!r} is one of {list(values)!r}"
            if p.name in inactive:
                if p.name in params:
                    raise ParamError(p.name, f"inactive parameter: {inactive[p.name]}")
                continue
            if p.name not in params:
                raise ParamError(p.name, "missing")
            out[p.name] = p.validate(params[p.name])
        return {p.name: out[p.name] for p in self.params if p.name in out}

    def complete(self, params: dict[str, Any]) -> bool:
        """Whether a validated (partial) configuration holds every parameter it makes active."""
        return set(self.active_names(params)) <= set(params)

    def validate_partial(self, params: Any) -> dict[str, Any]:
        """Some of a configuration (an enqueued one): known parameters with valid values; a parameter
        given must be active under the values given for its parents (when they are given)."""
        if not isinstance(params, dict):
            raise ParamError("params", "must be an object mapping parameter names to values")
        by_name = {p.name: p for p in self.params}
        out: dict[str, Any] = {}
        for k, v in params.items():
            if k not in by_name:
                raise ParamError(str(k), "unknown parameter")
            out[k] = by_name[k].validate(v)
        for p in self._validation_order():
            if p.name in out and p.condition is not None:
                parent, values = p.condition
                if parent in out and not any(_choice_key(out[parent]) == _choice_key(v) for v in values):
                    raise ParamError(p.name, f"inactive parameter: it is active only when {parent!r} is one "
                                             f"of {list(values)!r}")
        if self.complete(out):
            return self.validate(out)
        return {p.name: out[p.name] for p in self.params if p.name in out}

    def fill(self, fixed: dict[str, Any], donor: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """``fixed`` completed into a valid configuration: each active parameter it lacks from ``donor``
        (a chosen configuration) when the donor has it, else a uniform draw."""
        out = dict(fixed)
        while missing := [n for n in self.active_names(out) if n not in out]:
            for name in missing:
                if name in donor:
                    out[name] = donor[name]
                else:
                    p = self.params[self.names.index(name)]
                    v = p.from_unit(rng.random(1))[0]
                    out[name] = (p.choices[int(v)] if p.type in ("categorical", "ordinal")
                                 else int(v) if p.type == "int" else float(v))
        return self.validate(out)

    def _validation_order(self) -> list[Param]:
        """The parameters, each after its parent."""
        if not self._conditions:
            return list(self.params)
        conditional = [j for j, _, _ in self._conditions]
        first = [p for j, p in enumerate(self.params) if j not in conditional]
        return first + [self.params[j] for j in conditional]

    def active_names(self, params: dict[str, Any]) -> list[str]:
        """The parameters active in a (possibly partial) configuration, as far as it decides them."""
        out = []
        present = {}
        for p in self._validation_order():
            if p.condition is not None:
                parent, values = p.condition
                if parent not in present or not any(_choice_key(present[parent]) == _choice_key(v) for v in values):
                    continue
            out.append(p.name)
            if p.name in params:
                present[p.name] = params[p.name]
        return [n for n in self.names if n in out]

    # -------------------------------------------------------- representations
    def to_unit(self, configs: list[dict[str, Any]]) -> np.ndarray:
        """Validated configurations -> snapped unit matrix (n, dim); an absent (inactive) parameter
        is ``INACTIVE``."""
        u = np.full((len(configs), self.dim), INACTIVE)
        for j, p in enumerate(self.params):
            rows = [i for i, c in enumerate(configs) if p.name in c] if p.condition is not None else None
            if rows is None:
                vals = [p.index_of(c[p.name]) if p.type in ("categorical", "ordinal") else c[p.name]
                        for c in configs]
                u[:, j] = p.to_unit(np.asarray(vals, dtype=float))
            elif rows:
                vals = [p.index_of(configs[i][p.name]) if p.type in ("categorical", "ordinal") else configs[i][p.name]
                        for i in rows]
                u[rows, j] = p.to_unit(np.asarray(vals, dtype=float))
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
        if not self._conditions:
            return [dict(zip(self.names, row, strict=True)) for row in zip(*cols, strict=True)]
        on = u >= 0
        return [{n: col[i] for j, (n, col) in enumerate(zip(self.names, cols, strict=True)) if on[i, j]}
                for i in range(u.shape[0])]

    def snap(self, u: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """Rows moved onto valid configurations: every active coordinate onto its grid, every inactive
        one to INACTIVE (``rng`` draws a parameter the row switches on without a value; else its centre)."""
        u = np.atleast_2d(np.asarray(u, dtype=float))
        out = np.empty_like(u)
        for j, p in enumerate(self.params):
            out[:, j] = p.snap(u[:, j])
            if p.condition is not None:
                out[u[:, j] < 0, j] = INACTIVE
        return self._apply_conditions(out, rng)

    def features(self, u: np.ndarray) -> np.ndarray:
        """Snapped unit matrix -> model features (n, n_features)."""
        u = np.atleast_2d(u)
        x = np.zeros((u.shape[0], self.n_features))
        for j, (p, sl) in enumerate(zip(self.params, self._feature_slices, strict=True)):
            on = u[:, j] >= 0
            if p.type == "categorical":
                idx = p.from_unit(u[:, j]).astype(int)
                rows = np.flatnonzero(on)
                x[rows, sl.start + idx[rows]] = 1.0  # an inactive categorical is all zeros
            elif p.condition is None:
                x[:, sl.start] = u[:, j]
            else:  # the coordinate (the centre when inactive) and the activity indicator
                x[:, sl.start] = np.where(on, u[:, j], 0.5)
                x[:, sl.start + 1] = on
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
            return self.snap(sampler.random(n))  # every coordinate drawn: the conditions keep what is active

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
        if self._conditions:  # only active coordinates move; an inactive one stays INACTIVE
            mask &= base >= 0
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
        return self.snap(child, rng)  # a parameter a moved parent switches on gets a fresh draw
