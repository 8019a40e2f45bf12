"""A Ray Tune search space as a calibo study's space, and the study's values back as Tune's config."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ray.tune.search.sample import (
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    LogUniform,
    Quantized,
    Uniform,
)

SEP = "/"  # nested parameters are named by their path, joined with it (as Tune's OptunaSearch does)
JSON_SCALARS = (str, int, float, bool, type(None))
_CHOICE_TEXT = 100


@dataclass(frozen=True)
class _Param:
    """One Tune domain as a calibo parameter, and how a value of it goes back into Tune's config."""

    path: tuple[Any, ...]  # where it sits in the config (dict keys, list indices)
    wire: dict[str, Any]  # the calibo parameter
    q: float | None = None  # quantized: the value handed to Tune is rounded to a multiple of q
    integer: bool = False
    labels: tuple[Any, ...] | None = None  # categorical choices that are not JSON scalars: sent by label

    @property
    def name(self) -> str:
        return SEP.join(str(p) for p in self.path)

    def to_tune(self, value: Any) -> Any:
        if self.labels is not None:
            return copy.deepcopy(self.labels[self.wire["choices"].index(value)])
        if self.q is not None:
            low = math.ceil(self.wire["low"] / self.q - 1e-9) * self.q
            high = math.floor(self.wire["high"] / self.q + 1e-9) * self.q
            value = min(max(round(value / self.q) * self.q, low), high)
        return int(round(value)) if self.integer else value

    def to_wire(self, value: Any) -> Any:
        value = _plain(value)
        if self.labels is not None:
            for label, choice in zip(self.wire["choices"], self.labels, strict=True):
                if _same(choice, value):
                    return label
            raise ValueError(f"{value!r} is not a choice of {self.name!r}")
        return value


def _plain(value: Any) -> Any:
    """numpy scalars as Python ones."""
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an object whose == raises or is ambiguous (arrays) is not equal
        return a is b


