"""The trial object ``optimize`` hands an objective: its params, and Optuna's trial methods.

An objective written for calibo reads ``params["x"]``; one written for Optuna calls
``trial.suggest_float("x", ...)``. :class:`SuggestTrial` is both: a ``dict`` of the params the
server asked for, with ``suggest_float`` / ``suggest_int`` / ``suggest_categorical`` (each returns
the asked value, after checking the call against the study's space), ``params``, ``number``,
``report(value, step)``, ``should_prune()``, ``set_user_attr`` and ``user_attrs``.
:class:`AsyncSuggestTrial` is the same for coroutine objectives, with ``await trial.report(...)``.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from ._optimize import AsyncReporter, Reporter
from .models import Trial

__all__ = ["AsyncSuggestTrial", "SpaceMismatch", "SuggestTrial"]


class SpaceMismatch(ValueError):
    """A ``suggest_*`` call that does not match the study's space: a parameter the space lacks,
    one inactive in this trial (a conditional parameter whose parent has another value), or
    another type, range, scale or choice list than the study's definition.

    It is a bug in the objective, not a failure of the trial's configuration: ``optimize`` tells
    the trial failed and raises it whatever ``catch`` says. ``param`` names the parameter.
    """

    caller_bug = True  # optimize's catch never takes it

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class StudySpace:
    """The study's space for one ``optimize``: known from the study's view, or read once, the
    first time a ``suggest_*`` call needs it (``fetch``). Thread-safe."""

    def __init__(self, space: dict[str, Any] | None,
                 fetch: Callable[[], dict[str, Any] | None] | None = None) -> None:
        self._space = dict(space) if isinstance(space, dict) else None
        self._fetch = fetch
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    @property
    def known(self) -> bool:
        return self._space is not None

    def set(self, space: Any) -> None:
        """The space read ahead (the async loop reads it on the event loop)."""
        if isinstance(space, dict):
            self._space = dict(space)

    def unavailable(self, exc: BaseException) -> None:
        """Reading it ahead failed: a ``suggest_*`` call raises this error."""
        self._error = exc

    def get(self) -> dict[str, Any]:
        with self._lock:
            if self._space is None:
                if self._fetch is None:
                    raise RuntimeError(f"the study's space could not be read: {self._error}") from self._error
                space = self._fetch()
                if not isinstance(space, dict):
                    raise RuntimeError("the study's view has no space")
                self._space = dict(space)
            return self._space


def _described(d: dict[str, Any]) -> str:
    """A parameter's definition in words: ``float in [0.001, 1.0], log``; ``categorical ['a', 'b']``."""
    kind = d.get("type")
    if kind in ("categorical", "ordinal"):
        return f"{kind} {list(d.get('choices') or [])!r}"
    text = f"{kind} in [{d.get('low')!r}, {d.get('high')!r}]"
    if d.get("log"):
        text += ", log"
    if "step" in d:
        text += f", step {d['step']!r}"
    return text


