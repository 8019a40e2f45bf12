"""One parameter of a search space: its type and range, its unit coordinate, its told values."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ParamError, SpaceError
from ..limits import MAX_CHOICE_TEXT, MAX_CHOICES, MAX_PARAM_NAME, check_text

PARAM_TYPES = ("float", "int", "categorical", "ordinal")
PARENT_TYPES = ("categorical", "ordinal", "int")  # what a condition may test
INACTIVE = -1.0  # the unit coordinate of a parameter its conditions switch off


# Float coordinates of the unit cube live on a grid of 2**-30: every grid point is
# exact in binary floating point, and decode -> encode lands within far less than
# half a step of where it started, so snapping is idempotent bit for bit and a
# configuration has exactly one unit row (its key) however often it travels.
UNIT_GRID = float(2**30)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def as_float(x: Any) -> float | None:
    """``float(x)`` for a finite number, else None (NaN, infinity, ints beyond a double)."""
    if not is_number(x):
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
    # added to the study's space after trials were told (or its condition widened): a configuration may
    # lack it where it is active (those trials do), and is encoded as if it were switched off there
    grown: bool = False

    def short(self) -> str:
        """The parameter in a few words: ``lr float[0.0001, 1] log``, ``kind categorical(3)``."""
        def num(v: Any) -> str:
            return f"{v:g}" if isinstance(v, float) else repr(v)

        name = self.name if len(self.name) <= 30 else self.name[:27] + "..."
        if self.choices:
            out = f"{name} {self.type}({len(self.choices)})"
        else:
            out = f"{name} {self.type}[{num(self.low)}, {num(self.high)}]" + (" log" if self.log else "")
        return out + (f" if {self.condition[0]}" if self.condition else "")

    def __repr__(self) -> str:
        return f"Param({self.short()})"

    # ----------------------------------------------------------------- build
    @classmethod
    def from_dict(cls, name: str, d: Any) -> Param:
        if not isinstance(name, str) or not name:
            raise SpaceError("space", "parameter names must be non-empty strings")
        check_text(name, "space", MAX_PARAM_NAME, error=SpaceError)
        where = f"space.{name}"
        if not isinstance(d, dict):
            raise SpaceError(where, "must be an object with a 'type'")
        unknown = set(d) - {"type", "low", "high", "log", "choices", "condition", "grown"}
        if unknown:
            raise SpaceError(f"{where}.{sorted(unknown)[0]}", "unknown key")
        condition = parse_condition(d.get("condition"), where) if "condition" in d else None
        grown = d.get("grown", False)
        if not isinstance(grown, bool):
            raise SpaceError(f"{where}.grown", "must be true or false")
        kind = d.get("type")
        if kind not in PARAM_TYPES:
            raise SpaceError(f"{where}.type", f"must be one of {', '.join(PARAM_TYPES)}")
        if kind in ("float", "int"):
            if "choices" in d:
                raise SpaceError(f"{where}.choices", f"not allowed for type {kind}")
            low: Any
            high: Any
            low, high, log = d.get("low"), d.get("high"), d.get("log", False)
            for key, v in (("low", low), ("high", high)):
                f = as_float(v)
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
                return cls(name, kind, int(low), int(high), log, condition=condition, grown=grown)
            return cls(name, kind, float(low), float(high), log, condition=condition, grown=grown)
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
            if not (isinstance(c, (str, bool)) or c is None or is_number(c)):
                raise SpaceError(f"{where}.choices", "choices must be strings, numbers, booleans or null")
            if is_number(c) and as_float(c) is None:
                raise SpaceError(f"{where}.choices", "numeric choices must be finite")
        if len({choice_key(c) for c in choices}) != len(choices):
            raise SpaceError(f"{where}.choices", "choices must be distinct")
        return cls(name, kind, choices=tuple(choices), condition=condition, grown=grown)

    def to_dict(self) -> dict[str, Any]:
        if self.type in ("float", "int"):
            out: dict[str, Any] = {"type": self.type, "low": self.low, "high": self.high, "log": self.log}
        else:
            out = {"type": self.type, "choices": list(self.choices)}
        if self.condition is not None:
            out["condition"] = {"parent": self.condition[0], "values": list(self.condition[1])}
        if self.grown:
            out["grown"] = True
        return out

    # ------------------------------------------------------------- transforms
    @property
    def n_features(self) -> int:
        """Model columns: a categorical's one-hot block; a number's coordinate (and, when it may be
        inactive, i.e. conditional or grown, its activity indicator)."""
        if self.type == "categorical":
            return len(self.choices)
        return 2 if self.optional else 1

    @property
    def optional(self) -> bool:
        """Whether a configuration may lack it: it is conditional, or was added after trials were told."""
        return self.condition is not None or self.grown

    def decoded(self, u: np.ndarray) -> np.ndarray:
        """What a condition on this parameter compares: choice indices, or integer values."""
        return self.from_unit(u)

    def _bounds(self) -> tuple[float, float]:
        """The continuous interval the unit coordinate is mapped onto."""
        lo, hi = float(self.low), float(self.high)  # type: ignore[arg-type]  # numeric types have both bounds
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
            idx: NDArray[np.float64] = np.minimum((u * k).astype(int), k - 1).astype(float)
            return idx
        lo, hi = self._bounds()
        v = lo + u * (hi - lo)
        if self.log:
            v = np.exp(v)
        if self.type == "int":
            v = np.clip(np.round(v), self.low, self.high)
        else:
            v = np.clip(v, self.low, self.high)
        return v

    def draw(self, rng: np.random.Generator) -> Any:
        """One value drawn uniformly on the unit coordinate (a choice, an int, or a float)."""
        v = self.from_unit(rng.random(1))[0]
        if self.type in ("categorical", "ordinal"):
            return self.choices[int(v)]
        return int(v) if self.type == "int" else float(v)

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
        if not is_number(value):
            raise ParamError(self.name, f"expected a number, got {type(value).__name__}")
        x = as_float(value)
        if x is None:
            raise ParamError(self.name, "must be a finite number")
        if self.type == "int":
            if x != round(x):
                raise ParamError(self.name, f"expected an integer, got {value!r}")
            # an integer as given (a double holds integers exactly only up to 2**53)
            x = int(value) if isinstance(value, (int, np.integer)) else int(round(x))
        if x < self.low or x > self.high:  # type: ignore[operator]  # numeric types have both bounds
            raise ParamError(self.name, f"{value!r} is outside [{self.low}, {self.high}]")
        return x + 0.0 if isinstance(x, float) else x  # -0.0 as 0.0: SQLite keeps no sign

    def index_of(self, value: Any) -> int:
        key = choice_key(value)
        if key is not None:
            for i, c in enumerate(self.choices):
                if choice_key(c) == key:
                    return i
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ParamError(self.name, f"{shown} is not one of {list(self.choices)!r}")


def parse_condition(c: Any, where: str) -> tuple[str, tuple[Any, ...]]:
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


def choice_key(c: Any) -> tuple[str, Any] | None:
    """A choice's identity: True and 1 apart, 1 and 1.0 together; None for non-choices."""
    if isinstance(c, bool) or c is None:
        return ("const", c)
    if is_number(c):
        f = as_float(c)
        return None if f is None else ("num", f)
    if isinstance(c, str):
        return ("str", c)
    return None
