"""What the sync and async ``optimize`` loops share: the trial budget, stopping,
results, turning an objective's return value into a tell, the trials and calls
in flight, and the reporters that let an objective report intermediate values
and be pruned."""

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


Outcome = tuple[float | list[float] | None, str | None, str | None]


def _number(result: Any) -> float:
    if isinstance(result, bool):
        raise TypeError("the objective returned a bool; it must return a number")
    try:
        return float(result)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the objective must return a number, got {_short(result)}") from exc


def _short(result: Any) -> str:
    text = repr(result)
    return text if len(text) <= 200 else text[:197] + "..."


def outcome(result: Any) -> Outcome:
    """(value, state, fail_reason) to tell for what the objective returned.

    A finite number is the trial's value; a list or tuple of numbers a multi-objective trial's
    values (whether the study has that many objectives is the server's to say: a 422). NaN or
    infinity marks it failed (as Optuna does), with the value as the reason. Anything that is
    not a number is the caller's bug: TypeError.
    """
    if isinstance(result, list | tuple):
        values = [_number(v) for v in result]
        if all(math.isfinite(v) for v in values):
            return values, None, None
        return None, "failed", f"the objective returned {_short(result)}"
    value = _number(result)
    if not math.isfinite(value):
        return None, "failed", f"the objective returned {value!r}"
    return value, None, None


def failed_attrs(reason: str | None) -> dict[str, Any] | None:
    """The ``user_attrs`` a failed trial is told with: ``{"fail_reason": reason}``."""
    return None if reason is None else {"fail_reason": reason}


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
    """The trials being evaluated and the asks and tells in flight of one ``optimize``.

    Each trial has one teller. A worker registers the trial it asked (:meth:`add`)
    and, once its objective is done, takes it back to tell it (:meth:`finish`).
    When the run is stopped from outside the workers (Ctrl-C, SIGTERM, a cancelled
    task), :meth:`close` hands the trials still being evaluated to the stopping
    code, which tells them failed; their workers then find them gone and tell
    nothing. Asks and tells are counted as calls (:meth:`begin_call`,
    :meth:`end_call`) so the stopping code can wait for those in flight
    (:meth:`wait_calls`) before the client closes; none starts after ``close``.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ids: set[int] = set()
        self._quiet: set[int] = set()  # running, but the server takes no heartbeats for them
        self._calls = 0
        self.reason: str | None = None  # set by close: why the run stopped

    def begin_call(self) -> bool:
        """Count an ask about to be sent; False once closed (send nothing)."""
        with self._cond:
            if self.reason is not None:
                return False
            self._calls += 1
            return True

    def end_call(self) -> None:
        with self._cond:
            self._calls -= 1
            self._cond.notify_all()

    def add(self, trial_id: int) -> bool:
        """Register a trial just asked; False once closed: its asker is to tell it failed."""
        with self._cond:
            if self.reason is not None:
                return False
            self._ids.add(trial_id)
            return True

    def finish(self, trial_id: int) -> bool:
        """Take a trial back to tell it, counting the tell as a call (end it with
        :meth:`end_call`); False when :meth:`close` took it (tell nothing)."""
        with self._cond:
            if trial_id not in self._ids:
                return False
            self._ids.discard(trial_id)
            self._quiet.discard(trial_id)
            self._calls += 1
            return True

    def close(self, reason: str) -> list[int]:
        """Stop the run: no call starts after this; the trials being evaluated, to tell failed."""
        with self._cond:
            if self.reason is None:
                self.reason = reason
            taken = sorted(self._ids)
            self._ids.clear()
            self._quiet.clear()
            return taken

    def wait_calls(self, timeout: float | None = None) -> bool:
        """Wait until no ask or tell is in flight; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._calls == 0, timeout)

    def stop_beating(self, trial_id: int) -> None:
        with self._cond:
            if trial_id in self._ids:
                self._quiet.add(trial_id)

    def snapshot(self) -> list[int]:
        """The running trials to send a heartbeat for."""
        with self._cond:
            return sorted(self._ids - self._quiet)
