"""Optuna's distributions and values as a calibo server's, and back, for the remote mode
(``_remote``): each distribution as a server parameter (``Codec``), the parameters the learned
conditions make active, a finished trial's value, and the per-trial seeded independent draws."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any, cast

from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from calibo.engine.space import Param
from calibo.engine.space.params import choice_key

from ._space import Distribution, Encoding

__all__ = ["Codec", "TrialSeededRandom", "active", "canonical", "json_key", "value_of"]


class Codec:
    """One Optuna distribution as a calibo parameter, and its values both ways."""

    def __init__(self, d: BaseDistribution) -> None:
        self.d = cast(Distribution, d)
        self.stepped = Encoding._stepped(d)

    def spec(self) -> dict[str, Any]:
        d = self.d
        if isinstance(d, CategoricalDistribution):
            return {"type": "categorical", "choices": list(d.choices)}
        if self.stepped:
            return {"type": "int", "low": 0, "high": Encoding._steps(d)}
        if isinstance(d, IntDistribution):
            return {"type": "int", "low": int(d.low), "high": int(d.high), "log": bool(d.log)}
        return {"type": "float", "low": float(d.low), "high": float(d.high), "log": bool(d.log)}

    def out(self, v: Any) -> Any:
        """An Optuna value as the server's (ValueError/TypeError when it is not one of this distribution)."""
        d = self.d
        if isinstance(d, CategoricalDistribution):
            return d.choices[self._index(v)]
        if self.stepped:
            assert d.step is not None  # a stepped one's
            x = int(round((float(v) - d.low) / d.step))
            if not 0 <= x <= Encoding._steps(d):
                raise ValueError(v)
            return x
        return int(v) if isinstance(d, IntDistribution) else float(v)

    def back(self, x: Any) -> Any:
        """A server value as this distribution's Optuna value (ValueError when it holds none such)."""
        d = self.d
        if isinstance(d, CategoricalDistribution):
            return d.choices[self._index(x)]
        v: float
        if isinstance(d, IntDistribution):
            v = int(d.low + int(x) * d.step) if self.stepped else int(x)
        elif self.stepped:
            assert d.step is not None  # a stepped one's
            v = float(min(d.low + int(x) * d.step, d.high))
        else:
            v = float(min(max(float(x), d.low), d.high))
        if not d.low <= v <= d.high:
            raise ValueError(x)
        return v

    def _index(self, v: Any) -> int:
        key = choice_key(v)
        for i, c in enumerate(cast(CategoricalDistribution, self.d).choices):  # called for a categorical one
            if key is not None and choice_key(c) == key:
                return i
        raise ValueError(v)


def canonical(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A parameter's definition as the server stores it, without its condition and growth mark."""
    return Param.from_dict(name, {k: v for k, v in spec.items() if k not in ("condition", "grown")}).to_dict()


class TrialSeededRandom(RandomSampler):
    """Random sampling seeded by (seed, Optuna study, trial number, parameter).

    The independent sampler of the remote mode: processes that share a sampler seed draw distinct
    values for their trials (a process-wide ``RandomSampler(seed)`` would draw the same values for
    each process's first trial), and one trial's values stay reproducible.
    """

    def __init__(self, seed: int | None) -> None:
        super().__init__(seed=seed)
        self._base = seed

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        if self._base is None:
            return super().sample_independent(study, trial, param_name, param_distribution)
        key = f"{self._base}-{study.study_name}-{trial.number}-{param_name}"
        one = RandomSampler(seed=int(hashlib.sha1(key.encode()).hexdigest()[:8], 16))
        return one.sample_independent(study, trial, param_name, param_distribution)


def active(params: dict[str, Any], conditions: dict[str, tuple[str, list[Any]]]) -> dict[str, Any]:
    """The parameters of ``params`` that the objective asks for, as the learned ``conditions`` say
    (a child whose parent is absent or takes another value is left out, and so are its children)."""
    out = dict(params)
    allowed = {child: {json_key(v) for v in values} for child, (_, values) in conditions.items()}
    changed = True
    while changed:
        changed = False
        for child, (parent, _) in conditions.items():
            if child in out and (parent not in out or json_key(out[parent]) not in allowed[child]):
                del out[child]
                changed = True
    return out


def value_of(trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> Any:
    if state == TrialState.COMPLETE and values is not None:
        return [float(v) for v in values] if len(values) > 1 else float(values[0])
    if state == TrialState.PRUNED and trial.intermediate_values:
        last = trial.intermediate_values[max(trial.intermediate_values)]
        return float(last) if math.isfinite(last) else None
    return None


def json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
