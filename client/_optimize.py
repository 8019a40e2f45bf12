"""What the sync and async ``optimize`` loops share: the trial budget, stopping,
results, turning an objective's return value into a tell, the trials and calls
in flight, and the reporters that let an objective report intermediate values
and be pruned."""

from __future__ import annotations

import contextlib
import gc
import inspect
import math
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import CaliboError, TrialPruned
from .models import Trial, TrialRecord

__all__ = ["AsyncReporter", "Reporter"]

TrialView = dict[str, Any]
Callback = Callable[[TrialView], Any]
# Optuna's form: ``callback(study, trial_record)`` after each finished trial
StudyCallback = Callable[[Any, TrialRecord], Any]


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


@dataclass(frozen=True)
class Options:
    """``optimize``'s arguments, checked (see :func:`options`)."""

    n_trials: int | None
    timeout: float | None
    n_workers: int
    catch: tuple[type[BaseException], ...]
    callback: Callback | None
    callbacks: tuple[StudyCallback, ...]
    show_progress_bar: bool
    heartbeat_interval: float | None
    gc_after_trial: bool = False

    @property
    def asks_any(self) -> bool:
        """Whether the run may ask a trial at all (``n_trials=0`` asks none)."""
        return self.n_trials is None or self.n_trials > 0


def options(*, n_trials: int | None = None, timeout: float | None = None, n_workers: int = 1,
            n_jobs: int | None = None, catch: Any = (), callback: Callback | None = None,
            callbacks: Iterable[StudyCallback] | None = None, show_progress_bar: bool = False,
            heartbeat_interval: float | None = 30.0, gc_after_trial: bool = False) -> Options:
    """Check ``optimize``'s arguments as Optuna reads them; a clear ValueError / TypeError otherwise.

    ``n_trials``: None (no limit) or an int >= 0. ``timeout``: None (no limit) or seconds > 0.
    ``n_jobs`` is Optuna's name for ``n_workers`` (give one of them); -1 means one per CPU
    (``os.cpu_count()``). ``catch``: an exception type or an iterable of them.
    """
    if n_trials is not None and (isinstance(n_trials, bool) or not isinstance(n_trials, int)):
        raise TypeError(f"n_trials must be an int or None, got {n_trials!r}")
    if n_trials is not None and n_trials < 0:
        raise ValueError(f"n_trials must be >= 0 or None (no limit), got {n_trials}")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
        if not timeout > 0:  # NaN too
            raise ValueError(f"timeout must be > 0 seconds or None (no limit), got {timeout!r}")
        if math.isinf(timeout):
            timeout = None
    if n_jobs is not None:
        if n_workers != 1 and n_workers != n_jobs:
            raise ValueError("give n_workers or n_jobs (Optuna's name for it), not both")
        n_workers = n_jobs
    if isinstance(n_workers, bool) or not isinstance(n_workers, int):
        raise TypeError(f"n_workers must be an int, got {n_workers!r}")
    if n_workers == -1:
        n_workers = os.cpu_count() or 1
    if n_workers < 1:
        raise ValueError(f"n_workers (n_jobs) must be >= 1, or -1 for one per CPU; got {n_workers}")
    if heartbeat_interval is not None and not heartbeat_interval > 0:
        raise ValueError("heartbeat_interval must be > 0 or None")
    if callbacks is None:
        callbacks = ()
    elif callable(callbacks) or not isinstance(callbacks, Iterable):
        raise TypeError("callbacks must be a list of callables callback(study, trial) "
                        "(callback= takes a single one)")
    callbacks = tuple(callbacks)
    if not all(callable(c) for c in callbacks):
        raise TypeError("every item of callbacks must be callable as callback(study, trial)")
    if callback is not None and not callable(callback):
        raise TypeError("callback must be callable")
    return Options(n_trials=n_trials, timeout=timeout, n_workers=n_workers, catch=_catch(catch),
                   callback=callback, callbacks=callbacks, show_progress_bar=bool(show_progress_bar),
                   heartbeat_interval=heartbeat_interval, gc_after_trial=bool(gc_after_trial))


def _catch(catch: Any) -> tuple[type[BaseException], ...]:
    """Optuna's ``catch``: one exception type, or an iterable of them."""
    types = (catch,) if isinstance(catch, type) else tuple(catch)
    bad = [c for c in types if not (isinstance(c, type) and issubclass(c, BaseException))]
    if bad:
        raise TypeError(f"catch takes exception types, got {bad[0]!r}")
    return types


def is_pruned(exc: BaseException) -> bool:
    """:class:`~calibo.TrialPruned`, or Optuna's ``optuna.TrialPruned`` (recognised by its class,
    without importing optuna): an objective written for Optuna raises that one."""
    if isinstance(exc, TrialPruned):
        return True
    return any(cls.__name__ == "TrialPruned" and cls.__module__.split(".")[0] == "optuna"
               for cls in type(exc).__mro__)


