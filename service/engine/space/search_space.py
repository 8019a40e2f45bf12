"""The search space: a study's parameters, their encodings, and the validation of configurations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import FieldError, ParamError, SpaceError
from ..limits import MAX_FEATURES, MAX_PARAMS
from .conditions import Conditions
from .growth import grown_specs
from .params import INACTIVE, Param, choice_key
from .sampling import Sampling


@dataclass(frozen=True)
class SearchSpace(Conditions, Sampling):
    """A study's parameters: build one with ``SearchSpace.from_dict({"lr": {"type": "float",
    "low": 1e-4, "high": 0.1, "log": True}, ...})``; ``validate`` checks a configuration,
    ``to_unit`` / ``from_unit`` / ``features`` are the engine's encodings (the package docstring)."""

    params: tuple[Param, ...]
    _feature_slices: tuple[slice, ...] = field(init=False, repr=False, compare=False)
    # per conditional parameter, in an order where parents come first: (column, parent column,
    # the parent's decoded values that activate it)
    _conditions: tuple[tuple[int, int, frozenset[int]], ...] = field(init=False, repr=False, compare=False)
    # whether a configuration may lack a parameter (one is conditional, or grown: see ``grow``)
    _optional: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        slices, start = [], 0
        for p in self.params:
            slices.append(slice(start, start + p.n_features))
            start += p.n_features
        object.__setattr__(self, "_feature_slices", tuple(slices))
        object.__setattr__(self, "_conditions", self._resolve_conditions())
        object.__setattr__(self, "_optional", any(p.optional for p in self.params))

    @classmethod
    def from_dict(cls, d: Any) -> SearchSpace:
        if isinstance(d, SearchSpace):
            return d
        if not isinstance(d, dict):
            raise SpaceError("space", "must be an object of parameters")
        if len(d) > MAX_PARAMS:
            raise SpaceError("space", f"at most {MAX_PARAMS} parameters (got {len(d)})")
        space = cls(tuple(Param.from_dict(name, spec) for name, spec in d.items()))
        if space.n_features > MAX_FEATURES:
            raise SpaceError("space", f"at most {MAX_FEATURES} encoded features: numeric parameters plus "
                                      f"every categorical choice (got {space.n_features})")
        return space

    def __repr__(self) -> str:
        """``SearchSpace(3 params: x float, y float, k categorical(2))``, cut to fit."""
        listed = ", ".join(p.short() for p in self.params)
        head = f"{type(self).__name__}({len(self.params)} params: "
        room = 200 - len(head) - 1
        return head + (listed if len(listed) <= room else listed[: room - 4] + " ...") + ")"

    def to_dict(self) -> dict[str, Any]:
        return {p.name: p.to_dict() for p in self.params}

    def grow(self, changes: Any) -> SearchSpace:
        """This space grown by ``changes`` (``{name: parameter}``, new parameters and existing ones' grown
        definitions): see ``growth``; a SpaceError naming the field for anything but growth."""
        return SearchSpace.from_dict(grown_specs(self.params, changes))

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
        """How many distinct configurations there are (an upper bound when parameters are conditional);
        None when a float makes it unbounded."""
        n = 1
        for p in self.params:
            if p.type == "float":
                return None
            if p.type in ("categorical", "ordinal"):
                n *= len(p.choices)
            else:
                assert p.low is not None and p.high is not None  # an int parameter has both
                n *= int(p.high) - int(p.low) + 1
        return n

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
                elif not any(choice_key(out[parent]) == choice_key(v) for v in values):
                    inactive[p.name] = f"it is active only when {parent!r} is one of {list(values)!r}"
            if p.name in inactive:
                if p.name in params:
                    raise ParamError(p.name, f"inactive parameter: {inactive[p.name]}")
                continue
            if p.name not in params:
                if p.grown:  # as the trials told before it was added: inactive, and so are its children
                    inactive[p.name] = "absent (a parameter added after trials were told)"
                    continue
                raise ParamError(p.name, "missing")
            out[p.name] = p.validate(params[p.name])
        return {p.name: out[p.name] for p in self.params if p.name in out}

    def is_configuration(self, params: Any) -> bool:
        """Whether ``validate`` accepts ``params`` (a trial its caller runs may hold some only so far)."""
        try:
            self.validate(params)
        except FieldError:
            return False
        return True

    def complete(self, params: dict[str, Any]) -> bool:
        """Whether a validated (partial) configuration holds every parameter it makes active."""
        return set(self.active_names(params)) <= set(params)

    def validate_partial(self, params: Any) -> dict[str, Any]:
        """Some of a configuration (an enqueued one): known parameters with valid values; a conditional
        parameter given comes with its parent, and the parent's value makes it active (else the
        configuration could be completed with a parent value under which it is inactive: no ask could
        hand it out)."""
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
                if parent not in out:
                    raise ParamError(p.name, f"conditional parameter without its parent: it is active only when "
                                             f"{parent!r} is one of {list(values)!r}, so give {parent!r} too")
                if not any(choice_key(out[parent]) == choice_key(v) for v in values):
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
                    out[name] = self.params[self.names.index(name)].draw(rng)
        return self.validate(out)

    # -------------------------------------------------------- representations
    def to_unit(self, configs: list[dict[str, Any]]) -> np.ndarray:
        """Validated configurations -> snapped unit matrix (n, dim); an absent (inactive) parameter
        is ``INACTIVE``."""
        u = np.full((len(configs), self.dim), INACTIVE)
        for j, p in enumerate(self.params):
            rows = [i for i, c in enumerate(configs) if p.name in c] if p.optional else None
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
        if not self._optional:
            return [dict(zip(self.names, row, strict=True)) for row in zip(*cols, strict=True)]
        on = u >= 0
        return [{n: col[i] for j, (n, col) in enumerate(zip(self.names, cols, strict=True)) if on[i, j]}
                for i in range(u.shape[0])]

    def snap(self, u: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """Rows moved onto valid configurations: every active coordinate onto its grid, every inactive
        one to INACTIVE (``rng`` draws a parameter the row switches on without a value; else its centre).
        A grown parameter a row lacks (a trial told before it was added) is switched on the same way:
        every configuration made here holds it where it is active."""
        u = np.atleast_2d(np.asarray(u, dtype=float))
        out = np.empty_like(u)
        for j, p in enumerate(self.params):
            out[:, j] = p.snap(u[:, j])
            if p.condition is not None:
                out[u[:, j] < 0, j] = INACTIVE
            elif p.grown and (off := u[:, j] < 0).any():
                fresh = rng.random(int(off.sum())) if rng is not None else np.full(int(off.sum()), 0.5)
                out[off, j] = p.snap(fresh)
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
            elif not p.optional:
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
