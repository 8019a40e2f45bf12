"""The search space CaliboSampler models, learned from a define-by-run study's trials.

Optuna code declares its space as it runs: ``kernel = trial.suggest_categorical(...)``, then
``gamma`` only ``if kernel != "linear"``. :func:`learn_space` reads which parameters the
study's completed trials hold together and under which parent values, and returns the space
as calibo models it natively: every parameter with one distribution throughout, and for each
one that only some trials hold, its ``condition`` (the parent and the parent's values under
which it appears).

* **Unconditional**: a parameter every completed trial holds.
* **Conditional**: a parameter some trials hold, explained by a *parent*: a categorical or
  integer parameter present in every trial that holds the child, such that among the trials
  holding the parent, the child appears exactly when the parent takes one of a set of values.
  A parent may itself be conditional (chains nest). Among several explaining parents the one
  held by the most trials is taken (the outermost), ties by name.
* **Left out** (sampled by the independent sampler): a parameter whose distribution differs
  between trials (a dynamic range), one whose presence no parent explains, and one with a
  single value (``low == high``, one choice).

:class:`Encoding` maps the learned space onto a calibo ``SearchSpace`` (parameters ``p0``,
``p1``... in name order; a stepped float or int becomes the index of its grid, a categorical
the index of its choice, so a condition's values are indices too), and a trial's parameters
to calibo values and back. :func:`signature` names a learned space: it changes when a
parameter, a distribution or a condition does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias, cast

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
)
from optuna.trial import FrozenTrial

from calibo.engine import SearchSpace
from calibo.engine.errors import FieldError

__all__ = ["Encoding", "LearnedSpace", "learn_space", "signature"]

# Optuna's distributions: each is one of these three (its deprecated ones subclass them)
Distribution: TypeAlias = CategoricalDistribution | FloatDistribution | IntDistribution


@dataclass(frozen=True)
class LearnedSpace:
    """What :func:`learn_space` found: the distributions to model and each conditional
    parameter's ``(parent, parent values)`` (Optuna values, in the order first seen)."""

    distributions: dict[str, BaseDistribution]
    conditions: dict[str, tuple[str, list[Any]]] = field(default_factory=dict)
    dynamic: frozenset[str] = frozenset()  # left out: the distribution changed between trials
    unexplained: frozenset[str] = frozenset()  # left out: no parent explains when it appears


def _can_parent(d: BaseDistribution) -> bool:
    return isinstance(d, CategoricalDistribution) or (isinstance(d, IntDistribution) and not d.log)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def learn_space(trials: Iterable[FrozenTrial]) -> LearnedSpace:
    """The space of ``trials`` (completed ones, as Optuna's intersection space reads them)."""
    trials = list(trials)
    dists: dict[str, BaseDistribution] = {}
    dynamic: set[str] = set()
    holders: dict[str, set[int]] = {}
    for i, t in enumerate(trials):
        for name, d in t.distributions.items():
            if name in dists and dists[name] != d:
                dynamic.add(name)
            dists.setdefault(name, d)
            holders.setdefault(name, set()).add(i)
    keep = {n: d for n, d in dists.items() if n not in dynamic and not d.single()}
    everyone = set(range(len(trials)))
    conditions: dict[str, tuple[str, list[Any]]] = {}
    unexplained: set[str] = set()
    for child in sorted(keep):
        have = holders[child]
        if have == everyone:
            continue
        found = None
        for parent in sorted(keep, key=lambda n: (-len(holders[n]), n)):
            if parent == child or not _can_parent(keep[parent]) or not have <= holders[parent]:
                continue
            values: dict[str, Any] = {}
            for i in sorted(have):
                v = trials[i].params[parent]
                values.setdefault(_key(v), v)
            if all((_key(trials[i].params[parent]) in values) == (i in have) for i in holders[parent]):
                found = (parent, list(values.values()))
                break
        if found is None:
            unexplained.add(child)
        else:
            conditions[child] = found
    # a child whose parent was left out goes too (and, in turn, its own children)
    changed = True
    while changed:
        changed = False
        for child, (parent, _) in list(conditions.items()):
            if parent in unexplained or parent not in keep:
                del conditions[child]
                unexplained.add(child)
                changed = True
    # a cycle cannot form: a parent is held by at least as many trials as its child, and
    # equally many only when it is held exactly where the child is, which the ordering by
    # (-holders, name) settles the same way for both; refuse one anyway if it did
    for child in list(conditions):
        seen, at = {child}, conditions[child][0]
        while at in conditions:
            if at in seen:
                unexplained.update(seen)
                for n in seen:
                    conditions.pop(n, None)
                break
            seen.add(at)
            at = conditions[at][0]
    distributions = {n: d for n, d in keep.items() if n not in unexplained}
    return LearnedSpace(distributions, conditions, frozenset(dynamic), frozenset(unexplained))


