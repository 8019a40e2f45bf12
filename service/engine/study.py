"""``StudySpec``: what a study is to the engine, read once from its stored definition.

The service stores a study's definition as data (space, direction or directions, seed, engine
settings, constraint names); the fit workers, the service and the Optuna sampler read it here, so
that every home fits, starts and adapts a study the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import reprs
from .config import EngineConfig, migrate
from .fit import fit
from .outcomes import sign_of
from .retune import Tuned
from .snapshot import Snapshot
from .space import SearchSpace
from .state import StudyState


@dataclass(frozen=True)
class FitResult:
    """What a fit of a study hands its home: the snapshot's binary form and what the study's status
    reports of it (``to_dict`` crosses a process boundary as plain data)."""

    n_obs: int
    method: str
    fit_seconds: float
    device: str
    snapshot: bytes
    device_fallback: str | None = None  # why a CUDA fit was refitted on the CPU
    n_failed: int = 0  # failed configurations it learned from
    kind: str = "full"  # full refit, update (engine.retune) or extend (engine.extend)
    tuned: dict[str, Any] | None = None  # the hyperparameters the next fit keeps (``Tuned.to_dict``)

    @classmethod
    def of(cls, snap: Snapshot) -> FitResult:
        return cls(snap.n_obs, snap.method, snap.fit_seconds, snap.meta.device, snap.to_bytes(),
                   snap.meta.device_fallback, snap.meta.n_failed, snap.meta.fit.kind, snap.meta.tuned)

    def __repr__(self) -> str:
        return reprs.build(self, ("n_obs", str(self.n_obs)), ("method", repr(self.method)),
                           ("device", repr(self.device)), ("fit_seconds", reprs.value(self.fit_seconds)),
                           ("snapshot", f"<{len(self.snapshot)} bytes>"))

    def to_dict(self) -> dict[str, Any]:
        out = {"n_obs": self.n_obs, "fit_seconds": self.fit_seconds, "method": self.method, "device": self.device,
               "snapshot": self.snapshot, "n_failed": self.n_failed, "fit_kind": self.kind, "tuned": self.tuned}
        if self.device_fallback:
            out["device_fallback"] = self.device_fallback
        return out


@dataclass(frozen=True)
class StudySpec:
    """A study's space, outcomes, seed and engine settings."""

    space: SearchSpace
    config: EngineConfig
    directions: tuple[str, ...] = ("minimize",)  # one per objective
    seed: int = 0
    constraints: tuple[str, ...] = ()  # outcome constraint names: feasible when each value <= 0
    removed: dict[str, Any] = field(default_factory=dict)  # removed settings the stored definition named
    learn_failures: bool = True  # failed trials train the model of where trials succeed (``failures``)

    def __repr__(self) -> str:
        return reprs.build(self, ("params", str(len(self.space.params))), ("directions", repr(list(self.directions))),
                           ("seed", str(self.seed)), ("constraints", reprs.value(list(self.constraints))),
                           ("config", repr(self.config)))

    @classmethod
    def from_definition(cls, d: dict[str, Any]) -> StudySpec:
        """A stored definition (``{"space", "direction", "directions"?, "seed", "config",
        "constraints"?, "learn_failures"?}``); settings that are no longer settings load as their
        constants (``removed`` lists those named with another value)."""
        settings, removed = migrate(d["config"])
        directions = tuple(d.get("directions") or (d["direction"],))
        for x in directions:
            sign_of(x)
        return cls(SearchSpace.from_dict(d["space"]), EngineConfig.from_dict(settings), directions,
                   int(d["seed"]), tuple(d.get("constraints") or ()), removed,
                   d.get("learn_failures", True) is not False)

    @property
    def direction(self) -> str:
        return self.directions[0]

    @property
    def multi(self) -> bool:
        return len(self.directions) > 1

    def initial_state(self) -> StudyState:
        return StudyState.initial(self.config, self.seed, len(self.directions), len(self.constraints))

    def fit(self, observations: Sequence[tuple[dict[str, Any], Any]], pending: Sequence[dict[str, Any]] = (),
            constraints: Sequence[Sequence[float]] | None = None, device: str | None = None,
            failed: Sequence[dict[str, Any]] = (), tuned: Tuned | None = None,
            previous: Snapshot | None = None) -> Snapshot:
        """``engine.fit`` of this study on ``observations`` (and the running ``pending``, and the
        configurations that ``failed``, which it learns from unless the study turned that off;
        ``tuned``: what the newest snapshot hands on, ``engine.retune``; ``previous``: that
        snapshot, which the fit may extend, ``engine.extend``)."""
        return fit(observations, self.space, self.config, self.direction, self.seed, device=device,
                   pending=pending, constraints=constraints, directions=self.directions if self.multi else None,
                   failed=failed if self.learn_failures else (), tuned=tuned, previous=previous)
