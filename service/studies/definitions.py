"""A study's definition: the canonical stored form of a create request, and its parsed, cached form."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, fields
from typing import Any

from calibo.engine import EngineConfig, SearchSpace, multi
from calibo.engine.config import migrate
from calibo.engine.errors import FieldError
from calibo.engine.outcomes import check_constraint_names, check_directions
from calibo.engine.pruning import PrunerConfig
from calibo.engine.study import StudySpec

from ..errors import InvalidRequest

SERVICE_SETTINGS = {"ask_wait_seconds": (0.0, 600.0), "heartbeat_timeout_seconds": (1.0, 7 * 86400.0)}


@dataclass(frozen=True, kw_only=True)
class StudyDef(StudySpec):
    """A study's definition at one revision, parsed once and cached: what the engine reads of it (the
    ``StudySpec`` it is: space, settings, directions, seed, constraint names) and the service's own
    parts. Only the space changes, by growth (``StudyService.grow_space``), and each change moves the
    stored revision on: a cached definition of another revision is stale."""

    id: int
    revision: int = 0
    ask_wait_seconds: float | None
    heartbeat_timeout_seconds: float | None
    pruner: PrunerConfig = PrunerConfig()

    @classmethod
    def parse(cls, study_id: int, definition: dict[str, Any], revision: int = 0) -> StudyDef:
        """A stored definition (``build_definition``'s form) at ``revision``."""
        service = definition.get("service", {})
        spec = StudySpec.from_definition(definition)
        return cls(**{f.name: getattr(spec, f.name) for f in fields(StudySpec)}, id=study_id, revision=revision,
                   ask_wait_seconds=service.get("ask_wait_seconds"),
                   heartbeat_timeout_seconds=service.get("heartbeat_timeout_seconds"),
                   pruner=PrunerConfig.from_dict(definition.get("pruner")))

    def better(self, value: float | None, best: float | None) -> bool:
        """Whether ``value`` beats the study's best so far (None: there is none). A multi-objective
        study has no single best: its best trials are its Pareto front."""
        if self.multi or value is None:
            return False
        return best is None or (value < best if self.direction == "minimize" else value > best)


def default_seed(name: str) -> int:
    """Studies without a seed get one from their name: reproducible, and distinct per study."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


# A name is one path segment of /v1/studies/{study}; these two are read as the path's own dots.
DOT_SEGMENTS = (".", "..")


def check_name(name: str) -> str:
    """A study name every route can reach (URL-encoded in the path); InvalidRequest saying why not."""
    if name in DOT_SEGMENTS:
        raise InvalidRequest(f"{name!r} cannot be a study name: clients and proxies resolve it as a path "
                             "segment, so /v1/studies/{name} could never reach it", field="name")
    return name


def build_definition(name: str, space: Any, direction: str, surrogate: str | None,
                     acquisition: str | None, seed: int | None, settings: dict[str, Any] | None,
                     pruner: Any = None, constraints: Any = None, directions: Any = None,
                     learn_failures: Any = True) -> dict[str, Any]:
    """The canonical stored form of a create request; raises InvalidRequest naming the field.
    ``directions`` (2-4): a multi-objective study, whose ``direction`` is its first objective's.
    ``learn_failures`` False: failed trials do not train the study's model of where trials succeed."""
    check_name(name)
    if not isinstance(learn_failures, bool):
        raise InvalidRequest("must be true or false", field="learn_failures")
    if directions is not None:
        try:
            directions = check_directions(directions)
        except FieldError as e:
            raise InvalidRequest(e.message, field=e.field) from None
        direction = directions[0]
    try:
        sp = SearchSpace.from_dict(space)
    except FieldError as e:
        raise InvalidRequest(e.message, field=e.field) from None
    settings = dict(settings or {})
    service: dict[str, float | None] = {}
    for key, (lo, hi) in SERVICE_SETTINGS.items():
        v = settings.pop(key, None)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise InvalidRequest(f"must be a number in [{lo:g}, {hi:g}]", field=f"settings.{key}")
            v = float(v)
        service[key] = v
    for key in ("surrogate", "acquisition"):
        if key in settings:
            raise InvalidRequest(f"give {key} at the top level, not in settings", field=f"settings.{key}")
    engine = {**settings, **{k: v for k, v in (("surrogate", surrogate), ("acquisition", acquisition))
                             if v is not None}}
    try:
        config = EngineConfig.from_dict(engine)
    except FieldError as e:
        top = e.field in ("surrogate", "acquisition")
        raise InvalidRequest(e.message, field=e.field if top else f"settings.{e.field}") from None
    except TypeError as e:
        raise InvalidRequest(str(e), field="settings") from None
    m = len(directions) if directions is not None else 1
    if m == 1:
        for key in ("reference_point", "multi_acquisition"):
            if key in engine:
                raise InvalidRequest("only for a multi-objective study (directions)", field=f"settings.{key}")
    else:
        if config.reference_point is not None and len(config.reference_point) != m:
            raise InvalidRequest(f"must have one value per objective ({m})", field="settings.reference_point")
        try:
            multi.resolve(config.multi_acquisition, m)
        except ValueError as e:
            raise InvalidRequest(str(e), field="settings.multi_acquisition") from None
    try:
        prune = PrunerConfig.from_any(pruner)
    except FieldError as e:
        raise InvalidRequest(e.message, field=e.field) from None
    if m > 1 and prune.name != "none":
        raise InvalidRequest("pruning compares one objective's learning curves: a multi-objective study "
                             "cannot have a pruner", field="pruner")
    out = {
        "space": sp.to_dict(),
        "direction": direction,
        "seed": default_seed(name) if seed is None else int(seed),
        "config": config.for_objectives(m).to_dict(),
        "service": service,
    }
    if prune.name != "none" or prune != PrunerConfig():  # studies without one keep their stored form
        out["pruner"] = prune.to_dict()
    if directions is not None:  # likewise: single-objective studies keep theirs
        out["directions"] = list(directions)
    if constraints:  # likewise: unconstrained studies keep the stored form they had
        try:
            out["constraints"] = list(check_constraint_names(constraints))
        except FieldError as e:
            raise InvalidRequest(e.message, field=e.field) from None
    if not learn_failures:  # likewise: studies that learn from failures (the default) keep their stored form
        out["learn_failures"] = False
    return out




def migrated(definition: dict[str, Any]) -> dict[str, Any]:
    """A stored definition as it would be stored today: without the settings that are no longer
    settings (``engine.config.REMOVED``; the study runs with their constants)."""
    return {**definition, "config": migrate(definition["config"])[0]}


def _request_field(path: tuple[str, ...]) -> str:
    """Where a part of the stored definition came from in the create request."""
    head, rest = path[0], path[1:]
    if head == "config":
        if rest and rest[0] in ("surrogate", "acquisition"):
            return ".".join(rest)
        return ".".join(("settings", *rest))
    if head == "service":
        return ".".join(("settings", *rest))
    return ".".join(path)


def _differences(a: Any, b: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in [*a, *(k for k in b if k not in a)]:
            out += _differences(a.get(k), b.get(k), (*path, str(k)))
        return out
    return [] if a == b else [(path, a, b)]


MAX_LISTED = 8  # differences a name_conflict spells out in its message


def definition_differences(existing: dict[str, Any], requested: dict[str, Any]) -> list[dict[str, Any]]:
    """What differs between two stored definitions, as the create request's fields:
    ``[{"field": "seed", "existing": 0, "requested": 42}, ...]`` (a field absent on one side is null)."""
    def spelled(d: dict[str, Any]) -> dict[str, Any]:  # a default the stored form leaves out, as sent
        return d if "learn_failures" in d else {**d, "learn_failures": True}

    return [{"field": _request_field(p), "existing": x, "requested": y}
            for p, x, y in _differences(spelled(existing), spelled(requested), ())]


def conflict_message(name: str, differences: list[dict[str, Any]]) -> str:
    """The message of a name_conflict: which fields differ, with both values."""
    def short(v: Any) -> str:
        text = repr(v)
        return text if len(text) <= 80 else text[:77] + "..."

    listed = "; ".join(f"{d['field']}: {short(d['existing'])} (existing) vs {short(d['requested'])} (requested)"
                       for d in differences[:MAX_LISTED])
    more = f"; and {len(differences) - MAX_LISTED} more" if len(differences) > MAX_LISTED else ""
    return f"a study named {name!r} exists with a different definition: {listed}{more}"
