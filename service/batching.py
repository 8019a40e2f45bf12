"""Group commit: concurrent calls for the same key run together as one batch.

A crowd of workers asking (or telling) on one study would otherwise queue on
the study's lock one transaction at a time. Here callers await a future; one
drain task per key takes everything queued for that key, runs the batch
function once on a worker thread (one lock, one transaction, one ``select``
for all the asks) and hands each caller its own result. Callers arriving
meanwhile form the next batch. A single caller is a batch of one: no waiting,
no behaviour change for sequential use. Everything but the batch itself runs
on the event loop, so a request costs no thread hand-off of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import anyio.to_thread

K = TypeVar("K", bound=Hashable)  # the key a batch gathers on (a study id)
I = TypeVar("I")  # noqa: E741 - item
R = TypeVar("R")  # result


class GroupCommit(Generic[K, I, R]):
    """``await gc(key, item)`` returns ``run(key, [items...])[i]`` for this caller's item (or raises it).

    ``run`` (blocking; called on a worker thread) gets the queued items of one
    key in arrival order and returns one result per item, an exception instance
    for an item that failed alone; if ``run`` itself raises, every item of the
    batch gets that exception. Batches of one key never overlap.
    """

    def __init__(self, run: Callable[[K, list[I]], Sequence[R | BaseException]],
                 max_batch: int = 64) -> None:
        self.run = run
        self.max_batch = max_batch
        self._queues: dict[K, list[tuple[I, asyncio.Future]]] = {}
        self._draining: dict[K, asyncio.Task] = {}
        self.batches = 0  # for tests and metrics
        self.items = 0

    async def __call__(self, key: K, item: I) -> R:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, []).append((item, fut))
        if key not in self._draining:
            self._draining[key] = asyncio.create_task(self._drain(key))
        return await fut

    async def _drain(self, key: K) -> None:
        try:
            while queue := self._queues.get(key):
                batch = queue[: self.max_batch]
                del queue[: self.max_batch]
                results: list[Any]
                try:
                    results = list(await anyio.to_thread.run_sync(self.run, key, [i for i, _ in batch]))
                    if len(results) != len(batch):
                        raise RuntimeError(f"batch of {len(batch)} got {len(results)} results")
                except BaseException as e:  # noqa: BLE001 - handed to every caller of the batch
                    results = [e] * len(batch)
                self.batches += 1
                self.items += len(batch)
                for (_, fut), r in zip(batch, results, strict=True):
                    if fut.done():  # its caller went away
                        continue
                    if isinstance(r, BaseException):
                        fut.set_exception(r)
                    else:
                        fut.set_result(r)
        finally:
            del self._draining[key]
            if not self._queues.get(key):
                self._queues.pop(key, None)
