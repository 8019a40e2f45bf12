"""What the sync and async ``optimize`` loops share: the trial budget, stopping,
results, turning an objective's return value into a tell, and the reporters
that let an objective report intermediate values and be pruned."""

from __future__ import annotations

import inspect
import math
import os
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import CaliboError
from .models import Trial

__all__ = ["AsyncReporter", "Reporter"]

TrialView = dict[str, Any]
Callback = Callable[[TrialView], Any]


class _Reported:
    """What a reporter remembers of its trial: the last report and its answer."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self._last: tuple[int, float] | None = None
        self._should_prune = False
        self._lock = threading.Lock()

    @property
    def should_prune(self) -> bool:
        """The server's answer to the last report (False before any)."""
        return self._should_prune

    @property
    def last(self) -> tuple[int, float] | None:
        """The last ``(step, value)`` the server took, or None before any."""
        return self._last

    def _took(self, step: int, value: float, should_prune: bool) -> bool:
        with self._lock:
            self._last = (int(step), float(value))
            self._should_prune = should_prune
        return should_prune

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(trial={self.trial.id}, last={self._last!r}, "
            f"should_prune={self._should_prune!r})"
        )


class Reporter(_Reported):
    """Reports one trial's intermediate values: what a two-parameter objective gets.

    ``report(step, value)`` sends ``value`` at ``step`` (an int >= 0: epoch,
    iteration, resource used) and returns the server's ``should_prune``; stop by
    raising :class:`~calibo.TrialPruned`. A call that fails raises the client's
    error (:class:`~calibo.Conflict` for another value at a step already
    reported or a finished trial) and changes neither ``last`` nor
    ``should_prune``. ``send(step, value) -> bool`` does the call; to test an
    objective offline, ``Reporter(trial, lambda step, value: False)``.
    """

    def __init__(self, trial: Trial, send: Callable[[int, float], bool]) -> None:
        super().__init__(trial)
        self._send = send

    def report(self, step: int, value: float) -> bool:
        return self._took(step, value, self._send(step, value))


class AsyncReporter(_Reported):
    """:class:`Reporter` for coroutine objectives: ``await reporter.report(step, value)``."""

    def __init__(self, trial: Trial, send: Callable[[int, float], Awaitable[bool]]) -> None:
        super().__init__(trial)
        self._send = send

    async def report(self, step: int, value: float) -> bool:
        return self._took(step, value, await self._send(step, value))


def wants_reporter(objective: Callable[..., Any]) -> bool:
    """Whether ``objective`` takes ``(params, reporter)`` rather than ``(params)``.

    It does when its signature has at least two positional parameters without a
    default: ``def objective(params, reporter)``. ``(params, scale=2.0)``,
    ``(params, *args)`` and callables without a signature get ``params`` alone.
    """
    try:
        signature = inspect.signature(objective)
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [
        p
        for p in signature.parameters.values()
        if p.kind in positional and p.default is inspect.Parameter.empty
    ]
    return len(required) >= 2


def is_coroutine_callable(objective: Callable[..., Any]) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(objective):
        return True
    call = getattr(type(objective), "__call__", None)  # noqa: B004 -- the method, not callable()
    return inspect.iscoroutinefunction(call)


def pruned_outcome(reporter: _Reported | None) -> tuple[float | None, str]:
    """(value, state) to tell for a trial its objective pruned: the last value reported."""
    last = reporter.last if reporter is not None else None
    return (last[1] if last is not None else None), "pruned"


def worker_id(index: int) -> str:
    """``host-pid-index``: unique per worker across the machines sharing a study."""
    return f"{socket.gethostname()}-{os.getpid()}-{index}"


def check_arguments(n_trials: int, n_workers: int, heartbeat_interval: float | None) -> None:
    if n_trials < 0:
        raise ValueError("n_trials must be >= 0")
    if n_workers < 1:
        raise ValueError("n_workers must be >= 1")
    if heartbeat_interval is not None and not heartbeat_interval > 0:
        raise ValueError("heartbeat_interval must be > 0 or None")


def catchable(exc: BaseException, catch: tuple[type[BaseException], ...]) -> bool:
    """Whether a failed objective is one to record as a failed trial and go on from."""
    return isinstance(exc, Exception) and bool(catch) and isinstance(exc, catch)


def outcome(result: Any) -> tuple[float | list[float] | None, str | None]:
    """(value, state) to tell for what the objective returned.

    A finite number is the trial's value; a list or tuple of numbers a multi-objective trial's
    values. NaN or infinity marks it failed (as Optuna does). Anything that is not a number is the
    caller's bug: TypeError.
    """
    if isinstance(result, list | tuple):
        values = [outcome(v)[0] for v in result]
        return (None, "failed") if any(v is None for v in values) else (values, None)
    if isinstance(result, bool):
        raise TypeError("the objective returned a bool; it must return a number")
    try:
        value = float(result)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the objective must return a number, got {result!r}") from exc
    if not math.isfinite(value):
        return None, "failed"
    return value, None


def ends_heartbeats(exc: CaliboError) -> bool:
    """Whether a heartbeat's error means the trial takes no more heartbeats.

    409: the trial is finished, or the server gave it up (``trial_expired``) after
    its heartbeats stopped; 404: the trial or its study is gone. Either way the
    objective goes on and its result is told (a late tell is recorded). Any other
    error (the server away past the retries) is worth another beat later.
    """
    return exc.status in (404, 409)


def no_trial_error() -> CaliboError:
    return CaliboError("ask answered no trial", code="invalid_response")


class Run:
    """Shared state of one ``optimize``: trials left to ask, results, the first error.

    Thread-safe; in the async loop every method runs on the event loop thread and
    holds the lock only briefly, without awaiting.
    """

    def __init__(self, n_trials: int, callback: Callback | None) -> None:
        self._left = n_trials
        self._lock = threading.Lock()
        self._callback = callback
        self.stopped = threading.Event()
        self.results: list[TrialView] = []
        self.error: BaseException | None = None

    def take(self) -> bool:
        """Claim one trial of the budget; False once it is spent or the run stopped."""
        with self._lock:
            if self.stopped.is_set() or self._left <= 0:
                return False
            self._left -= 1
            return True

    def record(self, view: TrialView) -> None:
        with self._lock:
            self.results.append(view)
        if self._callback is not None:
            self._callback(view)

    def fail(self, exc: BaseException) -> None:
        """Stop every worker after its current trial; the first error is the one raised."""
        with self._lock:
            if self.error is None:
                self.error = exc
        self.stopped.set()


class Running:
    """The trials being evaluated right now, for the heartbeat loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[int] = set()
        self._quiet: set[int] = set()  # running, but the server takes no heartbeats for them

    def add(self, trial_id: int) -> None:
        with self._lock:
            self._ids.add(trial_id)

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self._ids.discard(trial_id)
            self._quiet.discard(trial_id)

    def stop_beating(self, trial_id: int) -> None:
        with self._lock:
            if trial_id in self._ids:
                self._quiet.add(trial_id)

    def snapshot(self) -> list[int]:
        """The running trials to send a heartbeat for."""
        with self._lock:
            return sorted(self._ids - self._quiet)