def _equal(a: Any, b: Any) -> bool:
    """Equal as Python sees it (1 == 1.0 == True): such choices go by label, never collapsed."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return a is b


@dataclass(frozen=True)
class TuneSpace:
    """A Tune search space read once: its parameters and the config around them (constants kept)."""

    params: tuple[_Param, ...]
    template: Any  # the config with every domain left in place; constants are copied from it

    @property
    def wire(self) -> dict[str, dict[str, Any]]:
        return {p.name: p.wire for p in self.params}

    def config(self, values: dict[str, Any]) -> dict[str, Any]:
        """Tune's config for the study's ``values`` (flat names): nested, with the constants."""
        by_path = {p.path: p.to_tune(values[p.name]) for p in self.params if p.name in values}
        return _fill(self.template, (), by_path)

    def flat(self, config: dict[str, Any]) -> dict[str, Any]:
        """The study's values (flat names) of a Tune config (``points_to_evaluate``, evaluated points);
        parameters it leaves out are left out (the server chooses them)."""
        out = {}
        for p in self.params:
            node: Any = config
            try:
                for key in p.path:
                    node = node[key]
            except (KeyError, IndexError, TypeError):
                flat = config.get(p.name, _MISSING) if isinstance(config, dict) else _MISSING
                if flat is _MISSING:
                    continue
                node = flat
            if isinstance(node, Domain):
                continue
            out[p.name] = p.to_wire(node)
        return out


_MISSING = object()


def _fill(node: Any, path: tuple[Any, ...], values: dict[tuple[Any, ...], Any]) -> Any:
    if path in values:
        return values[path]
    if isinstance(node, dict):
        return {k: _fill(v, (*path, k), values) for k, v in node.items()}
    if isinstance(node, list | tuple):
        out = [_fill(v, (*path, i), values) for i, v in enumerate(node)]
        return out if isinstance(node, list) else tuple(out)
    return copy.deepcopy(node)


def _walk(node: Any, path: tuple[Any, ...]) -> Iterable[tuple[tuple[Any, ...], Domain]]:
    name = SEP.join(str(p) for p in path) or "<config>"
    if isinstance(node, dict):
        if set(node) == {"grid_search"}:
            raise ValueError(f"parameter {name!r}: tune.grid_search has no calibo equivalent; use tune.choice")
        for k, v in node.items():
            if isinstance(k, str) and SEP in k:
                raise ValueError(f"parameter {SEP.join(map(str, (*path, k)))!r}: a key holding {SEP!r} "
                                 f"(calibo names nested parameters by their path joined with {SEP!r})")
            yield from _walk(v, (*path, k))
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, i))
    elif isinstance(node, Domain):
        yield path, node


def _param(path: tuple[Any, ...], domain: Domain) -> _Param:
    name = SEP.join(str(p) for p in path)
    if isinstance(domain, Function):
        raise ValueError(f"parameter {name!r}: tune.sample_from (a function of the config) has no calibo "
                         "equivalent; use tune.uniform / loguniform / randint / choice ...")
    sampler = domain.get_sampler()
    q = None
    if isinstance(sampler, Quantized):
        q, sampler = sampler.q, sampler.sampler
    if isinstance(domain, Categorical):
        if not isinstance(sampler, Uniform):
            raise ValueError(f"parameter {name!r}: a categorical domain sampled by {type(sampler).__name__}")
        choices = [_plain(c) for c in domain.categories]
        scalar = all(isinstance(c, JSON_SCALARS) and not (isinstance(c, float) and not math.isfinite(c))
                     and not (isinstance(c, str) and len(c) > _CHOICE_TEXT) for c in choices)
        if scalar and all(not _equal(a, b) for i, a in enumerate(choices) for b in choices[i + 1:]):
            return _Param(path, {"type": "categorical", "choices": choices})
        labels = [repr(c)[:_CHOICE_TEXT - 8] for c in choices]
        if len(set(labels)) < len(labels):
            labels = [f"#{i} {t}" for i, t in enumerate(labels)]
        return _Param(path, {"type": "categorical", "choices": labels}, labels=tuple(domain.categories))
    if not isinstance(sampler, Uniform | LogUniform):
        raise ValueError(f"parameter {name!r}: {type(domain).__name__} sampled by {type(sampler).__name__} "
                         "(tune.randn) has no calibo equivalent; give it bounds (tune.uniform)")
    log = isinstance(sampler, LogUniform)
    if isinstance(domain, Float):
        if domain.lower is None or domain.upper is None:
            raise ValueError(f"parameter {name!r}: a float without bounds")
        wire: dict[str, Any] = {"type": "float", "low": float(domain.lower), "high": float(domain.upper), "log": log}
        return _Param(path, wire, q=float(q) if q else None)
    if isinstance(domain, Integer):
        # Tune's randint / lograndint exclude the upper bound; quantized ones (q > 1) include it
        high = int(domain.upper) - (0 if q and q != 1 else 1)
        wire = {"type": "int", "low": int(domain.lower), "high": high, "log": log}
        if wire["high"] < wire["low"]:
            raise ValueError(f"parameter {name!r}: an empty integer range")
        return _Param(path, wire, q=int(q) if q and q != 1 else None, integer=True)
    raise ValueError(f"parameter {name!r}: Tune domain {type(domain).__name__} has no calibo equivalent")


def read_space(spec: dict[str, Any]) -> TuneSpace:
    """A Tune search space (``tune.uniform``, ``tune.choice`` ... nested in dicts and lists, beside
    constants) as calibo parameters; a ValueError names any parameter calibo cannot search."""
    if not isinstance(spec, dict):
        raise ValueError(f"a Tune search space is a dict, got {type(spec).__name__}")
    params = tuple(_param(path, domain) for path, domain in _walk(spec, ()))
    if not params:
        raise ValueError("the search space has no parameter to search (no tune.uniform, tune.choice ...)")
    names = [p.name for p in params]
    if len(set(names)) < len(names):
        raise ValueError(f"two parameters with one flat name: {sorted(n for n in names if names.count(n) > 1)}")
    return TuneSpace(params, spec)


def convert_search_space(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A Tune search space as a calibo study's space (the wire format): nested parameters named by
    their path joined with ``/``. Constants are not parameters."""
    return read_space(spec).wire
