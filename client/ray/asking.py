"""A ``CaliboSearch``'s asks: the trials asked ahead of Tune and for its free slots, the background
asker that makes them, and the bounded wait of ``suggest`` for the ask that is out."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections import deque

    from .._sync import Client
    from ..models import Trial
    from .sender import Sender

logger = logging.getLogger("calibo.ray")

# trials asked ahead of Tune: each is chosen knowing fewer results the more are ahead. On 4 tasks x 5
# seeds with 8 in flight (benchmarks/ray_tune.py), 2 ahead ranked 2.12 against 2.55 with 4 and 2.52 with
# 8 (Optuna TPE 1.9-2.0, GP 2.4-2.6); the cost, slots left empty while an ask is out, shows only when
# trials last less than an ask (about a second)
DEFAULT_BATCH = 2
# seconds suggest waits, while trials run, for the ask already out: Tune keeps one finished trial's
# worker for the next trial and stops the others, so a slot answered None costs a new worker later
ASK_OUT_WAIT = 1.0
ASK_MOST = 256  # the most trials one ask may ask for (the server's AskRequest.count bound)


class Asking:
    """Asking ahead, for :class:`~calibo.ray.CaliboSearch` (its state is set up in its ``_setup``)."""

    if TYPE_CHECKING:  # CaliboSearch's, which this class is mixed into
        _lock: threading.Condition
        _queue: deque[Trial]
        _live: set[str]
        _trials: dict[str, int]
        _job: tuple[int, str] | None
        _asking: bool
        _asker: threading.Thread | None
        _fetch_error: BaseException | None
        _retry_at: float
        _fetch_no: int
        _session: str
        _handed: int
        _finished: bool
        _hold: bool
        _closed: bool
        _batch: int | None
        _max_trials: int | None
        _num_samples: int | None
        _max_concurrent: int | None
        _study_id: int | None
        _worker_id: str
        _sender: Sender
        stats: dict[str, Any]

        @property
        def client(self) -> Client: ...
        def _ensure_study(self) -> int: ...
        def _release_locked(self, why: str) -> None: ...

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Tune's ``ConcurrencyLimiter`` (``max_concurrent_trials``) says how many trials may run at once:
        an ask then covers every slot Tune has free (see ``_maybe_fetch_locked``). False: the limiter
        still does the limiting."""
        self._max_concurrent = max_concurrent if max_concurrent and max_concurrent > 0 else None
        return False

    @property
    def batch(self) -> int:
        """How many trials are asked for ahead of Tune."""
        return self._batch if self._batch is not None else DEFAULT_BATCH

    def _wait_for_ask_out_locked(self) -> None:
        """While trials run, wait up to ``ASK_OUT_WAIT`` for the ask that is out (one an ask's time,
        the newest fit's on the server at most) rather than answer None at once."""
        if not (self._asking or self._job is not None):
            return
        t0 = time.perf_counter()
        deadline = time.monotonic() + ASK_OUT_WAIT
        while not self._queue and (self._asking or self._job is not None) and time.monotonic() < deadline:
            self._lock.wait(max(0.0, deadline - time.monotonic()))
        self.stats["suggest_waits"] += 1
        self.stats["suggest_wait_s"] += time.perf_counter() - t0

    def _maybe_fetch_locked(self) -> None:
        """Have the asker ask for more when half the batch is handed out, or when Tune has more slots
        free than trials are held for it (never past the budget).

        The batch is asked ahead of Tune; free slots are not ahead: Tune starts a trial in each at once.
        With ``max_concurrent`` known, one ask covers them all, where one trial an ask (each waiting on
        the server for the newest fit) left the slots empty for an ask's time each.
        """
        if self._job is not None or self._asking or self._finished or self._hold or self._closed:
            return
        if time.monotonic() < self._retry_at:
            return
        batch = self.batch
        free = 0 if self._max_concurrent is None else self._max_concurrent - len(self._live) - len(self._queue)
        if len(self._queue) > batch // 2 and free <= 0:
            return
        want = min(max(batch - len(self._queue), free), ASK_MOST)
        if self._max_trials is not None:
            want = min(want, self._max_trials - len(self._trials) - len(self._queue))
        if self._num_samples is not None:  # Tune's num_samples: what it will ask for in this run
            left = self._num_samples - self._handed - len(self._queue)
            if left <= 0 and self._queue:
                return
            want = min(want, left) if left > 0 else 1  # asked past it: a restored run counts its earlier trials
        if want <= 0:
            return
        self._job = (want, f"ray-{self._session}-{self._fetch_no}")
        if self._asker is None or not self._asker.is_alive():
            self._asker = threading.Thread(target=self._ask_loop, name="calibo-ray-ask", daemon=True)
            self._asker.start()
        self._lock.notify_all()

    def _ask_loop(self) -> None:
        """The asker: creates the study when there is none yet, then makes the asks it is given."""
        while True:
            with self._lock:
                while self._job is None:
                    if self._closed:
                        return
                    self._lock.wait(1.0)
                (count, key), self._job = self._job, None
                self._asking = True
            try:
                study = self._ensure_study()
                t0 = time.perf_counter()
                trials = self.client.ask(study, count, self._worker_id, key)
                took = time.perf_counter() - t0
            except BaseException as e:  # noqa: BLE001 - handed to the driver's next suggest
                logger.warning("calibo.ray: ask failed: %r", e)
                with self._lock:
                    self._fetch_error = e
                    self._asking = False
                    self._retry_at = time.monotonic() + 1.0
                    self._lock.notify_all()
                continue
            with self._lock:
                self._fetch_no += 1  # a failed ask is retried with the same key: the same trials
                self._fetch_error = None
                self._asking = False
                self.stats["asks"] += 1
                self.stats["asked"] += len(trials)
                self.stats["ask_s"] += took
                self._queue.extend(trials)
                self._sender.start()  # the heartbeats of the trials asked ahead and handed out
                if self._finished or self._hold or self._closed or study != self._study_id:
                    self._release_locked("asked after the end, or for a study replaced by a restore")
                self.stats["max_in_flight"] = max(self.stats["max_in_flight"], len(self._live) + len(self._queue))
                self._lock.notify_all()
