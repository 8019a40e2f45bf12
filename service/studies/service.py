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
import numpy as np

from calibo.engine import EngineConfig, SearchSpace, Snapshot, adapt, initial_states, select
from calibo.engine.adaptive import state_from_dict, state_to_dict
from calibo.engine.errors import FieldError
from calibo.engine.limits import bad_text
from calibo.engine.optimizer import adapt_constraints, check_value, check_values
from calibo.engine.pruning import PrunerConfig

from ..batching import GroupCommit
from ..config import Settings
from ..errors import Conflict, InvalidRequest, NotFound
from ..storage import Storage, StudyInfo, StudyTx, expired, feasible, now
from ..workers import FitPool
from .calibration import calibration_view
from .definitions import (
    StudyDef,
    build_definition,
    check_name,
    conflict_message,
    definition_differences,
)
from .pareto import pareto as pareto_of
from .reports import report
from .views import (
    asked_view,
    join_points,
    public_prediction,
    split_points,
    study_summary,
    study_view,
    trial_view,
)

MAX_ADDED = 1000  # trials one add request may carry

# an ask queued for the study's write batch: (count, worker_id, Idempotency-Key, user_attrs)
AskItem = tuple[int, str | None, str | None, dict[str, Any] | None]


def _same_value(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and float(a) == float(b))


def check_outcome(sd: StudyDef, state: str, value: Any, values: Any = None) -> tuple[float | None, list[float] | None]:
    """A tell's or an added trial's ``(value, values)`` for ``state``; InvalidRequest naming the field.

    A multi-objective study's completed trial has ``values`` (one per objective) and no ``value``;
    its stored ``value`` is the first objective's (what the warm-up and listings count on)."""
    if state not in ("complete", "failed", "pruned"):
        raise InvalidRequest("must be complete, failed or pruned", field="state")
    if sd.multi:
        if value is not None:
            raise InvalidRequest(f"a multi-objective study is told values, one per objective {list(sd.directions)}",
                                 field="value")
        if state == "complete" and values is None:
            raise InvalidRequest("a completed trial needs its values, one per objective "
                                 f"{list(sd.directions)} (or give state failed/pruned)", field="values")
        if state != "complete" and values is not None:
            raise InvalidRequest(f"a {state} trial has no values", field="values")
        if values is None:
            return None, None
        try:
            vs = check_values(values, len(sd.directions))
        except FieldError as e:
            raise InvalidRequest(e.message, field=e.field) from None
        return vs[0], vs
    if values is not None:
        raise InvalidRequest("values are for a multi-objective study (directions); this one is told a value",
                             field="values")
    return _check_value(state, value), None


def _check_value(state: str, value: Any) -> float | None:
    if state == "complete" and value is None:
        raise InvalidRequest("a completed trial needs a value (or give state failed/pruned)", field="value")
    if state == "failed" and value is not None:
        raise InvalidRequest("a failed trial has no value", field="value")
    if value is None:
        return None
    try:
        return check_value(value)
    except FieldError as e:
        raise InvalidRequest(e.message, field="value") from None


def check_constraints(sd: StudyDef, state: str, constraints: Any) -> list[float] | None:
    """A completed trial of a constrained study carries one finite value per constraint (others may)."""
    if constraints is None:
        if sd.constraints and state == "complete":
            raise InvalidRequest(f"a completed trial needs its {len(sd.constraints)} constraint values "
                                 f"{list(sd.constraints)}", field="constraints")
        return None
    if not sd.constraints:
        raise InvalidRequest("the study has no constraints", field="constraints")
    if not isinstance(constraints, (list, tuple)) or len(constraints) != len(sd.constraints):
        raise InvalidRequest(f"needs {len(sd.constraints)} values, one per constraint {list(sd.constraints)}",
                             field="constraints")
    out = []
    for i, c in enumerate(constraints):
        try:
            out.append(check_value(c))
        except FieldError as e:
            raise InvalidRequest(e.message, field=f"constraints.{i}") from None
    return out


