"""What each request does: the service's home for the engine's select and adapt.

The API turns HTTP into calls here; this module persists through
``calibo.server.storage`` first, runs the engine's cheap steps (select at ask, adapt
at tell) inside the study's locked transaction, and hands refits to the fit
pool. It knows nothing of HTTP.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import anyio.to_thread

from calibo.engine import EngineConfig, SearchSpace, Snapshot, adapt, initial_states, select
from calibo.engine.adaptive import state_from_dict, state_to_dict
from calibo.engine.errors import FieldError
from calibo.engine.optimizer import check_value
from calibo.engine.pruning import PrunerConfig

from ..batching import GroupCommit
from ..config import Settings
from ..errors import Conflict, InvalidRequest, NotFound
from ..storage import Storage, StudyInfo, StudyTx, expired, now
from ..workers import FitPool
from .calibration import calibration_view
from .definitions import StudyDef, build_definition
from .reports import report
from .views import (
    asked_view,
    pack_points,
    public_prediction,
    study_summary,
    study_view,
    trial_view,
    unpack_points,
)


def _same_value(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and float(a) == float(b))


class StudyService:
    """Create, ask, tell and report on studies; shared by all API requests of a process."""

    def __init__(self, settings: Settings, storage: Storage, fits: FitPool | None, metrics: Any = None) -> None:
        self.settings = settings
        self.metrics = metrics  # the app's Metrics (counters of asks, tells, reports), or None
        self.storage = storage
        self.fits = fits
        self._defs: dict[int, StudyDef] = {}
        self._finished: dict[int, tuple[int, set[bytes]]] = {}
        self._snapshots: OrderedDict[tuple[int, int], Snapshot] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._inflight: Counter[int] = Counter()
        self._writes = GroupCommit(self._write_batch)

    # -------------------------------------------------------------- studies
    def create(self, name: str, space: Any, direction: str = "minimize", surrogate: str | None = None,
               acquisition: str | None = None, seed: int | None = None,
               settings: dict[str, Any] | None = None, pruner: Any = None) -> tuple[StudyInfo, bool]:
        definition = build_definition(name, space, direction, surrogate, acquisition, seed, settings, pruner)
        config = EngineConfig.from_dict(definition["config"])
        adaptive = [state_to_dict(s) for s in initial_states(config, definition["seed"])]
        return self.storage.create_study(name, definition, adaptive)

    def study(self, study_id: int) -> StudyDef:
        d = self._defs.get(study_id)
        if d is None:
            raw = self.storage.definition(study_id)
            svc = raw.get("service", {})
            d = StudyDef(
                id=study_id, space=SearchSpace.from_dict(raw["space"]),
                config=EngineConfig.from_dict(raw["config"]), direction=raw["direction"],
                seed=int(raw["seed"]), ask_wait_seconds=svc.get("ask_wait_seconds"),
                heartbeat_timeout_seconds=svc.get("heartbeat_timeout_seconds"),
                pruner=PrunerConfig.from_dict(raw.get("pruner")),
            )
            self._defs[study_id] = d
        return d

    def delete(self, study_id: int) -> None:
        self.storage.delete_study(study_id)
        self._defs.pop(study_id, None)
        self._finished.pop(study_id, None)
        with self._cache_lock:
            for k in [k for k in self._snapshots if k[0] == study_id]:
                del self._snapshots[k]
        if self.fits is not None:
            self.fits.forget(study_id)

    def summary(self, info: StudyInfo) -> dict[str, Any]:
        return study_summary(info)

    def view(self, info: StudyInfo) -> dict[str, Any]:
        fit = self.fits.status(info.id) if self.fits is not None else {"fitting": False, "queued": False}
        return study_view(info, self.settings.ask_wait_seconds, fit)

    # ------------------------------------------------------------------ ask
    def _snapshot(self, tx_data: Any, study_id: int, version: int) -> Snapshot | None:
        key = (study_id, version)
        with self._cache_lock:
            snap = self._snapshots.get(key)
            if snap is not None:
                self._snapshots.move_to_end(key)
                return snap
        data = tx_data(version)
        if data is None:
            return None
        snap = Snapshot.from_bytes(data)
        with self._cache_lock:
            self._snapshots[key] = snap
            while len(self._snapshots) > self.settings.snapshot_cache:
                self._snapshots.popitem(last=False)
        return snap

    def _maybe_wait_for_fit(self, sd: StudyDef) -> None:
        """A sequential user waits, up to the study's bound, for a fit covering its tells.

        Sequential means: no trial of the study is running and no other ask or
        tell of it is in flight here. A crowd always has one or the other (its
        asks may all be queued at once, with nothing running for a moment), and
        never waits.
        """
        wait = self.settings.ask_wait_seconds if sd.ask_wait_seconds is None else sd.ask_wait_seconds
        if wait <= 0 or self.fits is None or self._inflight[sd.id] > 1:
            return
        n_complete, fitted_on, running = self.storage.progress(sd.id)
        if running or n_complete < sd.config.n_warmup or fitted_on >= n_complete:
            return
        self.fits.request(sd.id)  # coalesces with a queued one; restarts one lost with a restart
        self.fits.wait(sd.id, n_complete, wait)

    async def _study_async(self, study_id: int) -> StudyDef:
        sd = self._defs.get(study_id)
        return sd if sd is not None else await anyio.to_thread.run_sync(self.study, study_id)

    async def ask(self, study_id: int, count: int = 1, worker_id: str | None = None,
                  key: str | None = None) -> list[dict[str, Any]]:
        """``count`` new trials; concurrent asks on one study are served as one batch (one select)
        in the same transaction as the tells queued with them (see ``_write_batch``).

        ``key`` (the request's Idempotency-Key) makes the ask safe to retry: an ask
        with a key already used on the study answers the trials that key created.
        """
        sd = await self._study_async(study_id)
        with self._active(study_id):
            if self._inflight[study_id] == 1:  # maybe a sequential user: see _maybe_wait_for_fit
                await anyio.to_thread.run_sync(self._maybe_wait_for_fit, sd)
            out = await self._writes(study_id, ("ask", (count, worker_id, key)))
        if self.metrics is not None and isinstance(out, list):
            self.metrics.asked.inc(len(out))
        return out

    @contextmanager
    def _active(self, study_id: int) -> Iterator[None]:
        """Count this request among the study's asks and tells in flight."""
        with self._cache_lock:
            self._inflight[study_id] += 1
        try:
            yield
        finally:
            with self._cache_lock:
                self._inflight[study_id] -= 1
                if not self._inflight[study_id]:
                    del self._inflight[study_id]

    def _write_batch(self, study_id: int, items: list[tuple[str, Any]]) -> list[Any]:
        """One transaction for every ask and tell queued on the study: the tells first, in
        arrival order (so the asks see their outcomes), then one select for all the asks."""
        sd = self.study(study_id)
        tells = [i for i, (kind, _) in enumerate(items) if kind == "tell"]
        asks = [i for i, (kind, _) in enumerate(items) if kind == "ask"]
        out: list[Any] = [None] * len(items)
        try:
            with self.storage.locked(study_id) as tx:
                if tells:
                    for i, r in zip(tells, self._tell_in(tx, sd, [items[i][1] for i in tells]), strict=True):
                        out[i] = r
                if asks:
                    for i, r in zip(asks, self._ask_in(tx, sd, [items[i][1] for i in asks]), strict=True):
                        out[i] = r
        except BaseException:
            # the finished-keys cache may have read this transaction's own (now rolled back) tells:
            # positions it skipped past would be reused by later tells and never read
            self._finished.pop(study_id, None)
            raise
        return out

    def _ask_in(self, tx: StudyTx, sd: StudyDef, items: list[tuple[int, str | None, str | None]]) -> list[Any]:
        out: list[Any] = [None] * len(items)
        # retried asks: answer what their key created (earlier, or earlier in this batch)
        keyed = {k for _, _, k in items if k is not None}
        done = {k: [asked_view(t) for t in ts] for k, ts in tx.asked_with(list(keyed)).items()} if keyed else {}
        fresh, first_of = [], {}
        for i, (_, _, key) in enumerate(items):
            if key in done:
                out[i] = done[key]
            elif key is not None and key in first_of:
                continue  # the same key twice in one batch: answered with the first, below
            else:
                if key is not None:
                    first_of[key] = i
                fresh.append(i)
        if fresh:
            for i, answer in zip(fresh, self._ask_fresh(tx, sd, [items[i] for i in fresh]), strict=True):
                out[i] = answer
        for i, (_, _, key) in enumerate(items):
            if out[i] is None:
                out[i] = out[first_of[key]]
        return out

    def _ask_fresh(self, tx: StudyTx, sd: StudyDef, items: list[tuple[int, str | None, str | None]]
                   ) -> list[Any]:
        """Select and record new trials for ``items``: one answer (trials, or an error) per item."""
        study_id = sd.id
        st = tx.study
        running = tx.running_trials()
        running = tx.fail_stale(running, now() - timedelta(seconds=self.heartbeat_timeout(sd)))
        snap = self._snapshot(tx.snapshot_data, study_id, st.snapshot_version) if st.snapshot_version else None
        states = [state_from_dict(d) for d in st.adaptive]
        suggestions = select(
            snap, states, sd.space, sd.config, count=sum(c for c, _, _ in items), direction=sd.direction,
            seed=sd.seed, asked=st.next_number, pending=[t.params for t in running],
            exclude_keys=self._finished_keys(tx),  # warm-up: select reads the snapshot's n_obs
        )
        specs, owners = [], []
        for s in suggestions:
            pred = s.prediction
            points = pred.pop("points", None) if pred is not None else None
            specs.append({"params": s.params, "ukey": sd.space.key(s.params).hex(), "prediction": pred,
                          "points": pack_points(points),
                          "snapshot_version": st.snapshot_version if pred is not None else None})
        # the batch's suggestions go to its asks in arrival order
        for j, (count, worker_id, key) in enumerate(items):
            for _ in range(count):
                if len(owners) < len(specs):
                    specs[len(owners)]["worker_id"] = worker_id
                    specs[len(owners)]["ask_key"] = key
                    owners.append(j)
        rows = tx.add_trials(specs)
        answers: list[Any] = [[] for _ in items]
        for j, r, spec in zip(owners, rows, specs, strict=True):
            answers[j].append({"id": r["id"], "number": r["number"], "params": spec["params"],
                               "prediction": public_prediction(spec["prediction"])})
        return [trials or Conflict("every configuration of the space has been tried or is running",
                                   field="count", code="space_exhausted") for trials in answers]

    def heartbeat_timeout(self, sd: StudyDef) -> float:
        """Seconds of silence after which a running trial of the study expires."""
        t = sd.heartbeat_timeout_seconds
        return self.settings.heartbeat_timeout_seconds if t is None else t

    def heartbeat(self, study_id: int, trial_id: int) -> None:
        self.storage.heartbeat(study_id, trial_id, self.heartbeat_timeout(self.study(study_id)))

    def _finished_keys(self, tx: StudyTx) -> set[bytes]:
        """Keys of the study's finished trials, read incrementally by finishing order.

        Called under the study's lock. The database numbers the finishing order, so
        the cache is exact however many replicas tell; it may read this batch's own
        uncommitted tells, and ``_write_batch`` drops it when the transaction fails.
        """
        sid = tx.study.id
        seq, keys = self._finished.get(sid, (0, set()))
        if seq < tx.study.finish_seq:
            for k, n in tx.finished_keys_since(seq):
                keys.add(bytes.fromhex(k))
                seq = max(seq, n)
            self._finished[sid] = (seq, keys)
        return keys

    # ----------------------------------------------------------------- tell
    async def tell(self, study_id: int, trial_id: int, value: float | None = None,
                   state: str | None = None) -> tuple[dict[str, Any], bool]:
        """Finish a trial. Returns ``(trial view, changed)``; repeating a tell changes nothing.

        Concurrent tells (and asks) on one study commit together: see ``_write_batch``.
        """
        sd = await self._study_async(study_id)
        state = state or "complete"
        if state not in ("complete", "failed", "pruned"):
            raise InvalidRequest("must be complete, failed or pruned", field="state")
        if state == "complete" and value is None:
            raise InvalidRequest("a completed trial needs a value (or give state failed/pruned)", field="value")
        if state == "failed" and value is not None:
            raise InvalidRequest("a failed trial has no value", field="value")
        if value is not None:  # complete, or pruned with its last value
            try:
                value = check_value(value)
            except FieldError as e:
                raise InvalidRequest(e.message, field="value") from None
        with self._active(study_id):
            view, changed, n_complete = await self._writes(study_id, ("tell", (trial_id, value, state)))
        if changed and self.metrics is not None:
            self.metrics.told.labels(state).inc()
        feeds = state == "complete" or (state == "pruned" and value is not None and sd.pruner.feed_pruned)
        # with pruned values fed, completed trials undercount the observations: fit_study counts them
        enough = sd.pruner.feed_pruned or n_complete >= max(sd.config.n_warmup, 4)
        if changed and feeds and enough and self.fits is not None:
            self.fits.request(study_id)
        return view, changed

    def _tell_in(self, tx: StudyTx, sd: StudyDef, items: list[tuple[int, float | None, str]]) -> list[Any]:
        study_id = sd.id
        out: list[Any] = []
        trials = tx.trials([tid for tid, _, _ in items])
        states = None  # loaded at the first completion, adapted tell by tell, stored once
        adapted = False
        for trial_id, value, state in items:
            trial = trials.get(trial_id)
            if trial is None:
                out.append(NotFound(f"trial {trial_id} not found in study {study_id}", field="trial_id"))
                continue
            # a trial expired for silence is still running as far as its worker knows:
            # its tell is recorded (late, not lost); only a failed one changes nothing
            late = expired(trial)
            if late and state == "failed":
                out.append((trial_view(trial), False))
                continue
            if trial.state != "running" and not late:
                if trial.state == state and _same_value(trial.value, value):
                    out.append((trial_view(trial), False))
                    continue
                told = f"{trial.state}" + (f" with value {trial.value!r}" if trial.value is not None else "")
                out.append(Conflict(f"trial {trial.number} already finished as {told}",
                                    field="state" if trial.state != state else "value",
                                    code="trial_finished"))
                continue
            if state == "complete":
                pred = trial.prediction
                if pred is not None and trial.points is not None:
                    pred = {**pred, "points": unpack_points(trial.points, len(pred["intervals"]))}
                if states is None:
                    states = [state_from_dict(d) for d in tx.study.adaptive]
                states, record = adapt(states, pred, value)
                adapted = adapted or record is not None
                best = tx.study.best_value
                better = best is None or (value < best if sd.direction == "minimize" else value > best)
                tx.finish(trial, "complete", value, record, better)
            else:
                tx.finish(trial, state, value)
            out.append((trial_view(trial), True))
        if adapted:
            tx.set_adaptive([state_to_dict(s) for s in states])
        n_complete = tx.study.n_complete
        return [r if isinstance(r, Exception) else (*r, n_complete) for r in out]

    # --------------------------------------------------------------- report
    def report(self, study_id: int, trial_id: int, step: int, value: float) -> bool:
        """Store a running trial's learning-curve point; whether the study's pruner stops it."""
        sd = self.study(study_id)
        prune = report(self.storage, sd, trial_id, step, value, self.heartbeat_timeout(sd))
        if self.metrics is not None:
            self.metrics.reports.inc()
            self.metrics.pruned.inc(prune)
        return prune

    # --------------------------------------------------------- calibration
    def calibration(self, study_id: int, window: int = 20) -> dict[str, Any]:
        return calibration_view(self.study(study_id), self.storage.get_study(study_id),
                                self.storage.calibration_rows(study_id), window)
