"""What each request does: the service's home for the engine's select and adapt.

The API turns HTTP into calls here; this module persists through
``calibo.server.storage`` first, runs the engine's cheap steps (select at ask, adapt
at tell) inside the study's locked transaction, and hands refits to the fit
pool. It knows nothing of HTTP.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio.to_thread

from calibo.engine import Snapshot
from calibo.engine.limits import bad_text
from calibo.engine.study import StudySpec

from ..batching import GroupCommit
from ..config import Settings
from ..errors import Conflict, InvalidRequest, NotFound
from ..storage import Storage, StudyInfo
from ..workers import Fits
from .added import AddedTrials
from .asks import AskSteps
from .caches import StudyCaches
from .calibration import calibration_view
from .definitions import (
    StudyDef,
    build_definition,
    conflict_message,
    definition_differences,
    migrated,
)
from .growth import SpaceGrowth
from .importance import ImportanceCache
from .outcomes import check_constraints, check_outcome
from .pareto import pareto as pareto_of
from .reports import report
from .tells import TellSteps
from .views import (
    AskedView,
    CalibrationView,
    ImportanceView,
    ParetoView,
    StudySummary,
    StudyView,
    TrialView,
    study_summary,
    study_view,
    trial_view,
)
from .writes import AskWrite, TellWrite, Told, Write

# An ask while trials run waits for the fit in flight when the newest fit took at most this share of
# a trial's median run time, and for no longer (StudyService._maybe_wait_for_fit).
CROWD_WAIT_SHARE = 0.05


def crowd_wait(trial_s: float | None, fit_s: float | None, bound: float) -> float:
    """Seconds an ask while trials run waits for the fit in flight (0: none): ``CROWD_WAIT_SHARE`` of
    the median trial's run time ``trial_s``, within the study's ``bound``, when the newest fit took
    ``fit_s`` no longer than that; nothing while either is unknown (no fit or no trial yet)."""
    if trial_s is None or fit_s is None:
        return 0.0
    share = CROWD_WAIT_SHARE * trial_s
    return min(bound, share) if fit_s <= share else 0.0


class StudyService(AskSteps, TellSteps, AddedTrials, SpaceGrowth):
    """Create, ask, tell and report on studies; shared by all API requests of a process."""

    def __init__(self, settings: Settings, storage: Storage, fits: Fits | None, metrics: Any = None) -> None:
        self.settings = settings
        self.metrics = metrics  # the app's Metrics (counters of asks, tells, reports), or None
        self.storage = storage
        self.fits = fits
        self._caches = StudyCaches(settings.study_cache, settings.snapshot_cache)
        self._importance = ImportanceCache()
        self._inflight_lock = threading.Lock()  # guards _inflight: the asks and tells in flight per study
        self._inflight: Counter[int] = Counter()
        self._writes: GroupCommit[int, Write, list[AskedView] | Told] = GroupCommit(self._write_batch)

    # -------------------------------------------------------------- studies
    def create(self, name: str, space: Any, direction: str = "minimize", surrogate: str | None = None,
               acquisition: str | None = None, seed: int | None = None,
               settings: dict[str, Any] | None = None, pruner: Any = None, constraints: Any = None,
               user_attrs: Any = None, directions: Any = None, learn_failures: Any = True,
               ) -> tuple[StudyInfo, bool]:
        """Create a study, or answer the existing one of the same name and definition (its user
        attributes updated with ``user_attrs``); ``directions``: a multi-objective study;
        ``learn_failures`` False: failed trials are recorded, not learned from."""
        definition = build_definition(name, space, direction, surrogate, acquisition, seed, settings, pruner,
                                      constraints, directions, learn_failures)
        return self._create(name, definition, user_attrs)

    def _create(self, name: str, definition: dict[str, Any], attrs: dict[str, Any] | None) -> tuple[StudyInfo, bool]:
        state = StudySpec.from_definition(definition).initial_state()
        try:
            info, created = self.storage.create_study(name, definition, state.to_dict(), attrs)
        except Conflict as e:
            if e.code != "name_conflict":
                raise
            sid = self.storage.study_id(name)
            existing = migrated(self.storage.definition(sid))
            if existing == definition:  # stored before settings were removed: the same study
                return self._with_attrs(self.storage.get_study(sid), False, attrs)
            differences = definition_differences(existing, definition)
            raise Conflict(conflict_message(name, differences), field="name", code="name_conflict",
                           details={"differences": differences}) from None
        return self._with_attrs(info, created, attrs)

    def _with_attrs(self, info: StudyInfo, created: bool, attrs: dict[str, Any] | None) -> tuple[StudyInfo, bool]:
        if not created and attrs:
            self.storage.set_study_attrs(info.id, attrs)
            info = self.storage.get_study(info.id)
        return info, created

    def resolve(self, ref: str, by: str | None = None) -> int:
        """The id of the study ``ref`` names: its id (digits), or its name (anything else, or any
        ``ref`` with ``by="name"``); NotFound naming it."""
        if by not in (None, "id", "name"):
            raise InvalidRequest("must be id or name", field="by")
        if by != "name" and ref.isascii() and ref.isdigit():
            sid = int(ref)
            if sid > 2**31 - 1:
                raise NotFound(f"study {ref} not found", field="study")
            return sid
        if by == "id":
            raise InvalidRequest(f"{ref!r} is not a study id", field="study")
        if bad_text(ref) is not None:  # create refuses such names: no study has one (and PostgreSQL cannot compare NUL)
            raise NotFound(f"no study named {ref!r}", field="study")
        return self.storage.study_id(ref)  # one indexed lookup: names are unique

    def delete(self, study_id: int) -> None:
        self.storage.delete_study(study_id)
        self._caches.forget(study_id)
        if self.fits is not None:
            self.fits.forget(study_id)

    def summary(self, info: StudyInfo) -> StudySummary:
        return study_summary(info)

    def view(self, info: StudyInfo) -> StudyView:
        fit = self.fits.status(info.id) if self.fits is not None else {"fitting": False, "queued": False}
        sd = self.study(info.id)
        front = pareto_of(sd, self.storage.objective_rows(info.id)) if sd.multi else None
        return study_view(info, self.settings.ask_wait_seconds, fit, front)

    def pareto(self, study_id: int) -> ParetoView:
        """A multi-objective study's front: its trials, hypervolume, reference point and the
        hypervolume over trials; Conflict for a single-objective study."""
        sd = self.study(study_id)
        if not sd.multi:
            raise Conflict("the study has one objective: its best trial is in the study view",
                           field="study", code="not_multi_objective")
        front = pareto_of(sd, self.storage.objective_rows(study_id), history=True)
        return {"study_id": study_id, "directions": list(sd.directions),
                "trials": [trial_view(t) for t in self.storage.trials_by_id(study_id, front["ids"])],
                "hypervolume": front["hypervolume"], "reference_point": front["reference_point"],
                "history": front.get("history", [])}

    # ------------------------------------------------------------------ ask
    def _snapshot(self, tx_data: Any, study_id: int, version: int) -> Snapshot | None:
        snap = self._caches.snapshot(study_id, version)
        if snap is not None:
            return snap
        data = tx_data(version)
        if data is None:
            return None
        snap = Snapshot.from_bytes(data)
        self._caches.put_snapshot(study_id, version, snap)
        return snap

    def _maybe_wait_for_fit(self, sd: StudyDef) -> None:
        """An ask waits, up to the study's bound, for a fit covering the tells before it.

        A sequential user (no trial of the study running, no other ask or tell of it in flight
        here) always does. An ask while trials run (a crowd) does when a fit is quick against a
        trial: the newest fit took at most ``CROWD_WAIT_SHARE`` of the median trial's run time,
        and it waits no longer than that share. A worker that tells and asks again then gets a
        model that has its own result, for a twentieth of a trial at most; where fits are slow
        against the trials (or the trials are instants, as in a load test) a crowd never waits.
        Concurrent asks (several in flight here) never wait: they are served as one batch.
        """
        wait = self.settings.ask_wait_seconds if sd.ask_wait_seconds is None else sd.ask_wait_seconds
        if wait <= 0 or self.fits is None or self._inflight[sd.id] > 1:
            return
        # a failure alone is news to a fit that learns from failures
        p = self.storage.progress(sd.id, pace=True, failures=sd.learn_failures)
        if not sd.config.fits(p.n_complete) or (p.fitted_on >= p.n_complete and p.fitted_failures >= p.n_failed):
            return
        if p.running:
            wait = crowd_wait(p.trial_seconds, p.fit_seconds, wait)
            if wait <= 0:
                return
        self.fits.request(sd.id)  # coalesces with a queued one; restarts one lost with a restart
        self.fits.wait(sd.id, p.n_complete, wait, p.n_failed)

    async def _study_async(self, study_id: int) -> StudyDef:
        sd = self._caches.definition(study_id)
        return sd if sd is not None else await anyio.to_thread.run_sync(self.study, study_id)

    async def ask(self, study_id: int, count: int = 1, worker_id: str | None = None,
                  key: str | None = None, user_attrs: dict[str, Any] | None = None) -> list[AskedView]:
        """``count`` new trials; concurrent asks on one study are served as one batch (one select)
        in the same transaction as the tells queued with them (see ``_write_batch``).

        ``key`` (the request's Idempotency-Key) makes the ask safe to retry: an ask
        with a key already used on the study answers the trials that key created.
        ``user_attrs`` are set on every trial the ask hands out.
        """
        sd = await self._study_async(study_id)
        with self._active(study_id):
            if self._inflight[study_id] == 1:  # maybe a sequential user: see _maybe_wait_for_fit
                await anyio.to_thread.run_sync(self._maybe_wait_for_fit, sd)
            out = await self._writes(study_id, AskWrite(count, worker_id, key, user_attrs))
        assert isinstance(out, list)  # an ask's answer (an error is raised by the group commit)
        if self.metrics is not None:
            self.metrics.asked.inc(len(out))
        return out

    @contextmanager
    def _active(self, study_id: int) -> Iterator[None]:
        """Count this request among the study's asks and tells in flight."""
        with self._inflight_lock:
            self._inflight[study_id] += 1
        try:
            yield
        finally:
            with self._inflight_lock:
                self._inflight[study_id] -= 1
                if not self._inflight[study_id]:
                    del self._inflight[study_id]

    def _write_batch(self, study_id: int, items: list[Write]) -> list[list[AskedView] | Told | Exception]:
        """One transaction for every ask and tell queued on the study: the tells first, in
        arrival order (so the asks see their outcomes), then one select for all the asks."""
        sd = self.study(study_id)
        tells = [(i, w) for i, w in enumerate(items) if isinstance(w, TellWrite)]
        asks = [(i, w) for i, w in enumerate(items) if isinstance(w, AskWrite)]
        out: list[list[AskedView] | Told | Exception] = [[] for _ in items]  # each replaced below
        try:
            with self.storage.locked(study_id) as tx:
                sd = self._current(tx, sd)  # another process may have grown the space
                if tells:
                    for (i, _), r in zip(tells, self._tell_in(tx, sd, [w for _, w in tells]), strict=True):
                        out[i] = r
                if asks:
                    for (i, _), answer in zip(asks, self._ask_in(tx, sd, [w for _, w in asks]), strict=True):
                        out[i] = answer
        except BaseException:
            # the finished-keys cache may have read this transaction's own (now rolled back) tells:
            # positions it skipped past would be reused by later tells and never read
            self._caches.drop_finished(study_id)
            raise
        return out

    def heartbeat_timeout(self, sd: StudyDef) -> float:
        """Seconds of silence after which a running trial of the study expires."""
        t = sd.heartbeat_timeout_seconds
        return self.settings.heartbeat_timeout_seconds if t is None else t

    def heartbeat(self, study_id: int, trial_id: int) -> None:
        self.storage.heartbeat(study_id, trial_id, self.heartbeat_timeout(self.study(study_id)))

    # ----------------------------------------------------------------- tell
    async def tell(self, study_id: int, trial_id: int, value: float | None = None,
                   state: str | None = None, constraints: list[float] | None = None,
                   user_attrs: dict[str, Any] | None = None, values: list[float] | None = None,
                   interrupted: bool = False) -> tuple[TrialView, bool]:
        """Finish a trial. Returns ``(trial view, changed)``; repeating a tell changes nothing.

        ``values``: a multi-objective study's objectives (instead of ``value``).
        ``constraints``: the trial's constraint values (every constraint of the study, required to
        complete a constrained study's trial); ``user_attrs`` are merged into the trial's.
        Concurrent tells (and asks) on one study commit together: see ``_write_batch``.
        ``interrupted`` (state failed): stopped from outside, not a failure of the configuration
        (recorded so; no fit learns from it).
        """
        sd = await self._study_async(study_id)
        state = state or "complete"
        if interrupted and state != "failed":
            raise InvalidRequest("only a failed trial can be interrupted", field="interrupted")
        value, values = check_outcome(sd, state, value, values)
        constraints = check_constraints(sd, state, constraints)
        with self._active(study_id):
            told = await self._writes(study_id, TellWrite(trial_id, state, value, values, constraints, user_attrs,
                                                          interrupted))
        assert isinstance(told, Told)  # a tell's answer (an error is raised by the group commit)
        view, changed, n_complete = told.view, told.changed, told.n_complete
        if changed and self.metrics is not None:
            self.metrics.told.labels(state).inc()
        feeds = state == "complete" or (state == "pruned" and value is not None and sd.pruner.feed_pruned) \
            or (state == "failed" and sd.learn_failures and not interrupted)
        # with pruned values fed, completed trials undercount the observations: fit_study counts them
        enough = sd.pruner.feed_pruned or sd.config.fits(n_complete)
        if changed and feeds and enough and self.fits is not None:
            self.fits.request(study_id)
        return view, changed

    # --------------------------------------------------------------- report
    def report(self, study_id: int, trial_id: int, step: int, value: float) -> bool:
        """Store a running trial's learning-curve point; whether the study's pruner stops it."""
        sd = self.study(study_id)
        prune = report(self.storage, sd, trial_id, step, value, self.heartbeat_timeout(sd))
        if self.metrics is not None:
            self.metrics.reports.inc()
            self.metrics.pruned.inc(prune)
        return prune

    def importance(self, study_id: int, objective: int = 0) -> ImportanceView:
        return self._importance.get(self.storage, study_id, objective)

    # --------------------------------------------------------- calibration
    def calibration(self, study_id: int, window: int = 20) -> CalibrationView:
        rows = self.storage.calibration_rows(study_id)
        info = self.storage.get_study(study_id)  # read after the rows: its space holds every parameter theirs do
        return calibration_view(self._fresh(info), info, rows, window)
