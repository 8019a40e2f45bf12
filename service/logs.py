"""Logging that stays readable through an outage: one line per kind of failure per interval."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter


class Throttled:
    """Emit at most one record per ``kind`` every ``interval`` seconds; count the rest.

    The next record of a kind says how many were held back since the last one,
    so nothing is hidden, only folded. Thread-safe.
    """

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def log(self, level: int, kind: str, msg: str, *args: object, exc_info: BaseException | None = None) -> bool:
        """Log unless ``kind`` was logged less than ``interval`` ago; whether it logged."""
        t = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and t - last < self.interval:
                self._held[kind] += 1
                return False
            self._last[kind] = t
            held = self._held.pop(kind, 0)
        if held:
            msg += f" ({held} more like it in the last {self.interval:g} s)"
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def reset(self, kind: str) -> int:
        """Forget ``kind`` (the failure is over); how many were held back."""
        with self._lock:
            self._last.pop(kind, None)
            return self._held.pop(kind, 0)


def one_line(e: BaseException, limit: int = 200) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