def _enqueued_view(t: Any) -> dict[str, Any]:
    return {"id": t.id, "number": t.number, "params": t.params, "state": t.state, "origin": t.origin or "asked",
            "user_attrs": t.user_attrs or {}}


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
               settings: dict[str, Any] | None = None, pruner: Any = None, constraints: Any = None,
               user_attrs: Any = None, directions: Any = None) -> tuple[StudyInfo, bool]:
        """Create a study, or answer the existing one of the same name and definition (its user
        attributes updated with ``user_attrs``); ``directions``: a multi-objective study."""
        definition = build_definition(name, space, direction, surrogate, acquisition, seed, settings, pruner,
                                      constraints, directions)
        return self._create(name, definition, user_attrs)

    def _create(self, name: str, definition: dict[str, Any], attrs: dict[str, Any] | None) -> tuple[StudyInfo, bool]:
        config = EngineConfig.from_dict(definition["config"])
        seed = definition["seed"]
        adaptive = [state_to_dict(s) for s in initial_states(config, seed)]
        heads = {}
        if definition.get("constraints"):
            heads["constraints"] = [[state_to_dict(s) for s in initial_states(config, seed + 1 + j)]
                                    for j in range(len(definition["constraints"]))]
        if definition.get("directions"):  # the first objective's states are the study's own
            heads["objectives"] = [[state_to_dict(s) for s in initial_states(config, seed + 101 + j)]
                                   for j in range(1, len(definition["directions"]))]
        heads = heads or None
        try:
            info, created = self.storage.create_study(name, definition, adaptive, heads, attrs)
        except Conflict as e:
            if e.code != "name_conflict":
                raise
            differences = definition_differences(self.storage.definition(self.storage.study_id(name)), definition)
            raise Conflict(conflict_message(name, differences), field="name", code="name_conflict",
                           details={"differences": differences}) from None
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
                constraints=tuple(raw.get("constraints", ())),
                directions=tuple(raw.get("directions", ())),
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
        sd = self.study(info.id)
        front = pareto_of(sd, self.storage.objective_rows(info.id)) if sd.multi else None
        return study_view(info, self.settings.ask_wait_seconds, fit, front)

    def pareto(self, study_id: int) -> dict[str, Any]:
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
                "history": front["history"]}

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
        if running or not sd.config.warmed_up(n_complete) or fitted_on >= n_complete:
            return
        self.fits.request(sd.id)  # coalesces with a queued one; restarts one lost with a restart
        self.fits.wait(sd.id, n_complete, wait)

    async def _study_async(self, study_id: int) -> StudyDef:
        sd = self._defs.get(study_id)
        return sd if sd is not None else await anyio.to_thread.run_sync(self.study, study_id)

    async def ask(self, study_id: int, count: int = 1, worker_id: str | None = None,
                  key: str | None = None, user_attrs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
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
            out = await self._writes(study_id, ("ask", (count, worker_id, key, user_attrs)))
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

    def _ask_in(self, tx: StudyTx, sd: StudyDef, items: list[AskItem]) -> list[Any]:
        out: list[Any] = [None] * len(items)
        # retried asks: answer what their key created (earlier, or earlier in this batch)
        keyed = {k for _, _, k, _ in items if k is not None}
        done = {k: [asked_view(t) for t in ts] for k, ts in tx.asked_with(list(keyed)).items()} if keyed else {}
        fresh, first_of = [], {}
        for i, (_, _, key, _) in enumerate(items):
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
        for i, (_, _, key, _) in enumerate(items):
            if out[i] is None:
                out[i] = out[first_of[key]]
        return out

    def _ask_fresh(self, tx: StudyTx, sd: StudyDef, items: list[AskItem]) -> list[Any]:
        """Select and record new trials for ``items``: one answer (trials, or an error) per item.

        Enqueued trials go first, oldest first, each to exactly one ask (they are handed out inside
        the study's locked transaction); a partly enqueued one takes the rest of its parameters from
        the select (and, not chosen on a prediction, has none).
        """
        study_id = sd.id
        st = tx.study
        total = sum(c for c, _, _, _ in items)
        waiting = tx.waiting_trials(total)
        fixed = [t for t in waiting if sd.space.complete(t.params)]
        running = tx.running_trials()
        running = tx.fail_stale(running, now() - timedelta(seconds=self.heartbeat_timeout(sd)))
        suggestions = []
        if total > len(fixed):
            snap = self._snapshot(tx.snapshot_data, study_id, st.snapshot_version) if st.snapshot_version else None
            states = [state_from_dict(d) for d in st.adaptive]
            more = st.head_adaptive or {}  # the snapshot's heads: further objectives first, then constraints
            heads = [[state_from_dict(d) for d in hs] for key in ("objectives", "constraints") for hs in more.get(key, [])]
            suggestions = select(
                snap, states, sd.space, sd.config, count=total - len(fixed), direction=sd.direction,
                seed=sd.seed, asked=st.next_number, pending=[t.params for t in running] + [t.params for t in fixed],
                exclude_keys=self._finished_keys(tx),  # warm-up: select reads the snapshot's n_obs
                head_states=heads if snap is not None and snap.heads else (),
            )
        specs, rows = [], []
        rng = np.random.default_rng([sd.seed, st.next_number, 13])
        donors = iter(suggestions)
        for t in waiting:  # enqueued trials first, in order
            params = t.params if sd.space.complete(t.params) else None
            if params is None:
                donor = next(donors, None)
                params = sd.space.fill(t.params, donor.params if donor is not None else {}, rng)
            specs.append({"params": params, "ukey": sd.space.key(params).hex(), "prediction": None,
                          "points": None, "snapshot_version": None, "trial": t})
        for s in donors:
            pred, points = split_points(s.prediction)
            specs.append({"params": s.params, "ukey": sd.space.key(s.params).hex(), "prediction": pred,
                          "points": points, "snapshot_version": st.snapshot_version if pred is not None else None})
        # the batch's trials go to its asks in arrival order
        owners: list[int] = []
        for j, (count, worker_id, key, attrs) in enumerate(items):
            for _ in range(count):
                if len(owners) < len(specs):
                    spec = specs[len(owners)]
                    spec["worker_id"] = worker_id
                    spec["ask_key"] = key
                    if attrs:
                        spec["user_attrs"] = attrs
                    owners.append(j)
        new = [spec for spec in specs if "trial" not in spec]
        made = iter(tx.add_trials(new))
        for spec in specs:
            t = spec.pop("trial", None)
            if t is not None:
                tx.assign(t, spec)
                rows.append({"id": t.id, "number": t.number, "origin": t.origin, "user_attrs": t.user_attrs})
            else:
                rows.append({**next(made), "user_attrs": spec.get("user_attrs")})
        answers: list[Any] = [[] for _ in items]
        for j, r, spec in zip(owners, rows, specs, strict=True):
            trial = {"id": r["id"], "number": r["number"], "study_id": study_id, "params": spec["params"],
                     "prediction": public_prediction(spec["prediction"])}
            if r.get("origin"):
                trial["origin"] = r["origin"]
            if r.get("user_attrs"):
                trial["user_attrs"] = r["user_attrs"]
            answers[j].append(trial)
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
                   state: str | None = None, constraints: list[float] | None = None,
                   user_attrs: dict[str, Any] | None = None, values: list[float] | None = None,
                   ) -> tuple[dict[str, Any], bool]:
        """Finish a trial. Returns ``(trial view, changed)``; repeating a tell changes nothing.

        ``values``: a multi-objective study's objectives (instead of ``value``).
        ``constraints``: the trial's constraint values (every constraint of the study, required to
        complete a constrained study's trial); ``user_attrs`` are merged into the trial's.
        Concurrent tells (and asks) on one study commit together: see ``_write_batch``.
        """
        sd = await self._study_async(study_id)
        state = state or "complete"
        value, values = check_outcome(sd, state, value, values)
        constraints = check_constraints(sd, state, constraints)
        with self._active(study_id):
            view, changed, n_complete = await self._writes(
                study_id, ("tell", (trial_id, value, state, constraints, user_attrs, values)))
        if changed and self.metrics is not None:
            self.metrics.told.labels(state).inc()
        feeds = state == "complete" or (state == "pruned" and value is not None and sd.pruner.feed_pruned)
        # with pruned values fed, completed trials undercount the observations: fit_study counts them
        enough = sd.pruner.feed_pruned or self._warmed_up(sd, n_complete)
        if changed and feeds and enough and self.fits is not None:
            self.fits.request(study_id)
        return view, changed

    def _warmed_up(self, sd: StudyDef, n_complete: int) -> bool:
        """Whether the study's warm-up is over (``EngineConfig.warmed_up``), so that a finished
        trial is worth a fit; its running trials are read only when they could decide it."""
        cfg = sd.config
        return cfg.warmed_up(n_complete) or (n_complete >= cfg.warmup_least
                                             and cfg.warmed_up(n_complete, self.storage.progress(sd.id)[2]))

    def _tell_in(self, tx: StudyTx, sd: StudyDef, items: list[tuple]) -> list[Any]:
        study_id = sd.id
        out: list[Any] = []
        trials = tx.trials([item[0] for item in items])
        states = heads = objectives = None  # loaded at the first completion, adapted tell by tell, stored once
        adapted = False
        for trial_id, value, state, constraints, attrs, values in items:
            trial = trials.get(trial_id)
            if trial is None:
                out.append(NotFound(f"trial {trial_id} not found in study {study_id}", field="trial_id"))
                continue
            if trial.state == "waiting":
                out.append(Conflict(f"trial {trial.number} is enqueued: an ask hands it out before it can be told",
                                    field="trial_id", code="trial_waiting"))
                continue
            # a trial expired for silence is still running as far as its worker knows:
            # its tell is recorded (late, not lost); only a failed one changes nothing
            late = expired(trial)
            if late and state == "failed":
                out.append((trial_view(trial), False))
                continue
            if trial.state != "running" and not late:
                if trial.state == state and _same_value(trial.value, value) and \
                        (constraints is None or trial.constraints == constraints) and \
                        (values is None or trial.values == values):
                    out.append((trial_view(trial), False))
                    continue
                told = f"{trial.state}" + (f" with value {trial.value!r}" if trial.value is not None else "")
                out.append(Conflict(f"trial {trial.number} already finished as {told}",
                                    field="state" if trial.state != state else "value",
                                    code="trial_finished"))
                continue
            if state == "complete":
                pred = join_points(trial.prediction, trial.points)
                if states is None:
                    states = [state_from_dict(d) for d in tx.study.adaptive]
                    heads = [[state_from_dict(d) for d in hs]
                             for hs in (tx.study.head_adaptive or {}).get("constraints", [])]
                    objectives = [[state_from_dict(d) for d in hs]
                                  for hs in (tx.study.head_adaptive or {}).get("objectives", [])]
                if sd.multi:  # every objective's own states, prediction and value
                    every, records = adapt_constraints([states, *objectives], pred, values, "objectives")
                    states, objectives = every[0], every[1:]
                    record = None if records is None else {"objectives": records}
                else:
                    states, record = adapt(states, pred, value)
                if heads:
                    heads, cons_records = adapt_constraints(heads, pred, constraints)
                    if record is not None and cons_records is not None:
                        record["constraints"] = cons_records
                adapted = adapted or record is not None
                better = feasible(constraints) and sd.better(value, tx.study.best_value)
                tx.finish(trial, "complete", value, record, better, constraints=constraints, values=values,
                          user_attrs=attrs)
            else:
                tx.finish(trial, state, value, constraints=constraints, user_attrs=attrs)
            out.append((trial_view(trial), True))
        if adapted:
            more = {key: [[state_to_dict(s) for s in hs] for hs in group]
                    for key, group in (("constraints", heads), ("objectives", objectives)) if group}
            tx.set_adaptive([state_to_dict(s) for s in states], more or None)
        n_complete = tx.study.n_complete
        return [r if isinstance(r, Exception) else (*r, n_complete) for r in out]

    # ------------------------------------------------- enqueue, add, copy
    def enqueue(self, study_id: int, params: dict[str, Any], skip_if_exists: bool = True,
                user_attrs: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
        """Queue ``params`` (all of a configuration, or some) for the next asks; ``(trial, created)``.

        With ``skip_if_exists``, a trial whose parameters already include these values (enqueued,
        running or finished) is answered instead of a new one.
        """
        sd = self.study(study_id)
        try:
            params = sd.space.validate_partial(params)
        except FieldError as e:
            raise InvalidRequest(e.message, field=f"params.{e.field}" if e.field != "params" else "params") from None
        complete = sd.space.complete(params)
        with self.storage.locked(study_id) as tx:
            if skip_if_exists:
                same = tx.trials_with_params(params)
                if same:
                    return _enqueued_view(same[0]), False
            (row,) = tx.add_trials([{"params": params, "ukey": sd.space.key(params).hex() if complete else "",
                                     "origin": "enqueued", "user_attrs": user_attrs}], state="waiting")
            return {"id": row["id"], "number": row["number"], "params": params, "state": "waiting",
                    "origin": "enqueued", "user_attrs": user_attrs or {}}, True

    def add(self, study_id: int, trials: list[dict[str, Any]], origin: str = "added") -> list[dict[str, Any]]:
        """Record trials evaluated elsewhere (``params`` and ``value``, or ``state: failed``; a
        constrained study's ``constraints``; ``user_attrs``): they count in the next fit and the best
        trial, and, having no prediction, never move the calibration state. All or none are stored."""
        sd = self.study(study_id)
        if not 1 <= len(trials) <= MAX_ADDED:
            raise InvalidRequest(f"1 to {MAX_ADDED} trials per request (got {len(trials)})", field="trials")
        specs = [self._added_spec(sd, t, f"trials.{i}") for i, t in enumerate(trials)]
        with self.storage.locked(study_id) as tx:
            rows = tx.add_finished(specs, lambda v: sd.better(v, tx.study.best_value))
            views = [trial_view(r) for r in rows]
            n_complete = tx.study.n_complete
        if any(spec["state"] == "complete" for spec in specs) and self._warmed_up(sd, n_complete) \
                and self.fits is not None:
            self.fits.request(study_id)
        return views

    def _added_spec(self, sd: StudyDef, trial: dict[str, Any], where: str) -> dict[str, Any]:
        state = trial.get("state") or "complete"
        if state not in ("complete", "failed", "pruned"):
            raise InvalidRequest("must be complete, failed or pruned", field=f"{where}.state")
        try:
            params = sd.space.validate(trial.get("params"))
        except FieldError as e:
            raise InvalidRequest(e.message, field=f"{where}.params.{e.field}" if e.field != "params"
                                 else f"{where}.params") from None
        try:
            value, values = check_outcome(sd, state, trial.get("value"), trial.get("values"))
            constraints = check_constraints(sd, state, trial.get("constraints"))
        except InvalidRequest as e:
            raise InvalidRequest(e.message, field=f"{where}.{e.field}") from None
        return {"params": params, "ukey": sd.space.key(params).hex(), "state": state, "value": value,
                "values": values, "constraints": constraints, "user_attrs": trial.get("user_attrs"), "origin": trial.get("origin", "added")}

    def copy(self, study_id: int, name: str, user_attrs: dict[str, Any] | None = None) -> tuple[StudyInfo, int]:
        """A new study named ``name`` with the same definition and every finished trial of this one
        (copied: their values, constraints and attributes, no predictions); ``(study, trials copied)``."""
        check_name(name)
        src = self.storage.get_study(study_id)
        if self.storage.exists(name):
            raise Conflict(f"a study named {name!r} exists", field="name", code="name_conflict")
        info, _ = self._create(name, src.definition, user_attrs)
        rows = self.storage.finished_trials(study_id)
        specs = [{"params": r.params, "ukey": r.ukey, "state": r.state, "value": r.value, "values": r.values,
                  "constraints": r.constraints, "user_attrs": r.user_attrs, "origin": "copied"} for r in rows]
        sd = self.study(info.id)
        try:
            for lo in range(0, len(specs), MAX_ADDED):
                with self.storage.locked(info.id) as tx:
                    tx.add_finished(specs[lo : lo + MAX_ADDED], lambda v: sd.better(v, tx.study.best_value))
        except BaseException:  # a copy is whole or absent: never half a study under the new name
            self.delete(info.id)
            raise
        if sd.config.warmed_up(sum(r.state == "complete" for r in rows)) and self.fits is not None:
            self.fits.request(info.id)
        return self.storage.get_study(info.id), len(specs)

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
