"""A ``CaliboSearch``'s checkpoints and pickles: the study and the trial map, nothing else of the
process (no client, token, thread, lock, nor the trials asked ahead, which stay the object's own)."""

from __future__ import annotations

import logging
import os
import pickle
import uuid
from typing import TYPE_CHECKING, Any

from .sender import UNUSED, send_tell

if TYPE_CHECKING:
    import threading
    from collections import deque

    from .._sync import Client
    from ..models import Trial
    from .sender import Sender
    from .space import TuneSpace

logger = logging.getLogger("calibo.ray")

SAVE_FLUSH_TIMEOUT = 10.0  # seconds a checkpoint waits for the queued reports and tells (Tune's driver waits with it)
_PICKLED = {"_metric", "_mode", "_space", "_url", "_study_name", "_study_options", "_batch", "_max_trials",
            "_max_t", "_points", "_report", "_heartbeat_interval", "_worker_id", "_study_id", "_trials",
            "_num_samples", "_stop_iterations", "_max_concurrent"}


class Checkpoints:
    """Tune's ``save`` / ``restore`` and pickling, for :class:`~calibo.ray.CaliboSearch`."""

    if TYPE_CHECKING:  # CaliboSearch's (and Tune's Searcher's), which this class is mixed into
        _metric: str | None
        _mode: str | None
        _max_concurrent: int | None
        _url: str | None
        _token: str | None
        _client: Client | None
        _space: TuneSpace | None
        _study_id: int | None
        _study_name: str
        _max_trials: int | None
        _max_t: int | None
        _points: list[dict[str, Any]]
        _trials: dict[str, int]
        _queue: deque[Trial]
        _lock: threading.Condition
        _sender: Sender
        _finished: bool
        _hold: bool
        stats: dict[str, Any]

        @property
        def client(self) -> Client: ...
        def _setup(self) -> None: ...
        def _adopt(self, view: dict[str, Any]) -> None: ...
        def _release_locked(self, why: str) -> None: ...

    def __getstate__(self) -> dict[str, Any]:
        # no client, token, thread or lock; and not the trials asked ahead: they stay this object's
        # (it hands them out or tells them unused), so no copy can hand one out a second time
        return {k: v for k, v in self.__dict__.items() if k in _PICKLED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._max_concurrent = None  # a copy pickled before the searcher kept Tune's concurrency
        self.__dict__.update(state)
        self._client = None
        self._token = None
        self._setup()

    def save(self, checkpoint_path: str) -> None:
        """Write the study, the trial map and the trials asked ahead to ``checkpoint_path`` (after
        sending every queued report and tell). No token: a restored searcher takes its own."""
        if not self._sender.flush(SAVE_FLUSH_TIMEOUT):
            logger.warning("calibo.ray: %d reports / tells still unsent at save", self._sender.pending())
        with self._lock:
            state = {
                "format": 1,
                "url": self._url if self._client is None else self._client.base_url,
                "study_id": self._study_id,
                "study_name": self._study_name,
                "trials": dict(self._trials),
                "queued": [t.id for t in self._queue],
                "metric": self._metric,
                "mode": self._mode,
                "max_trials": self._max_trials,
                "max_t": self._max_t,
                # how the study's values become Tune's config (flat names, constants, rounding, labels)
                "space": self._space,
            }
        tmp = f"{checkpoint_path}.tmp-{uuid.uuid4().hex[:6]}"
        with open(tmp, "wb") as f:
            pickle.dump(state, f)
        os.replace(tmp, checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        """Continue the study a checkpoint names, with its trial map: a trial Tune runs again is told
        when it ends, and a suggestion asked again is the same. The trials the checkpoint had asked
        ahead are told ``failed`` (``{"ray": "unused"}``, as the searcher that asked them tells them
        when it ends: the same tell twice changes nothing), never handed out again: the searcher that
        saved may still be alive and holding them. The server is the constructor's (``url``,
        ``client``) when given, else the checkpoint's; the token the constructor's, else
        ``$CALIBO_TOKEN`` (checkpoints hold none)."""
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        if state.get("format") != 1:
            raise ValueError(f"{checkpoint_path}: not a CaliboSearch checkpoint")
        if self._client is None and self._url is None:
            self._url = state["url"]
        self._metric = self._metric or state["metric"]
        self._mode = self._mode or state["mode"]
        if self._max_t is None:
            self._max_t = state.get("max_t")
        if self._max_trials is None:
            self._max_trials = state.get("max_trials")
        if state.get("space") is not None:
            self._space = state["space"]
        with self._lock:
            self._release_locked("replaced by a restore")  # asked ahead by this searcher before
            self._trials.update(state["trials"])
            self._study_name = state["study_name"]
            self._study_id = None
            self._finished = self._hold = False
        self._points = []
        if state["study_id"] is not None:
            self._adopt(self.client.load_study(state["study_id"]).view)
            for tid in state["queued"]:
                self.stats["unused"] += 1
                self._sender.put(send_tell, self.client, self._study_id, tid, "failed", None, dict(UNUSED))
