"""``CaliboSearch``: Tune's Searcher hooks over a study, the trials asked ahead, checkpoints."""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
import uuid
import weakref
from collections import deque
from typing import Any

from ray.tune.search import Searcher

from .._sync import Client
from ..errors import Conflict
from ..models import Trial
from .asking import Asking
from .checkpoint import Checkpoints
from .sender import FLUSH_TIMEOUT, UNUSED, Sender, send_report, send_tell
from .space import TuneSpace, read_space

logger = logging.getLogger("calibo.ray")

FIRST_ASK_TIMEOUT = 120.0  # seconds suggest waits for trials when none is running (it blocks Tune then)

_LIVE: weakref.WeakSet[CaliboSearch] = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for search in list(_LIVE):
        try:
            search.shutdown()
        except Exception:  # noqa: BLE001 - at exit: log and go on with the others
            logger.exception("calibo.ray: shutdown at exit failed")


# ------------------------------------------------------------------ the searcher
class CaliboSearch(Asking, Checkpoints, Searcher):
    """A Ray Tune searcher over a study on a calibo server.

    Args:
        space: a Tune search space (``tune.uniform``, ``loguniform``, ``quniform``, ``qloguniform``,
            ``randint``, ``qrandint``, ``lograndint``, ``qlograndint``, ``choice``; nested dicts
            and lists; constants pass through), or None to take the Tuner's ``param_space``.
            ``tune.grid_search``, ``tune.sample_from`` and ``tune.randn`` raise a ValueError that
            names the parameter. Quantized domains are searched as their continuous range and the
            value handed to the trial is rounded to the multiple of ``q``, as Tune rounds.
        metric, mode: what to optimize (``"min"`` / ``"max"``), or None to take the TuneConfig's.
        url, token, client: the server (``$CALIBO_URL`` and ``$CALIBO_TOKEN`` when not given), or a
            :class:`~calibo.Client` to use.
        study_name: the study, created from the space or, when a study of that name and the same
            definition exists, continued (a different definition raises :class:`~calibo.Conflict`).
            None: a new study ``ray-tune-<random>``. It is created when Tune hands the searcher its
            ``param_space`` (``set_search_properties``, where the first trials are asked ahead), or
            at the first suggestion.
        surrogate, acquisition, seed, settings: the study's, when it is created (see
            :meth:`calibo.Client.create_study`).
        batch: trials asked for ahead of Tune (one ``ask`` of up to ``batch``, refilled in the
            background once half are handed out). None: 2. Trials asked ahead count as running on
            the server, so the study's crowd-aware acquisition keeps new asks apart from them; more
            ahead means each suggestion was chosen knowing fewer results (measured: 2 ahead searched
            better than 4 or 8 with 8 in flight). Raise it when trials last less than an ask takes.
        max_trials: the study's budget: suggest returns ``Searcher.FINISHED`` once this many trials
            were handed out to Tune (over restores: it is kept in the study's ``user_attrs`` as
            ``ray_max_trials``, where a restored or new searcher on the study finds it).
        max_t: the ``training_iteration`` a trial that runs to its end reaches (a scheduler's
            ``max_t``, ASHA's included), to tell a trial Tune stopped early (``pruned``) from one it
            stopped at its end (complete). None: ``stop={"training_iteration": n}`` when Tune
            passes one, else the most iterations any trial of this searcher has reached.
        points_to_evaluate: configurations (Tune configs, all or some parameters) enqueued on the
            study: handed out first.
        report: report every intermediate result to the study (``client.report``); the server's
            pruning answer is not acted on (a Tune scheduler stops trials).
        heartbeat_interval: seconds between heartbeats of the trials handed out or asked ahead
            (the server fails a silent running trial after its ``heartbeat_timeout_seconds``); None:
            none.
        worker_id: the ``worker_id`` of the asks (default ``ray-<host>``).
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        client: Client | None = None,
        study_name: str | None = None,
        surrogate: str | None = None,
        acquisition: str | None = None,
        seed: int | None = None,
        settings: dict[str, Any] | None = None,
        batch: int | None = None,
        max_trials: int | None = None,
        max_t: int | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        report: bool = True,
        heartbeat_interval: float | None = 60.0,
        worker_id: str | None = None,
    ) -> None:
        if isinstance(metric, list | tuple) or isinstance(mode, list | tuple):
            raise ValueError("CaliboSearch optimizes one metric (a str), not a list")
        super().__init__(metric=metric, mode=mode)
        if batch is not None and batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if max_trials is not None and max_trials < 1:
            raise ValueError(f"max_trials must be >= 1, got {max_trials}")
        self._space: TuneSpace | None = read_space(space) if space is not None else None
        self._url = client.base_url if client is not None else url
        self._token = token  # never saved: a restored searcher takes its token from the constructor or $CALIBO_TOKEN
        self._client = client
        # chosen now, so that a copy Tune pickled before the run (``Tuner.restore``) finds the same study
        self._study_name = study_name or f"ray-tune-{uuid.uuid4().hex[:10]}"
        self._study_options: dict[str, Any] = {
            k: v for k, v in (("surrogate", surrogate), ("acquisition", acquisition), ("seed", seed),
                              ("settings", settings)) if v is not None}
        self._batch = batch
        self._max_trials = max_trials
        self._max_t = max_t
        self._points = list(points_to_evaluate or [])
        self._report = report
        self._heartbeat_interval = heartbeat_interval
        self._worker_id = worker_id or f"ray-{os.uname().nodename}"[:64]
        # the state a checkpoint keeps
        self._study_id: int | None = None
        self._trials: dict[str, int] = {}  # Tune's trial id -> the study's trial id
        # the process's own
        self._max_concurrent: int | None = None  # Tune's ConcurrencyLimiter's (set_max_concurrency)
        self._num_samples: int | None = None
        self._stop_iterations: int | None = None
        self._setup()

    def _setup(self) -> None:
        """The parts no checkpoint or pickle holds: threads, locks, what this process handed out."""
        self._lock = threading.Condition()
        self._queue: deque[Trial] = deque()  # asked, not handed out yet
        self._params: dict[str, dict[str, Any]] = {}  # Tune's trial id -> the study's values (flat)
        self._live: set[str] = set()  # handed out in this process, not completed
        self._done: set[str] = set()  # completed (told) in this process
        self._last_iter: dict[str, int] = {}  # the last training_iteration passed to on_trial_result
        self._reported: dict[str, int] = {}  # the last step reported
        self._reached = 0  # the most iterations any trial reached
        self._asker: threading.Thread | None = None  # one thread asks ahead (and creates the study)
        self._job: tuple[int, str] | None = None  # an ask to make: (count, idempotency key)
        self._asking = False  # the asker is making one
        self._fetch_error: BaseException | None = None
        self._retry_at = 0.0
        self._fetch_no = 0
        self._creating = threading.Lock()
        self._session = uuid.uuid4().hex[:12]
        self._handed = 0  # new trials handed out by this process
        self._finished = False  # the budget is spent: FINISHED
        self._hold = False  # Tune's num_samples are handed out: no asking ahead (until it asks again)
        self._closed = False
        self._sender = Sender(self._heartbeats, self._heartbeat_interval)
        self.stats: dict[str, Any] = {"asks": 0, "asked": 0, "suggest_waits": 0, "suggest_wait_s": 0.0,
                                      "suggest_none": 0, "ask_s": 0.0, "max_in_flight": 0, "unused": 0, "reported": 0,
                                      "told": {"complete": 0, "pruned": 0, "failed": 0}}
        _LIVE.add(self)

    # ------------------------------------------------------------ connection and study
    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._url, self._token)
            self._url = self._client.base_url
        return self._client

    @property
    def study_id(self) -> int | None:
        """The study's id, once it is created (at the first suggestion) or restored."""
        return self._study_id

    @property
    def trial_map(self) -> dict[str, int]:
        """Tune's trial id -> the study's trial id, for every trial handed out to Tune."""
        with self._lock:
            return dict(self._trials)

    def _direction(self) -> str:
        return "maximize" if self._mode == "max" else "minimize"

    def _ensure_study(self) -> int:
        if self._study_id is not None:
            return self._study_id
        with self._creating:
            if self._study_id is None:
                self._create_study()
            assert self._study_id is not None  # _create_study set it (by _adopt) or raised
            return self._study_id

    def _create_study(self) -> None:
        if self._space is None:
            raise RuntimeError("CaliboSearch has no search space: pass space= or the Tuner's param_space")
        name = self._study_name
        attrs: dict[str, Any] = {"ray_metric": self._metric, "ray_mode": self._mode}
        if self._max_trials is not None:
            attrs["ray_max_trials"] = self._max_trials
        study = self.client.create_study(name, self._space.wire, self._direction(), user_attrs=attrs,
                                         **self._study_options)
        for point in self._points:  # before any ask: handed out first
            self.client.enqueue(study.id, self._space.flat(point), user_attrs={"ray": "points_to_evaluate"})
        self._points = []
        self._adopt(study.view)

    def _adopt(self, view: dict[str, Any]) -> None:
        self._study_id = int(view["id"])
        self._study_name = view.get("name", self._study_name)
        if self._max_trials is None and (budget := (view.get("user_attrs") or {}).get("ray_max_trials")):
            self._max_trials = int(budget)

    # ------------------------------------------------------------ Tune's hooks
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        if metric and not self._metric:
            self._metric = metric
        if mode and not self._mode:
            self._mode = mode
        samples = spec.get("num_samples")
        if isinstance(samples, int) and samples > 0:
            self._num_samples = samples
        stop = spec.get("stop")
        if isinstance(stop, dict) and isinstance(stop.get("training_iteration"), int):
            self._stop_iterations = stop["training_iteration"]
        if not config:
            return False
        space = read_space(config)
        if self._space is not None and space.wire != self._space.wire:
            return False  # a space of its own: Tune refuses a param_space with other parameters
        self._space = space
        if self._metric and self._mode:  # Tune is about to start: create the study and ask ahead, in the background
            with self._lock:
                self._maybe_fetch_locked()
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:  # type: ignore[override]  # FINISHED is a str
        if not self._metric or not self._mode:
            raise RuntimeError("CaliboSearch needs metric and mode: pass them to it or to tune.TuneConfig")
        with self._lock:
            known = trial_id in self._trials
        if known:  # Tune asks again for a trial it has (after a restore): the same configuration
            return self._space_or_fail().config(self._values_of(trial_id))
        space = self._space_or_fail()
        with self._lock:
            if self._budget_spent():
                self._finished = True
                self._release_locked("budget spent")
                return Searcher.FINISHED
            self._hold = self._closed = False
            self._maybe_fetch_locked()
            if not self._queue and self._live:
                self._wait_for_ask_out_locked()
            if not self._queue:
                if self._live:  # trials are running and no ask answered in time: Tune calls again at its next step
                    self.stats["suggest_none"] += 1
                    return None
                t0 = time.perf_counter()  # nothing running: Tune would sleep a second between tries
                self.stats["suggest_waits"] += 1
                deadline = time.monotonic() + FIRST_ASK_TIMEOUT
                while not self._queue and time.monotonic() < deadline:
                    if self._fetch_error is not None and not self._asking and self._job is None:
                        error, self._fetch_error = self._fetch_error, None
                        raise error
                    self._maybe_fetch_locked()
                    self._lock.wait(0.5)
                self.stats["suggest_wait_s"] += time.perf_counter() - t0
                if not self._queue:
                    return None
            trial = self._queue.popleft()
            self._trials[trial_id] = trial.id
            self._params[trial_id] = trial.params
            self._live.add(trial_id)
            self._handed += 1
            if self._num_samples is not None and self._handed >= self._num_samples:
                self._hold = True  # Tune asks no more in this run
                self._release_locked("num_samples reached")
            else:
                self._maybe_fetch_locked()
        return space.config(trial.params)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        step = result.get("training_iteration")
        with self._lock:
            cid = self._trials.get(trial_id)
            if isinstance(step, int):
                self._last_iter[trial_id] = step
                self._reached = max(self._reached, step)
            if cid is None or trial_id in self._done or not self._report:
                return
            value = _finite(result.get(self.metric))
            if value is None or not isinstance(step, int) or step <= self._reported.get(trial_id, -1):
                return
            self._reported[trial_id] = step
            study = self._study_id
        self._sender.put(send_report, self.client, self.stats, study, cid, step, value)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        with self._lock:
            cid = self._trials.get(trial_id)
            if cid is None:
                logger.warning("calibo.ray: trial %s completed but this searcher never suggested it; not told",
                               trial_id)
                return
            if trial_id in self._done:
                return  # told already: a trial is told once
            self._done.add(trial_id)
            self._live.discard(trial_id)
            attrs: dict[str, Any] = {"ray_trial_id": trial_id}
            value = _finite(result.get(self.metric)) if result else None
            step = result.get("training_iteration") if result else None
            report = None
            if error:
                state = "failed"
                attrs["fail_reason"] = "the trial raised an error"
            elif not result:
                state = "failed"
                attrs["fail_reason"] = "stopped before it reported"
            elif value is None:
                state = "failed"
                raw = result.get(self.metric)
                attrs["fail_reason"] = (f"no finite {self._metric!r} in its result"
                                        + (f" ({raw!r})" if raw is not None else ""))
            elif isinstance(step, int) and step > self._last_iter.get(trial_id, 0):
                # Tune withheld the trial's last result from on_trial_result: a scheduler or a
                # stopper stopped it on that result. Pruned unless it had reached the trial's end.
                self._reached = max(self._reached, step)
                state = "complete" if step >= self._full_iterations() else "pruned"
                if state == "pruned":
                    attrs["ray_stopped_at"] = step
                if self._report and step > self._reported.get(trial_id, -1):
                    report = step
            else:
                state = "complete"
            self.stats["told"][state] += 1
            study = self._study_id
        if report is not None:
            self._sender.put(send_report, self.client, self.stats, study, cid, report, value)
        self._sender.put(send_tell, self.client, study, cid, state, value, attrs)

    def add_evaluated_point(self, parameters: dict[str, Any], value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: list[float] | None = None) -> None:
        """Add a configuration evaluated elsewhere to the study (it counts in the next fit, never in
        the calibration); a pruned one is not added (the study takes complete or failed ones)."""
        if pruned:
            logger.info("calibo.ray: a pruned evaluated point is not added to the study")
            return
        study = self._ensure_study()
        row: dict[str, Any] = {"params": self._space_or_fail().flat(parameters)}
        if error or _finite(value) is None:
            row["state"] = "failed"
        else:
            row["value"] = _finite(value)
        self.client.add_trials(study, [row])

    # ------------------------------------------------------------ ending
    def shutdown(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Tell the trials asked ahead and never handed out ``failed`` (``{"ray": "unused"}``) and
        send everything queued. Runs at interpreter exit; Tune's experiment ending at its
        ``num_samples`` or this searcher's ``max_trials`` does it as well."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._release_locked("shutdown")
            self._job = None
            asker = self._asker
            self._lock.notify_all()
        if asker is not None:  # an ask it is making: its trials are told unused as they arrive (closed)
            asker.join(timeout)
        if not self._sender.flush(timeout):
            logger.warning("calibo.ray: %d reports / tells unsent at shutdown", self._sender.pending())
        self._sender.close()

    def _release_locked(self, why: str) -> None:
        """Tell every trial asked ahead and not handed out failed."""
        if self._queue:
            logger.debug("calibo.ray: %d trials asked ahead, unused (%s)", len(self._queue), why)
        while self._queue:
            trial = self._queue.popleft()
            self.stats["unused"] += 1
            self._sender.put(send_tell, self.client, trial.study_id, trial.id, "failed", None, dict(UNUSED))

    # ------------------------------------------------------------ helpers
    def _space_or_fail(self) -> TuneSpace:
        if self._space is None:
            raise RuntimeError("CaliboSearch has no search space: pass space= or the Tuner's param_space")
        return self._space

    def _values_of(self, trial_id: str) -> dict[str, Any]:
        with self._lock:
            values = self._params.get(trial_id)
            cid = self._trials[trial_id]
        if values is None:
            values = self.client.get_trial(self._ensure_study(), cid)["params"]
            with self._lock:
                self._params[trial_id] = values
        return values

    def _budget_spent(self) -> bool:
        return self._finished or (self._max_trials is not None and len(self._trials) >= self._max_trials)

    def _full_iterations(self) -> int:
        if self._max_t is not None:
            return self._max_t
        if self._stop_iterations is not None:
            return self._stop_iterations
        return self._reached

    def _heartbeats(self) -> None:
        with self._lock:
            study = self._study_id
            ids = [self._trials[t] for t in self._live if t in self._trials] + [t.id for t in self._queue]
        if study is None:
            return
        for tid in ids:
            try:
                self.client.heartbeat(study, tid)
            except Conflict:
                pass  # told meanwhile, or expired (its tell is still recorded)


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
