"""Group commit: concurrent calls for the same key run together as one batch.

A crowd of workers asking (or telling) on one study would otherwise queue on
the study's lock one transaction at a time. Here the first caller for a key
becomes the *leader*: it takes everything queued for that key, runs the batch
function once (one lock, one transaction, one ``select`` for all the asks) and
hands each caller its own result. Callers arriving meanwhile queue for the
next batch; when the leader's own result is in, leadership passes to the
oldest waiter, so nobody serves others for longer than one batch. A single
caller is a batch of one: no waiting, no behaviour change for sequential use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

I = TypeVar("I")  # noqa: E741 - item
R = TypeVar("R")  # result


class _Slot(Generic[I]):
    __slots__ = ("done", "event", "item", "lead", "result")

    def __init__(self, item: I) -> None:
        self.item = item
        self.event = threading.Event()
        self.done = False
        self.lead = False
        self.result: Any = None


class GroupCommit(Generic[I, R]):
    """``gc(key, item)`` returns ``run(key, [items...])[i]`` for this caller's item (or raises it).

    ``run`` gets the queued items of one key in arrival order and returns one
    result per item, an exception instance for an item that failed alone; if
    ``run`` itself raises, every item of the batch gets that exception.
    """

    def __init__(self, run: Callable[[Hashable, list[I]], Sequence[R | BaseException]],
                 max_batch: int = 64) -> None:
        self.run = run
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._queues: dict[Hashable, list[_Slot[I]]] = {}
        self.batches = 0  # for tests and metrics
        self.items = 0

    def __call__(self, key: Hashable, item: I) -> R:
        slot: _Slot[I] = _Slot(item)
        with self._lock:
            queue = self._queues.get(key)
            lead = queue is None
            if lead:
                queue = self._queues[key] = []
            queue.append(slot)
        if not lead:
            slot.event.wait()
            if not slot.lead:
                return self._outcome(slot)
        while not slot.done:
            with self._lock:
                batch = queue[: self.max_batch]
                del queue[: self.max_batch]
            self._run(key, batch)
        with self._lock:
            if queue:
                heir = queue[0]  # stays queued: it drains the queue, itself included
                heir.lead = True
                heir.event.set()
            else:
                del self._queues[key]
        return self._outcome(slot)

    def _run(self, key: Hashable, batch: list[_Slot[I]]) -> None:
        try:
            results = list(self.run(key, [s.item for s in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"batch of {len(batch)} got {len(results)} results")
        except BaseException as e:  # noqa: BLE001 - handed to every caller of the batch
            results = [e] * len(batch)
        self.batches += 1
        self.items += len(batch)
        for s, r in zip(batch, results, strict=True):
            s.result = r
            s.done = True
            s.event.set()

    @staticmethod
    def _outcome(slot: _Slot[I]) -> R:
        if isinstance(slot.result, BaseException):
            raise slot.result
        return slot.result
