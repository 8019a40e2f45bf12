"""The writes one study's group commit carries (``StudyService._write_batch``): each a frozen record
of what a request asked for, and what a tell answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .views import TrialView


@dataclass(frozen=True)
class AskWrite:
    """An ask: ``count`` new trials for ``worker_id``; ``key`` its Idempotency-Key, ``user_attrs``
    set on every trial it hands out."""

    count: int
    worker_id: str | None = None
    key: str | None = None
    user_attrs: dict[str, Any] | None = None


@dataclass(frozen=True)
class TellWrite:
    """A tell of trial ``trial_id``: its state and outcome (``value``, or ``values`` with several
    objectives; ``constraints``), the ``user_attrs`` it sets, and whether a failed trial was
    ``interrupted`` (stopped from outside: no fit learns from it)."""

    trial_id: int
    state: str
    value: float | None = None
    values: list[float] | None = None
    constraints: list[float] | None = None
    user_attrs: dict[str, Any] | None = None
    interrupted: bool = False


@dataclass(frozen=True)
class Told:
    """A tell's answer: the trial's view, whether the tell changed it (a repeat does not), and the
    study's completed trials after the batch."""

    view: TrialView
    changed: bool
    n_complete: int


Write = AskWrite | TellWrite
