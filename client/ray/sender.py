"""What the searcher sends in the background, so Tune's driver never waits on HTTP: one thread
runs the queued reports and tells in order, and the trials' heartbeats when they are due."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .._sync import Client
from ..errors import CaliboError, Conflict, ConnectionFailed, InvalidRequest, ServerError

logger = logging.getLogger("calibo.ray")

FLUSH_TIMEOUT = 60.0  # seconds shutdown waits for the queued reports and tells
# what a trial asked ahead and never handed to Tune is told with (state failed)
UNUSED = {"ray": "unused", "fail_reason": "asked ahead by calibo.ray, never handed to Tune"}
RETRY_FOR = 600.0  # seconds the sender keeps retrying a tell through an outage (after the client's own retries)


class Sender:
    """One daemon thread that runs queued calls in order (reports, tells, heartbeats): the driver
    never waits on HTTP. ``flush`` waits until everything queued so far has been sent."""

    def __init__(self, heartbeat: Callable[[], None] | None, every: float | None) -> None:
        self._cond = threading.Condition()
        self._items: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._busy = 0
        self._heartbeat = heartbeat
        self._every = every
        self._thread: threading.Thread | None = None
        self._closed = False

    def put(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            self._items.append((fn, args))
            self._busy += 1
            self._start_locked()
            self._cond.notify_all()

    def start(self) -> None:
        """Start the thread (for the heartbeats) before anything is queued."""
        with self._cond:
            self._start_locked()

    def _start_locked(self) -> None:
        self._closed = False
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="calibo-ray-sender", daemon=True)
            self._thread.start()

    def flush(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def pending(self) -> int:
        with self._cond:
            return self._busy

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        last_beat = time.monotonic()
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    wait = None if self._every is None else last_beat + self._every - time.monotonic()
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._closed and not self._items:
                    return
                beat = self._every is not None and time.monotonic() >= last_beat + self._every
                item = None if beat else self._items.popleft()
            if item is None:  # the heartbeats are due (before anything else queued)
                last_beat = time.monotonic()
                if self._heartbeat is not None:
                    try:
                        self._heartbeat()
                    except Exception as e:  # noqa: BLE001 - a missed heartbeat is retried next time
                        logger.debug("heartbeats failed: %r", e)
                continue
            fn, args = item
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - logged; the sender goes on with the next call
                logger.exception("calibo.ray: a queued call failed")
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()


def send_report(client: Client, stats: dict[str, Any], study: int, cid: int, step: int, value: float) -> None:
    try:
        client.report(study, cid, step, value)
        stats["reported"] += 1
    except Conflict as e:  # a step told again with another value (a trial Tune restarted), or told
        logger.debug("calibo.ray: report of trial %s step %s: %s", cid, step, e)
    except CaliboError as e:
        logger.warning("calibo.ray: report of trial %s step %s failed: %s", cid, step, e)


def send_tell(client: Client, study: int, cid: int, state: str, value: float | None, attrs: dict[str, Any]) -> None:
    """Tell a trial ``state`` (complete, pruned, failed) with ``value``; through an outage of up to
    ``RETRY_FOR`` seconds; a refused value is told failed with the server's reason."""
    deadline = time.monotonic() + RETRY_FOR
    delay = 1.0
    while True:
        try:
            client.tell(study, cid, value, state=None if state == "complete" else state, user_attrs=attrs)
            return
        except Conflict as e:  # told otherwise already (expired trials still take their tell)
            logger.warning("calibo.ray: trial %s was not told %s: %s", cid, state, e)
            return
        except InvalidRequest as e:
            if state == "failed":
                logger.error("calibo.ray: trial %s could not be told failed: %s", cid, e)
                return
            logger.warning("calibo.ray: trial %s: the server refused %s (%s); told failed", cid, state, e)
            state, value = "failed", None
            attrs = {**attrs, "fail_reason": f"refused: {e.message}"[:200]}
        except (ConnectionFailed, ServerError) as e:
            if time.monotonic() > deadline:
                logger.error("calibo.ray: trial %s not told (%s) after %.0f s: %s", cid, state, RETRY_FOR, e)
                return
            logger.warning("calibo.ray: telling trial %s: %s; retrying", cid, e)
            time.sleep(delay)
            delay = min(2 * delay, 30.0)
