"""SIGINT and SIGTERM while an ``optimize`` runs: an orderly stop instead of a lost trial.

:class:`StopSignals` is entered by ``Client.optimize`` and ``AsyncClient.optimize``.
In the main thread (the only one Python runs signal handlers in) it installs a
handler for SIGINT and SIGTERM and puts the previous ones back on exit; in any
other thread it does nothing. A signal whose previous handler is a Python one
goes on to it (asyncio.run's SIGINT handler, an application's own); one left to
the default becomes an exception: ``KeyboardInterrupt`` for SIGINT,
:class:`~calibo.Terminated` for SIGTERM. A signal ignored before stays ignored.

Blocking loop (``cancel`` None): the exception is raised in the main thread,
except while it is inside :meth:`StopSignals.deferred` (an ask or a tell in
flight, so that a trial is never asked without being known, nor half told),
where the first signal waits for the section's end. A second signal is handed
on at once.

Event loop (``cancel`` given): raising inside the loop's machinery would cut
every task off halfway, so the first signal calls ``cancel()`` (which cancels
the task running ``optimize``) and keeps the exception in :attr:`raised`, for
``optimize`` to raise once it has stopped. A second signal raises at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any, cast

from .errors import Terminated

__all__ = ["StopSignals", "fail_reason", "wait_for_stop"]

MAX_REASON = 500  # characters of a fail_reason: a user attribute, not a log
SIGNALS = (signal.SIGINT, signal.SIGTERM)
Handler = Callable[[int, FrameType | None], Any] | int | None


def fail_reason(exc: BaseException) -> str:
    """``"Type: message"`` (``"Type"`` alone without a message), at most ``MAX_REASON`` characters."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def _exception_for(signum: int, previous: Handler) -> BaseException | None:
    """What a signal left to Python's default becomes; None when a handler of its own takes it."""
    if previous is signal.default_int_handler or (previous == signal.SIG_DFL and signum == signal.SIGINT):
        return KeyboardInterrupt()
    if previous == signal.SIG_DFL:
        return Terminated()
    return None


def wait_for_stop() -> None:
    """Block until SIGTERM (a container stop; the main thread only, where Python runs signal handlers)
    or Ctrl-C: the wait of a command that serves until it is stopped (``calibo katib``,
    ``calibo optuna-grpc``, ``calibo optuna-dashboard``), which then lets its calls in flight finish."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass


class StopSignals:
    """SIGINT and SIGTERM handling for the span of one ``optimize`` (a context manager)."""

    def __init__(self, cancel: Callable[[], object] | None = None) -> None:
        self._cancel = cancel
        self._previous: dict[int, Handler] = {}
        self._thread: threading.Thread | None = None
        self._deferring = 0
        self._pending: tuple[int, FrameType | None] | None = None
        self.received: list[int] = []
        self.raised: BaseException | None = None  # event loop: what optimize raises once stopped

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._thread = threading.current_thread()
            for signum in SIGNALS:
                previous = signal.getsignal(signum)
                if previous is None or previous == signal.SIG_IGN:
                    continue  # ignored, or set outside Python: leave it alone
                self._previous[signum] = previous
                signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def reason(self) -> str | None:
        """The fail_reason of the first signal received, or None."""
        if not self.received:
            return None
        return fail_reason(KeyboardInterrupt() if self.received[0] == signal.SIGINT else Terminated())

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """In the main thread of a blocking loop: a first signal waits for the block's end."""
        if threading.current_thread() is not self._thread or self._cancel is not None:
            yield
            return
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            if not self._deferring and self._pending is not None:
                pending, self._pending = self._pending, None
                self._deliver(*pending)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if len(self.received) == 1 and self._deferring:
            self._pending = (signum, frame)
            return
        self._deliver(signum, frame)

    def _deliver(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        exc = _exception_for(signum, previous)
        if exc is None:
            cast(Callable[[int, FrameType | None], Any], previous)(signum, frame)  # a Python handler: callable
        elif self._cancel is not None and self.raised is None:
            self.raised = exc
            self._cancel()
        else:
            raise exc