def catchable(exc: BaseException, catch: tuple[type[BaseException], ...]) -> bool:
    """Whether a failed objective is one to record as a failed trial and go on from.

    An error marked ``caller_bug`` (a ``suggest_*`` call that does not match the study's space)
    never is: it is a bug in the objective, not a failure of the trial's configuration.
    """
    if getattr(exc, "caller_bug", False):
        return False
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


def interrupts(exc: BaseException) -> bool:
    """Whether an objective ending with ``exc`` was stopped from outside rather than failing: Ctrl-C,
    SIGTERM, a cancelled task, an exiting process (none is an ``Exception``). Its trial is told
    failed and ``interrupted``: the study does not learn its configuration as a failure."""
    return not isinstance(exc, Exception)


def failed_attrs(reason: str | None, attrs: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``user_attrs`` a trial is told with: those the objective set (``attrs``), and for a
    failed trial ``{"fail_reason": reason}``; None when there are none."""
    told = dict(attrs or {})
    if reason is not None:
        told["fail_reason"] = reason
    return told or None


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


class Notify(Protocol):
    def __call__(self, view: TrialView) -> None: ...


class Run:
    """Shared state of one ``optimize``: trials left to ask, the deadline, results, the first error.

    ``n_trials`` None: no limit; ``timeout`` (seconds, None: no limit): no trial is taken once
    it has passed since the run began. ``notify(view)`` runs after each tell (the callbacks and
    the progress bar), one call at a time. Thread-safe; in the async loop every method runs on
    the event loop thread and holds the lock only briefly, without awaiting.
    """

    def __init__(self, n_trials: int | None, notify: Notify | None = None, timeout: float | None = None) -> None:
        self._left = n_trials
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._lock = threading.Lock()
        self._notify_lock = threading.Lock()
        self._notify = notify
        self.stopped = threading.Event()
        self.results: list[TrialView] = []
        self.error: BaseException | None = None

    def take(self) -> bool:
        """Claim one trial of the budget; False once it is spent, the time is up or the run stopped."""
        with self._lock:
            if self.stopped.is_set() or (self._left is not None and self._left <= 0):
                return False
            if self._deadline is not None and time.monotonic() >= self._deadline:
                return False
            if self._left is not None:
                self._left -= 1
            return True

    def stop(self) -> None:
        """Optuna's ``Study.stop``: no trial is taken after this; those running finish and are told."""
        self.stopped.set()

    def record(self, view: TrialView) -> None:
        with self._lock:
            self.results.append(view)
        if self._notify is not None:
            with self._notify_lock:
                self._notify(view)

    def fail(self, exc: BaseException) -> None:
        """Stop every worker after its current trial; the first error is the one raised."""
        with self._lock:
            if self.error is None:
                self.error = exc
        self.stopped.set()


def notifier(opts: Options, handle: Any, study_id: int, progress: Any) -> Notify | None:
    """What a run does after each tell: ``gc.collect()`` with ``gc_after_trial`` (as Optuna, before
    the callbacks), ``callback(view)``, then each of ``callbacks(handle, record)`` in order (Optuna's
    ``callback(study, frozen_trial)``), then the progress bar."""
    if opts.callback is None and not opts.callbacks and progress is None and not opts.gc_after_trial:
        return None

    def notify(view: TrialView) -> None:
        if opts.gc_after_trial:
            gc.collect()
        if opts.callback is not None:
            opts.callback(view)
        if opts.callbacks or progress is not None:
            record = TrialRecord.from_wire(view, study_id)
            for callback in opts.callbacks:
                callback(handle, record)
            if progress is not None:
                progress.update(record)

    return notify


_active: dict[int, tuple[Any, set[Run]]] = {}  # id(study handle) -> (handle, its runs)
_active_lock = threading.Lock()


@contextlib.contextmanager
def running_on(handle: Any, run: Run) -> Iterator[None]:
    """Register ``run`` as an ``optimize`` of ``handle`` for its span, for ``handle.stop()``."""
    with _active_lock:
        _active.setdefault(id(handle), (handle, set()))[1].add(run)
    try:
        yield
    finally:
        with _active_lock:
            runs = _active[id(handle)][1]
            runs.discard(run)
            if not runs:
                del _active[id(handle)]


def stop_runs(handle: Any) -> None:
    """``Study.stop()``: stop every ``optimize`` running on this handle after its current trials."""
    with _active_lock:
        runs = list(_active.get(id(handle), (None, set()))[1])
    if not runs:
        raise RuntimeError("Study.stop() stops a running optimize: call it from an objective or a "
                           "callback of this study's optimize")
    for run in runs:
        run.stop()


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


def handle_view(study: Any, study_id: int) -> dict[str, Any]:
    """The view a new study handle for callbacks and trials starts from: ``study``'s own view when
    it is a handle, the dict given, or its id alone (``refresh()`` reads the rest)."""
    if isinstance(getattr(study, "view", None), dict):
        return dict(study.view)
    return dict(study) if isinstance(study, dict) else {"id": study_id}
