"""A Katib experiment as a calibo study: its space, direction and settings, and back to Katib's strings.

Pure functions of the experiment message: the adapter recomputes them on every request, so it keeps
nothing between requests (a restart loses nothing).

Parameters (Katib's ``parameterType`` and ``feasibleSpace``):

- ``double`` min/max: a calibo ``float`` (``distribution: logUniform``: ``log``); with a ``step``, the
  grid min, min+step, ... <= max as an ``ordinal`` (at most 1000 values).
- ``int`` min/max: an ``int`` (``logUniform``: ``log``); with a step above 1, the grid as an ``ordinal``.
- ``discrete`` list (numbers): an ``ordinal`` of the numbers, handed back as Katib's own strings.
- ``categorical`` list: a ``categorical`` of the strings.

``normal`` and ``logNormal`` distributions, NAS experiments and anything else calibo cannot express
are refused with the reason (``INVALID_ARGUMENT`` at ``ValidateAlgorithmSettings``).

Algorithm settings (``algorithmSettings`` name/value strings): ``surrogate``, ``acquisition``, ``seed``
and ``study_name`` (the calibo study, default ``katib-<experiment name>``) go to the study itself; any
other name is a study setting (``settings`` of ``POST /v1/studies``, e.g. ``n_warmup``), its value read
as JSON when it parses (``15``, ``0.1``, ``true``) and as the string otherwise. The calibo server
validates them: an unknown setting is refused with the server's message naming it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from . import messages as m

ALGORITHM = "calibo"
TRIAL_LABEL = "calibo-trial-id"  # set on every Katib trial this adapter suggests: the calibo trial's id
MAX_GRID = 1000  # values of one ordinal (the server's limit on choices)
STUDY_FIELDS = ("surrogate", "acquisition", "seed")


class Unsupported(ValueError):
    """The experiment asks for something calibo cannot express; the message says what."""


@dataclass(frozen=True)
class StudyDefinition:
    """What ``create_study`` gets for an experiment, and how to write a value back as Katib's string."""

    name: str
    space: dict[str, dict[str, Any]]
    direction: str
    metric: str
    additional_metrics: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)  # surrogate, acquisition, seed, settings
    katib_strings: dict[str, dict[Any, str]] = field(default_factory=dict)  # discrete: number -> Katib's text

    def assignment(self, params: dict[str, Any]) -> list[tuple[str, str]]:
        """A calibo trial's params as Katib's (name, value string) pairs, in the space's order."""
        out = []
        for name, spec in self.space.items():
            value = params[name]
            text = self.katib_strings.get(name, {}).get(value)
            if text is None:
                text = _number_text(value) if spec["type"] in ("float", "int", "ordinal") else str(value)
            out.append((name, text))
        return out


def _number_text(value: Any) -> str:
    # repr: the shortest text that reads back as the same double ("0.1", "3.0", "1e-05")
    return str(value) if isinstance(value, bool) or not isinstance(value, int | float) else repr(value)


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise Unsupported(f"{what} is {text!r}, not a number") from None
    if not math.isfinite(value):
        raise Unsupported(f"{what} is {text!r}: it must be finite")
    return value


def _integer(text: str, what: str) -> int:
    value = _number(text, what)
    if not value.is_integer():
        raise Unsupported(f"{what} is {text!r}, not an integer")
    return int(value)


def _grid(low: float, high: float, step: float, as_int: bool, what: str) -> list[Any]:
    if step <= 0:
        raise Unsupported(f"{what}: step must be positive, got {step:g}")
    count = math.floor((high - low) / step + 1e-9) + 1
    if count > MAX_GRID:
        raise Unsupported(f"{what}: min, max and step give {count} values, more than calibo's {MAX_GRID}")
    values = [low + i * step for i in range(count)]
    return [int(round(v)) for v in values] if as_int else [round(v, 12) for v in values]


