"""Logging: one line per kind of failure per interval (readable through an outage), the request id
of the request a line belongs to, and a JSON-lines format (``CALIBO_LOG_FORMAT=json``)."""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import time
from collections import Counter
from datetime import UTC, datetime

# the id of the request being served (see api.middleware.RequestContext); "-" outside any request
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("calibo_request_id", default="-")
# what every record has (and uvicorn's coloured copy of its message): not an extra field of the line
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime",
                                                                                   "color_message"}


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every record (``%(request_id)s`` in a text format)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, the record's extra
    fields (an access line's method, path, status, duration) and the traceback, if any."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
               "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage(),
               "request_id": getattr(record, "request_id", request_id.get())}
        out.update({k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS and k not in out})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def configure(level: str, fmt: str = "text") -> None:
    """The root logger of a calibo process: ``text`` lines or ``json`` lines on stderr, each with
    the id of the request it belongs to."""
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


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
