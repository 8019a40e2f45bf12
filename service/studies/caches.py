"""What one API process keeps in memory per study between requests, in one bounded object: the
parsed definitions, the keys of the finished trials (read incrementally, by finishing order) and the
deserialised snapshots. Each part keeps the entries used most recently (``studies`` studies,
``snapshots`` snapshots) and drops the oldest; a dropped entry is read again from storage when next
needed, so the bounds cost reads, never correctness."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from calibo.engine import Snapshot

from .definitions import StudyDef

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A mapping that keeps its ``size`` most recently used entries (not thread-safe: the owner locks)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
        return v

    def put(self, key: K, value: V) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.size:
            self._d.popitem(last=False)

    def pop(self, key: K) -> None:
        self._d.pop(key, None)

    def drop(self, study_id: int) -> None:
        """Every entry of the study (keys ``study_id`` or ``(study_id, ...)``)."""
        for k in [k for k in self._d if k == study_id or (isinstance(k, tuple) and k[0] == study_id)]:
            del self._d[k]

    def __len__(self) -> int:
        return len(self._d)


class StudyCaches:
    """The per-study caches of a ``StudyService``; every method is thread-safe."""

    def __init__(self, studies: int, snapshots: int) -> None:
        self._lock = threading.Lock()
        self._defs: _Lru[int, StudyDef] = _Lru(studies)
        self._finished: _Lru[int, tuple[int, set[bytes]]] = _Lru(studies)
        self._snapshots: _Lru[tuple[int, int], Snapshot] = _Lru(snapshots)

    def definition(self, study_id: int) -> StudyDef | None:
        with self._lock:
            return self._defs.get(study_id)

    def keep(self, d: StudyDef) -> StudyDef:
        """Cache ``d`` unless a definition of a newer revision is cached (then that one); a newer ``d``
        drops what was cached for the older space (its finished keys and snapshots)."""
        with self._lock:
            cur = self._defs.get(d.id)
            if cur is not None and cur.revision >= d.revision:
                return cur
            self._defs.put(d.id, d)
            if cur is not None:
                self._finished.pop(d.id)
                self._snapshots.drop(d.id)
        return d

    def finished(self, study_id: int) -> tuple[int, set[bytes]]:
        """The finished trials' keys read so far, and the finishing position read up to (0: none)."""
        with self._lock:
            return self._finished.get(study_id) or (0, set())

    def set_finished(self, study_id: int, seq: int, keys: set[bytes]) -> None:
        with self._lock:
            self._finished.put(study_id, (seq, keys))

    def drop_finished(self, study_id: int) -> None:
        with self._lock:
            self._finished.pop(study_id)

    def snapshot(self, study_id: int, version: int) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get((study_id, version))

    def put_snapshot(self, study_id: int, version: int, snap: Snapshot) -> None:
        with self._lock:
            self._snapshots.put((study_id, version), snap)

    def forget(self, study_id: int) -> None:
        """Everything of a deleted study."""
        with self._lock:
            self._defs.pop(study_id)
            self._finished.pop(study_id)
            self._snapshots.drop(study_id)