def _param(spec: Any) -> tuple[dict[str, Any], dict[Any, str]]:
    name = spec.name
    kind = m.enum_name("ParameterType", spec.parameter_type)
    fs = spec.feasible_space
    dist = m.enum_name("Distribution", fs.distribution)
    what = f"parameter {name!r}"
    if dist in ("NORMAL", "LOG_NORMAL"):
        raise Unsupported(f"{what}: the {dist.lower().replace('_', '-')} distribution cannot be expressed in "
                          "calibo (bounded spaces only: uniform or logUniform)")
    if dist.startswith("#"):
        raise Unsupported(f"{what}: unknown distribution {dist}")
    log = dist == "LOG_UNIFORM"
    if kind in ("DOUBLE", "INT"):
        if not fs.min or not fs.max:
            raise Unsupported(f"{what}: a {kind.lower()} parameter needs min and max")
        as_int = kind == "INT"
        read = _integer if as_int else _number
        low, high = read(fs.min, f"{what} min"), read(fs.max, f"{what} max")
        if not low < high:
            raise Unsupported(f"{what}: min ({fs.min}) must be below max ({fs.max})")
        if log and low <= 0:
            raise Unsupported(f"{what}: a logUniform parameter needs min > 0, got {fs.min}")
        step = read(fs.step, f"{what} step") if fs.step else None
        if step is not None and not (as_int and step == 1):
            if log:
                raise Unsupported(f"{what}: a step on a logUniform parameter cannot be expressed in calibo")
            return {"type": "ordinal", "choices": _grid(low, high, step, as_int, what)}, {}
        return {"type": "int" if as_int else "float", "low": low, "high": high, "log": log}, {}
    if kind in ("DISCRETE", "CATEGORICAL"):
        if not fs.list:
            raise Unsupported(f"{what}: a {kind.lower()} parameter needs a list of values")
        if len(set(fs.list)) != len(fs.list):
            raise Unsupported(f"{what}: its list repeats a value")
        if len(fs.list) > MAX_GRID:
            raise Unsupported(f"{what}: {len(fs.list)} values, more than calibo's {MAX_GRID}")
        if kind == "CATEGORICAL":
            return {"type": "categorical", "choices": list(fs.list)}, {}
        numbers = [_number(v, f"{what} value") for v in fs.list]
        values = [int(x) if x.is_integer() else x for x in numbers]
        if len(set(values)) != len(values):
            raise Unsupported(f"{what}: its list repeats a number")
        pairs = sorted(zip(values, fs.list, strict=True))
        return {"type": "ordinal", "choices": [v for v, _ in pairs]}, dict(pairs)
    raise Unsupported(f"{what}: parameter type {kind} is not one of double, int, discrete, categorical")


def _setting(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def study_name(experiment: Any) -> str:
    """The calibo study of an experiment: its ``study_name`` setting, else ``katib-<experiment name>``."""
    for s in experiment.spec.algorithm.algorithm_settings:
        if s.name == "study_name" and s.value:
            return s.value
    return "katib-" + (experiment.name or "experiment")


def definition(experiment: Any) -> StudyDefinition:
    """The study for ``experiment`` (a Katib ``Experiment`` message); :class:`Unsupported` with the reason
    when calibo cannot express it."""
    spec = experiment.spec
    if not experiment.name:
        raise Unsupported("the experiment has no name")
    algorithm = spec.algorithm.algorithm_name
    if algorithm != ALGORITHM:
        raise Unsupported(f"algorithm {algorithm!r}: this suggestion service serves {ALGORITHM!r}")
    if spec.HasField("nas_config") and (spec.nas_config.operations.operation
                                        or spec.nas_config.graph_config.num_layers):
        raise Unsupported("neural architecture search (nasConfig) is not supported: calibo tunes hyperparameters")
    objective = m.enum_name("ObjectiveType", spec.objective.type)
    if objective not in ("MINIMIZE", "MAXIMIZE"):
        raise Unsupported(f"objective type {objective}: it must be minimize or maximize")
    if not spec.objective.objective_metric_name:
        raise Unsupported("the objective has no objectiveMetricName")
    params = spec.parameter_specs.parameters
    if not params:
        raise Unsupported("the experiment has no parameters")
    space: dict[str, dict[str, Any]] = {}
    strings: dict[str, dict[Any, str]] = {}
    for p in params:
        if not p.name:
            raise Unsupported("a parameter has no name")
        if p.name in space:
            raise Unsupported(f"parameter {p.name!r} is declared twice")
        space[p.name], texts = _param(p)
        if texts:
            strings[p.name] = texts
    options: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    seen: set[str] = set()
    for s in spec.algorithm.algorithm_settings:
        if not s.name:
            raise Unsupported("an algorithm setting has no name")
        if s.name in seen:
            raise Unsupported(f"algorithm setting {s.name!r} is given twice")
        seen.add(s.name)
        if s.name == "study_name":
            continue
        if s.name in STUDY_FIELDS:
            options[s.name] = _setting(s.value) if s.name == "seed" else s.value
        else:
            settings[s.name] = _setting(s.value)
    if settings:
        options["settings"] = settings
    return StudyDefinition(
        name=study_name(experiment), space=space, direction=objective.lower(),
        metric=spec.objective.objective_metric_name,
        additional_metrics=tuple(spec.objective.additional_metric_names), options=options,
        katib_strings=strings,
    )
