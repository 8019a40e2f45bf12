"""``GET /v1/studies/{study}/importance``: each parameter's importance from a surrogate fitted on
the study's completed trials (``calibo.engine.importance``), cached per study and per set of
results, so polling dashboards do not refit; a new result computes it afresh."""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from calibo.engine.importance import MIN_TRIALS, importance
from calibo.engine.study import StudySpec

from ..errors import InvalidRequest, NotFound
from ..storage import Storage
from .views import ImportanceView

__all__ = ["ImportanceCache"]

_KEEP = 256  # studies whose last answer is kept
_RECENT = 2000  # the most recent results the decomposition is fitted on (bounds its time)


class ImportanceCache:
    """The last importance answer per (study, objective), keyed by the results it was computed on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: OrderedDict[tuple[int, int], tuple[tuple[Any, ...], ImportanceView]] = OrderedDict()

    def get(self, storage: Storage, study_id: int, objective: int = 0) -> ImportanceView:
        inputs = storage.fit_inputs(study_id)
        if inputs is None:
            raise NotFound(f"study {study_id} not found", field="study")
        spec = StudySpec.from_definition(inputs.definition)
        m = len(spec.directions)
        if not 0 <= objective < m:
            raise InvalidRequest(f"objective must be in [0, {m - 1}] (the study has {m})", field="objective")
        obs = [(p, v[objective] if isinstance(v, list) else v) for p, v in inputs.observations][-_RECENT:]
        key = (inputs.revision, len(obs), tuple(map(repr, obs[-4:])))  # a grown space is computed afresh
        with self._lock:
            hit = self._answers.get((study_id, objective))
            if hit is not None and hit[0] == key:
                self._answers.move_to_end((study_id, objective))
                return {**hit[1], "cached": True}
        why = None
        if not spec.space.params:  # created empty (an Optuna storage's), not grown yet
            why = "the study has no parameters yet"
        elif len(obs) < MIN_TRIALS:
            why = f"importance needs at least {MIN_TRIALS} completed trials; the study has {len(obs)}"
        if why is not None:  # nothing to decompose yet: an answer, not an error (dashboards poll it)
            return {"importances": [], "n_trials": len(obs), "objective": objective, "method": None, "fit": None,
                    "seconds": 0.0, "computed_at": None, "cached": False, "reason": why}
        result = importance(obs, spec.space, seed=spec.seed).to_dict()
        for p in result["importances"]:
            p.pop("shares", None)
        answer: ImportanceView = {
            "importances": result["importances"], "n_trials": result["n_trials"], "objective": objective,
            "method": result["method"], "fit": result["fit"], "seconds": result["seconds"],
            "computed_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"), "cached": False}
        with self._lock:
            self._answers[(study_id, objective)] = (key, answer)
            while len(self._answers) > _KEEP:
                self._answers.popitem(last=False)
        return {**answer, "cached": False}