def signature(distributions: dict[str, BaseDistribution],
              conditions: dict[str, tuple[str, list[Any]]] | None = None) -> str:
    """A learned space's name: its distributions and conditions (as JSON)."""
    out: list[Any] = [[n, distribution_to_json(distributions[n])] for n in sorted(distributions)]
    if conditions:
        out.append({n: [p, [_key(v) for v in vs]] for n, (p, vs) in sorted(conditions.items())})
    return json.dumps(out)


class Encoding:
    """Optuna distributions (and the learned conditions) <-> a calibo search space."""

    def __init__(self, search_space: dict[str, BaseDistribution],
                 conditions: dict[str, tuple[str, list[Any]]] | None = None) -> None:
        self.names = sorted(search_space)
        self.dists = [cast(Distribution, search_space[n]) for n in self.names]
        self.conditions = {n: c for n, c in (conditions or {}).items() if n in search_space}
        index = {n: i for i, n in enumerate(self.names)}
        spec: dict[str, dict[str, Any]] = {}
        for i, d in enumerate(self.dists):
            key = f"p{i}"
            if isinstance(d, CategoricalDistribution):
                spec[key] = {"type": "categorical", "choices": list(range(len(d.choices)))}
            elif self._stepped(d):
                spec[key] = {"type": "int", "low": 0, "high": self._steps(d)}
            elif isinstance(d, IntDistribution):
                spec[key] = {"type": "int", "low": int(d.low), "high": int(d.high), "log": bool(d.log)}
            else:
                spec[key] = {"type": "float", "low": float(d.low), "high": float(d.high), "log": bool(d.log)}
            if self.names[i] in self.conditions:
                parent, values = self.conditions[self.names[i]]
                j = index[parent]
                spec[key]["condition"] = {"parent": f"p{j}",
                                          "values": [self._one(self.dists[j], v) for v in values]}
        self.space = SearchSpace.from_dict(spec)

    @staticmethod
    def _stepped(d: BaseDistribution) -> bool:
        return (isinstance(d, FloatDistribution | IntDistribution) and d.step is not None
                and not (isinstance(d, IntDistribution) and d.step == 1))

    @staticmethod
    def _steps(d: FloatDistribution | IntDistribution) -> int:
        assert d.step is not None  # a stepped one's (_stepped)
        return int(math.floor((d.high - d.low) / d.step + 1e-8))

    def _one(self, d: Distribution, v: Any) -> Any:
        """One Optuna value as its calibo value (ValueError/TypeError when it does not fit)."""
        if isinstance(d, CategoricalDistribution):
            return int(d.to_internal_repr(v))
        if self._stepped(d):
            assert d.step is not None  # a stepped one's
            x = int(round((float(v) - d.low) / d.step))
            if not 0 <= x <= self._steps(d):
                raise ValueError(v)
            return x
        num = int(v) if isinstance(d, IntDistribution) else float(v)
        if not d.low <= num <= d.high:
            raise ValueError(v)
        return num

    def encode(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """A trial's parameters as calibo values (its active ones); None when one is outside its
        range, or the parameters present are not a configuration of the space (an unconditional
        one missing, a conditional one present or missing against its parent's value)."""
        out = {}
        for i, (name, d) in enumerate(zip(self.names, self.dists, strict=True)):
            if name not in params:
                if name in self.conditions:
                    continue
                return None
            try:
                out[f"p{i}"] = self._one(d, params[name])
            except (ValueError, TypeError):
                return None
        if self.conditions:
            try:
                active = self.space.validate(out)
            except FieldError:
                active = None
            if active is None or set(active) != set(out):
                return None
        return out

    def decode(self, values: dict[str, Any]) -> dict[str, Any]:
        """calibo values -> Optuna parameter values (plain Python int / float / choice); only the
        parameters ``values`` holds (a configuration's active ones)."""
        out: dict[str, Any] = {}
        for i, (name, d) in enumerate(zip(self.names, self.dists, strict=True)):
            if f"p{i}" not in values:
                continue
            x = values[f"p{i}"]
            if isinstance(d, CategoricalDistribution):
                out[name] = d.choices[int(x)]
            elif isinstance(d, IntDistribution):
                out[name] = int(d.low + int(x) * d.step) if d.step != 1 else int(x)
            elif d.step is not None:
                out[name] = float(min(d.low + int(x) * d.step, d.high))
            else:
                out[name] = float(min(max(float(x), d.low), d.high))
        return out
