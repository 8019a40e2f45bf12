"""The ask inside a study's locked transaction: retried asks answered from their key, enqueued
trials handed out first, then the engine's select on the study's snapshot and adaptive state."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from calibo.engine import StudyState, select
from calibo.engine.select import queued_first

from ..errors import Conflict
from ..storage import StudyTx, TrialRow, now
from .definitions import StudyDef
from .steps import StudySteps
from .views import AskedView, asked_view
from .writes import AskWrite


class AskSteps(StudySteps):
    """:class:`StudyService`'s ask steps (mixed into it: they use its storage, caches and settings)."""

    def _ask_in(self, tx: StudyTx, sd: StudyDef, items: list[AskWrite]) -> list[list[AskedView] | Exception]:
        out: list[list[AskedView] | Exception | None] = [None] * len(items)
        # retried asks: answer what their key created (earlier, or earlier in this batch)
        keyed = {w.key for w in items if w.key is not None}
        done = {k: [asked_view(t) for t in ts] for k, ts in tx.asked_with(list(keyed)).items()} if keyed else {}
        fresh, first_of = [], {}
        for i, key in enumerate(w.key for w in items):
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
        for i, w in enumerate(items):
            if out[i] is None and w.key is not None:  # a key's second ask in the batch
                out[i] = out[first_of[w.key]]
        answered: list[list[AskedView] | Exception] = []
        for done_ask in out:  # every ask answered: fresh, from its key, or as its key's first ask
            assert done_ask is not None
            answered.append(done_ask)
        return answered

    def _ask_fresh(self, tx: StudyTx, sd: StudyDef, items: list[AskWrite]) -> list[list[AskedView] | Exception]:
        """Select and record new trials for ``items``: one answer (trials, or an error) per item.

        Enqueued trials go first, oldest first, each to exactly one ask (they are handed out inside
        the study's locked transaction); a partly enqueued one takes the rest of its parameters from
        the select (and, not chosen on a prediction, has none).
        """
        study_id = sd.id
        if not sd.space.params:
            return [Conflict("the study has no parameters yet: grow its space (PATCH .../space), or run trials "
                             "whose parameters grow it (an Optuna storage's)", field="space", code="empty_space")
                    for _ in items]
        st = tx.study
        total = sum(w.count for w in items)
        waiting = self._queue(tx, total)
        fixed = [t for t in waiting if sd.space.is_configuration(t.params)]
        running = tx.running_trials()
        running = tx.fail_stale(running, now() - timedelta(seconds=self.heartbeat_timeout(sd)))
        suggestions = []
        state = StudyState.from_dict(st.state)
        if total > len(fixed):
            snap = self._snapshot(tx.snapshot_data, study_id, st.snapshot_version) if st.snapshot_version else None
            suggestions = select(
                snap, state, sd.space, sd.config, count=total - len(fixed),
                direction=sd.direction, asked=st.next_number,
                # a trial its caller runs (added, or an enqueued one it started) may hold some of its
                # parameters only so far
                pending=[t.params for t in running if t.origin is None or sd.space.is_configuration(t.params)]
                + [t.params for t in fixed],
                exclude_keys=self._finished_keys(tx),  # warm-up: select reads the snapshot's n_obs
            )
        specs: list[dict[str, Any]] = []  # the storage's new-trial specs (StudyTx.add_trials, assign)
        rows: list[dict[str, Any]] = []
        handed = queued_first(sd.space, [t.params for t in waiting], suggestions, state.fill_rng(st.next_number))
        for t, q in zip(waiting, handed[:len(waiting)], strict=True):  # enqueued trials first, in order
            specs.append({"params": q.params, "ukey": sd.space.key(q.params).hex(), "prediction": None,
                          "points": None, "snapshot_version": None, "trial": t})
        for s in handed[len(waiting):]:
            pred, points = s.prediction.to_storage() if s.prediction is not None else (None, None)
            specs.append({"params": s.params, "ukey": sd.space.key(s.params).hex(), "prediction": pred,
                          "points": points, "snapshot_version": st.snapshot_version if pred is not None else None,
                          "shown": None if s.prediction is None else s.prediction.public()})
        # the batch's trials go to its asks in arrival order
        owners: list[int] = []
        for j, w in enumerate(items):
            for _ in range(w.count):
                if len(owners) < len(specs):
                    spec = specs[len(owners)]
                    spec["worker_id"] = w.worker_id
                    spec["ask_key"] = w.key
                    if w.user_attrs:
                        spec["user_attrs"] = w.user_attrs
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
        answers: list[list[AskedView]] = [[] for _ in items]
        for j, r, spec in zip(owners, rows, specs, strict=True):
            trial: AskedView = {"id": r["id"], "number": r["number"], "study_id": study_id, "params": spec["params"],
                     "prediction": spec.get("shown")}
            if r.get("origin"):
                trial["origin"] = r["origin"]
            if r.get("user_attrs"):
                trial["user_attrs"] = r["user_attrs"]
            answers[j].append(trial)
        return [trials or Conflict("every configuration of the space has been tried or is running",
                                   field="count", code="space_exhausted") for trials in answers]

    def _queue(self, tx: StudyTx, total: int) -> list[TrialRow]:
        """The oldest ``total`` enqueued trials, to hand out first. An enqueue with ``skip_if_exists``
        leaves its configuration's key on its waiting trial: if a trial has finished with that
        configuration since (added, or told), the waiting one is taken off the queue instead of being
        handed out, so the configuration is not evaluated twice (Optuna looks only when enqueueing)."""
        waiting = tx.waiting_trials()
        # the finished keys only where a waiting trial asks to be checked (most asks have none waiting)
        evaluated = self._finished_keys(tx) if any(t.ukey for t in waiting) else set()
        out: list[TrialRow] = []
        for t in waiting:
            if t.ukey and bytes.fromhex(t.ukey) in evaluated:
                tx.remove_waiting(t)
            elif len(out) < total:
                out.append(t)
        return out

    def _finished_keys(self, tx: StudyTx) -> set[bytes]:
        """Keys of the study's finished trials, read incrementally by finishing order.

        Called under the study's lock. The database numbers the finishing order, so
        the cache is exact however many replicas tell; it may read this batch's own
        uncommitted tells, and ``_write_batch`` drops it when the transaction fails.
        """
        sid = tx.study.id
        seq, keys = self._caches.finished(sid)
        if seq < tx.study.finish_seq:
            for k, n in tx.finished_keys_since(seq):
                keys.add(bytes.fromhex(k))
                seq = max(seq, n)
            self._caches.set_finished(sid, seq, keys)
        return keys