def _same_number(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except (TypeError, ValueError):
        return False


def _same_choices(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(
        x == y and isinstance(x, bool) == isinstance(y, bool) for x, y in zip(a, b, strict=True)
    )


def _matches(defined: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether the call's distribution (``wanted``, in the space's terms) is the study's ``defined``."""
    kind = defined.get("type")
    if wanted["type"] == "categorical":
        choices = defined.get("choices")
        return (kind in ("categorical", "ordinal") and isinstance(choices, list)
                and _same_choices(list(wanted["choices"]), choices))
    if kind != wanted["type"] or "step" in wanted:
        return False
    return (_same_number(defined.get("low"), wanted["low"]) and _same_number(defined.get("high"), wanted["high"])
            and bool(defined.get("log", False)) == bool(wanted["log"]))


class SuggestTrial(dict[str, Any]):
    """The trial a plain (blocking) objective gets: a ``dict`` of its params, with Optuna's trial methods.

    ``params["x"]`` reads the value the server asked for, as calibo objectives always did;
    ``suggest_float`` / ``suggest_int`` / ``suggest_categorical`` return the same values, after
    checking the call against the study's space (:class:`~calibo.SpaceMismatch` otherwise).
    ``report(value, step)`` (Optuna's argument order) sends an intermediate value and returns
    the server's ``should_prune``; raise :class:`~calibo.TrialPruned` (or Optuna's) to stop: the
    trial is told pruned with its last reported value. A copy (``dict(trial)``, ``copy.copy``,
    pickle) is a plain ``dict`` of the params.
    """

    __slots__ = ("_asked", "_attrs", "_reporter", "_space", "_suggested", "study")

    def __init__(self, asked: Trial, space: StudySpace, reporter: Reporter | AsyncReporter | None = None,
                 study: Any = None) -> None:
        super().__init__(asked.params)
        self._asked = asked
        self._space = space
        self._reporter = reporter
        self._suggested: dict[str, Any] = {}
        self._attrs: dict[str, Any] = {}
        self.study = study  # the study handle optimize runs on (``trial.study.stop()``)

    def __reduce__(self) -> tuple[Any, ...]:  # copy / pickle: the params, as a plain dict
        return (dict, (dict(self),))

    @property
    def id(self) -> int:
        return self._asked.id

    @property
    def number(self) -> int:
        """The trial's number in its study (from 0), as Optuna's ``trial.number``."""
        return self._asked.number

    @property
    def asked(self) -> Trial:
        """The trial as ``ask`` answered it (params, prediction, origin)."""
        return self._asked

    @property
    def params(self) -> dict[str, Any]:
        """The values suggested so far, as Optuna's ``trial.params`` (the mapping itself holds
        every parameter the server asked for)."""
        return dict(self._suggested)

    @property
    def user_attrs(self) -> dict[str, Any]:
        """The trial's user attributes: those it was asked with, and those set since."""
        return {**self._asked.user_attrs, **self._attrs}

    def set_user_attr(self, key: str, value: Any) -> None:
        """Set a user attribute, sent with the trial's tell (its value must be JSON)."""
        if not isinstance(key, str):
            raise TypeError(f"a user attribute's key is a string, got {key!r}")
        json.dumps(value)  # a TypeError now rather than a 422 at the tell
        self._attrs[key] = value

    def told_attrs(self) -> dict[str, Any]:
        """The user attributes set by the objective: the tell sends them."""
        return dict(self._attrs)

    def report(self, value: float, step: int) -> bool:
        """Report ``value`` at ``step`` (an int >= 0); True: the study's pruner says stop."""
        if self._reporter is None:
            raise RuntimeError("this trial has no reporter: it was not made by optimize")
        return bool(self._reporter.report(step, value))  # a Reporter: AsyncSuggestTrial awaits its own

    def should_prune(self) -> bool:
        """The server's answer to the last report (False before any)."""
        return bool(self._reporter.should_prune) if self._reporter is not None else False

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        """The value of float parameter ``name`` in this trial; ``low``, ``high`` and ``log`` must be
        the study's (a calibo space has no float ``step``: a grid is an int or ordinal parameter)."""
        wanted: dict[str, Any] = {"type": "float", "low": low, "high": high, "log": log}
        if step is not None:
            wanted["step"] = step
        return float(self._value(name, wanted, "suggest_float"))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        """The value of int parameter ``name`` in this trial; ``low``, ``high`` and ``log`` must be the
        study's (and ``step`` 1: a calibo int parameter takes every integer)."""
        wanted: dict[str, Any] = {"type": "int", "low": low, "high": high, "log": log}
        if step != 1:
            wanted["step"] = step
        return int(self._value(name, wanted, "suggest_int"))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        """The value of categorical (or ordinal) parameter ``name``; ``choices`` must be the study's,
        in its order."""
        if isinstance(choices, str) or not isinstance(choices, Sequence):
            raise TypeError(f"suggest_categorical({name!r}, ...): choices must be a list, got {choices!r}")
        return self._value(name, {"type": "categorical", "choices": list(choices)}, "suggest_categorical")

    def _value(self, name: str, wanted: dict[str, Any], method: str) -> Any:
        space = self._space.get()
        defined = space.get(name)
        if not isinstance(defined, dict):
            known = ", ".join(repr(n) for n in space) or "none"
            raise SpaceMismatch(f"{method}({name!r}, ...): the study's space has no parameter {name!r} "
                                f"(its parameters: {known})", name)
        if not _matches(defined, wanted):
            hint = " (a calibo space has no step: make the parameter an int or ordinal one)" if "step" in wanted else ""
            raise SpaceMismatch(f"{method}({name!r}, ...) asks for {_described(wanted)}, but the study defines "
                                f"{name!r} as {_described(defined)}{hint}", name)
        if name not in self._asked.params:
            raise SpaceMismatch(self._inactive(name, defined, space), name)
        value = self._asked.params[name]
        self._suggested[name] = value
        return value

    def _inactive(self, name: str, defined: dict[str, Any], space: dict[str, Any]) -> str:
        condition = defined.get("condition")
        if not isinstance(condition, dict):
            return f"the server asked no value for parameter {name!r} in this trial"
        parent, values = condition.get("parent"), condition.get("values")
        if parent not in self._asked.params:
            why = f"its parent {parent!r} is itself inactive"
        else:
            why = f"this trial's {parent!r} is {self._asked.params[parent]!r}"
        return (f"parameter {name!r} is inactive in this trial: the study's space makes it active only "
                f"when {parent!r} is one of {values!r}, and {why}")


class AsyncSuggestTrial(SuggestTrial):
    """:class:`SuggestTrial` for coroutine objectives: ``await trial.report(value, step)``
    (the ``suggest_*`` methods are plain calls, as the space is read before the objective runs)."""

    __slots__ = ()

    async def report(self, value: float, step: int) -> bool:  # type: ignore[override]  # awaited in coroutines
        """Report ``value`` at ``step``; True: the study's pruner says stop."""
        if self._reporter is None:
            raise RuntimeError("this trial has no reporter: it was not made by optimize")
        report: Callable[[int, float], Awaitable[bool]] = cast(AsyncReporter, self._reporter).report
        return bool(await report(step, value))
