"""What each request does: the service's home for the engine's select and adapt.

The API turns HTTP into calls here; this module persists through
``service.storage`` first, runs the engine's cheap steps (select at ask, adapt
at tell) inside the study's locked transaction, and hands refits to the fit
pool. It knows nothing of HTTP.
"""

from __future__ import annotations

import threading
import zlib
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio.to_thread
import numpy as np

from .batching import GroupCommit
from .config import Settings
from .engine import EngineConfig, SearchSpace, Snapshot, adapt, initial_states, metrics, select
from .engine.adaptive import state_from_dict, state_to_dict
from .engine.errors import FieldError
from .engine.optimizer import check_value
from .errors import Conflict, InvalidRequest, NotFound
from .storage import Storage, StudyInfo, StudyTx, TrialRow, as_utc, now
from .workers import FitPool

SERVICE_SETTINGS = {"ask_wait_seconds": (0.0, 600.0), "heartbeat_timeout_seconds": (1.0, 7 * 86400.0)}


@dataclass(frozen=True)
class StudyDef:
    """A study's immutable definition, parsed once and cached."""

    id: int
    space: SearchSpace
    config: EngineConfig
    direction: str
    seed: int
    ask_wait_seconds: float | None
    heartbeat_timeout_seconds: float | None


def default_seed(name: str) -> int:
    """Studies without a seed get one from their name: reproducible, and distinct per study."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def build_definition(name: str, space: Any, direction: str, surrogate: str | None,
                     acquisition: str | None, seed: int | None, settings: dict[str, Any] | None
                     ) -> dict[str, Any]:
    """The canonical stored form of a create request; raises InvalidRequest naming the field."""
    try:
        sp = SearchSpace.from_dict(space)
    except FieldError as e:
        raise InvalidRequest(e.message, field=e.field) from None
    settings = dict(settings or {})
    service: dict[str, float | None] = {}
    for key, (lo, hi) in SERVICE_SETTINGS.items():
        v = settings.pop(key, None)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise InvalidRequest(f"must be a number in [{lo:g}, {hi:g}]", field=f"settings.{key}")
            v = float(v)
        service[key] = v
    for key in ("surrogate", "acquisition"):
        if key in settings:
            raise InvalidRequest(f"give {key} at the top level, not in settings", field=f"settings.{key}")
    engine = {**settings, **{k: v for k, v in (("surrogate", surrogate), ("acquisition", acquisition))
                             if v is not None}}
    try:
        config = EngineConfig.from_dict(engine)
    except FieldError as e:
        top = e.field in ("surrogate", "acquisition")
        raise InvalidRequest(e.message, field=e.field if top else f"settings.{e.field}") from None
    except TypeError as e:
        raise InvalidRequest(str(e), field="settings") from None
    return {
        "space": sp.to_dict(),
        "direction": direction,
        "seed": default_seed(name) if seed is None else int(seed),
        "config": config.to_dict(),
        "service": service,
    }


def pack_points(points: np.ndarray | None) -> bytes | None:
    """Conformal point sets of one prediction, (2, P, n), as raw little-endian float64.

    Raw rather than ``.npy``: np.load parses its header with ast.literal_eval,
    which showed up on every tell.
    """
    if points is None:
        return None
    return np.ascontiguousarray(points, dtype="<f8").tobytes()


def unpack_points(data: bytes, pairs: int) -> np.ndarray:
    """Inverse of ``pack_points``; ``pairs`` (P) is the number of intervals of the prediction."""
    return np.frombuffer(data, dtype="<f8").reshape(2, pairs, -1)


def public_prediction(pred: dict[str, Any] | None) -> dict[str, Any] | None:
    """What clients see of a prediction: no internal point sets or orientation sign."""
    if pred is None:
        return None
    return {k: v for k, v in pred.items() if k not in ("points", "sign")}


def trial_view(t: TrialRow) -> dict[str, Any]:
    return {
        "id": t.id,
        "study_id": t.study_id,
        "number": t.number,
        "state": t.state,
        "params": t.params,
        "value": t.value,
        "prediction": public_prediction(t.prediction),
        "worker_id": t.worker_id,
        "asked_at": as_utc(t.asked_at),
        "heartbeat_at": as_utc(t.heartbeat_at),
        "finished_at": as_utc(t.finished_at),
    }


def _same_value(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and float(a) == float(b))


class StudyService:
    """Create, ask, tell and report on studies; shared by all API requests of a process."""

    def __init__(self, settings: Settings, storage: Storage, fits: FitPool | None) -> None:
        self.settings = settings
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
               settings: dict[str, Any] | None = None) -> tuple[StudyInfo, bool]:
        definition = build_definition(name, space, direction, surrogate, acquisition, seed, settings)
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

    def view(self, info: StudyInfo) -> dict[str, Any]:
        d = info.definition
        config = dict(d["config"])
        surrogate, acquisition = config.pop("surrogate"), config.pop("acquisition")
        service = d.get("service", {})
        wait = service.get("ask_wait_seconds")
        settings = {**config, **service,
                    "ask_wait_seconds": self.settings.ask_wait_seconds if wait is None else wait}
        fit = self.fits.status(info.id) if self.fits is not None else {"fitting": False, "queued": False}
        return {
            "id": info.id,
            "name": info.name,
            "space": d["space"],
            "direction": d["direction"],
            "seed": d["seed"],
            "surrogate": surrogate,
            "acquisition": acquisition,
            "settings": settings,
            "created_at": info.created_at,
            "trials": info.counts,
            "best_trial": info.best_trial,
            "surrogate_status": {
                "snapshot_version": info.snapshot_version or None,
                "fitted_on": info.snapshot_n_obs,
                "lag": info.n_complete - info.snapshot_n_obs,
                "method": info.fit_method,
                "fitted_at": info.fitted_at,
                "fit_seconds": info.fit_seconds,
                "last_error": info.fit_error,
                **fit,
            },
            "adaptive": {
                "adapter": config["adapter"],
                "pairs": [{"coverage": round(1.0 - s["target"], 10), "target_alpha": s["target"],
                           "alpha": s["alpha"], "steps": s["steps"]} for s in info.adaptive],
            },
        }

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

    async def ask(self, study_id: int, count: int = 1, worker_id: str | None = None) -> list[dict[str, Any]]:
        """``count`` new trials; concurrent asks on one study are served as one batch (one select)
        in the same transaction as the tells queued with them (see ``_write_batch``)."""
        sd = await self._study_async(study_id)
        with self._active(study_id):
            if self._inflight[study_id] == 1:  # maybe a sequential user: see _maybe_wait_for_fit
                await anyio.to_thread.run_sync(self._maybe_wait_for_fit, sd)
            return await self._writes(study_id, ("ask", (count, worker_id)))

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
        with self.storage.locked(study_id) as tx:
            if tells:
                for i, r in zip(tells, self._tell_in(tx, sd, [items[i][1] for i in tells]), strict=True):
                    out[i] = r
            if asks:
                for i, r in zip(asks, self._ask_in(tx, sd, [items[i][1] for i in asks]), strict=True):
                    out[i] = r
        return out

    def _ask_in(self, tx: StudyTx, sd: StudyDef, items: list[tuple[int, str | None]]) -> list[Any]:
        study_id = sd.id
        st = tx.study
        running = tx.running_trials()
        if sd.heartbeat_timeout_seconds is not None:
            running = tx.fail_stale(running, now() - timedelta(seconds=sd.heartbeat_timeout_seconds))
        snap = self._snapshot(tx.snapshot_data, study_id, st.snapshot_version) if st.snapshot_version else None
        states = [state_from_dict(d) for d in st.adaptive]
        suggestions = select(
            snap, states, sd.space, sd.config, count=sum(c for c, _ in items), direction=sd.direction,
            seed=sd.seed, asked=st.next_number, pending=[t.params for t in running],
            n_observed=st.n_complete, exclude_keys=self._finished_keys(tx),
        )
        specs, owners = [], []
        for s in suggestions:
            pred = s.prediction
            points = pred.pop("points", None) if pred is not None else None
            specs.append({"params": s.params, "ukey": sd.space.key(s.params).hex(), "prediction": pred,
                          "points": pack_points(points),
                          "snapshot_version": st.snapshot_version if pred is not None else None})
        # the batch's suggestions go to its asks in arrival order
        for i, (count, worker_id) in enumerate(items):
            for _ in range(count):
                if len(owners) < len(specs):
                    specs[len(owners)]["worker_id"] = worker_id
                    owners.append(i)
        rows = tx.add_trials(specs)
        out: list[Any] = [[] for _ in items]
        for i, r, spec in zip(owners, rows, specs, strict=True):
            out[i].append({"id": r["id"], "number": r["number"], "params": spec["params"],
                           "prediction": public_prediction(spec["prediction"])})
        for i, trials in enumerate(out):
            if not trials:
                out[i] = Conflict("every configuration of the space has been tried or is running",
                                  field="count", code="space_exhausted")
        return out

    def _finished_keys(self, tx: StudyTx) -> set[bytes]:
        """Keys of the study's finished trials, read incrementally by finishing order.

        Called under the study's lock. The cache only ever holds committed rows,
        and the database numbers them, so it is exact however many replicas tell.
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
        if changed and state == "complete" and self.fits is not None and n_complete >= max(sd.config.n_warmup, 4):
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
            if trial.state != "running":
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

    # --------------------------------------------------------- calibration
    def calibration(self, study_id: int, window: int = 20) -> dict[str, Any]:
        sd = self.study(study_id)
        info = self.storage.get_study(study_id)
        rows = self.storage.calibration_rows(study_id)
        trials, records, params = [], [], []
        for tid, number, p, rec in rows:
            if "covered" not in rec:
                continue
            records.append(rec)
            params.append(p)
            trials.append({
                "trial_id": tid, "number": number, "method": rec["method"], "value": rec["value"],
                "mean": rec.get("mean"), "levels": rec.get("levels"), "quantiles": rec.get("quantiles"),
                "intervals": [{"coverage": c, "alpha": a, "lower": lo, "upper": hi, "covered": cov,
                               "width": w}
                              for c, a, lo, hi, cov, w in zip(rec["coverage"], rec["alpha"], rec["lower"],
                                                              rec["upper"], rec["covered"], rec["width"],
                                                              strict=True)],
                "beta": rec.get("beta"),
            })
        nominal = [round(1.0 - s["target"], 10) for s in info.adaptive]
        out: dict[str, Any] = {
            "study_id": study_id,
            "n": len(records),
            "nominal": nominal,
            "trials": trials,
            "current_alpha": [s["alpha"] for s in info.adaptive],
        }
        if not records:
            out.update(summary={"n": 0}, conformal={"n": 0}, cumulative_coverage=[], rolling_coverage=[],
                       alpha_trajectory=[])
            return out
        covered = np.array([r["covered"] for r in records], dtype=float)
        features = sd.space.encode([sd.space.validate(p) for p in params])
        out["cumulative_coverage"] = metrics.cumulative_coverage(covered).tolist()
        out["rolling_coverage"] = metrics.trailing_coverage(covered, window).tolist()
        out["alpha_trajectory"] = [r["alpha"] for r in records]
        out["summary"] = metrics.summarize(records, features, window=window)
        out["conformal"] = metrics.summarize(records, features, window=window, conformal_only=True)
        out["window"] = window
        return out
