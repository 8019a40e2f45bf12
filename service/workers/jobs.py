"""The fit job: load a study's completed trials, run the engine's ``fit``, store the snapshot.

The same function runs in the local process pool (``calibo serve``) and, on a
cluster, in ``calibo worker`` processes; it is idempotent (a fit that finds the
stored snapshot already current does nothing) and safe to run twice at once
(``Storage.save_snapshot`` keeps only a snapshot newer than the stored one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from calibo.engine import EngineConfig, SearchSpace, fit
from calibo.engine.retune import Tuned
from calibo.engine.snapshot import Snapshot
from calibo.engine.study import FitResult, StudySpec

from ..storage import Storage

log = logging.getLogger("calibo.workers")

_storage: Storage | None = None  # per worker process, made by ``init_process``
_device: str | None = None  # CALIBO_DEVICE of this process's fits (None: the environment's, or auto)
FIT_NICENESS = 10


def set_device(device: str | None) -> None:
    """Where this process's torch fits run: ``auto | cpu | cuda`` (see ``engine.device``)."""
    global _device
    _device = device


def init_process(database_url: str, device: str | None = None, ready: Connection | None = None) -> None:
    """Process-pool initializer: one database connection pool per worker process.

    With ``ready``, the process then warms up (``warm_up``) and sends ``(pid, fit seconds)`` on it.
    """
    global _storage
    set_device(device)
    # Ctrl-C in a terminal reaches the whole process group: the server shuts the pool
    # down itself, so a worker must not die mid-fit (and log a failure) on SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Fits are single-threaded by design (engine.fit limits BLAS to one thread);
    # the pool's parallelism is across studies.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Fits are background work: under load the API's asks and tells (and the
    # database) go first, fits take the cores that are left.
    try:
        os.nice(FIT_NICENESS)
    except OSError:  # not permitted here: run at normal priority
        pass
    _storage = Storage(database_url, migrate=False)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    if ready is not None:
        fit_s = warm_up()
        # a message this small is one write on a pipe, so processes never interleave theirs
        with contextlib.suppress(OSError):
            ready.send((os.getpid(), fit_s))


def warm_up() -> float | None:
    """A tiny real fit (default engine settings, 8 observations in 2-D): whatever a study's first
    fit would load (BLAS, the surrogate's lazy imports and caches, the candidate sampler) is loaded now.
    Its seconds, or None when it failed (logged: the process serves fits all the same)."""
    rng = np.random.default_rng(0)
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0},
                                   "y": {"type": "float", "low": -1.0, "high": 1.0}})
    obs = [({"x": float(a), "y": float(b)}, float((a - 0.3) ** 2 + b)) for a, b in rng.random((8, 2))]
    t0 = time.perf_counter()
    try:
        fit(obs, space, EngineConfig(), "minimize", 0, device=_device)
    except Exception as e:  # noqa: BLE001 - a warm-up must not take the process down
        log.warning("fit process %d: warm-up fit failed: %s: %s", os.getpid(), type(e).__name__, e)
        return None
    return time.perf_counter() - t0


def _exit_with_parent(parent: int, every: float = 1.0) -> None:
    """A worker whose server was killed (no clean shutdown to stop it) exits too."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(0)


def fit_study(study_id: int, storage: Storage | None = None, save: bool = True) -> dict[str, Any]:
    """Fit ``study_id`` on its completed trials if its snapshot lags them: a full refit or an update
    of the newest snapshot's hyperparameters (``engine.retune``).

    With ``save=False`` the snapshot comes back as ``result["snapshot"]`` (bytes)
    for the caller to store: the local pool stores it from the API process, so
    that on SQLite only one process ever writes (a worker holding the write lock
    while descheduled at its lower priority would stall every ask and tell).
    """
    storage = storage if storage is not None else _storage
    if storage is None:
        raise RuntimeError("fit_study needs a storage (init_process was not called)")
    t0 = time.perf_counter()
    inputs = storage.fit_inputs(study_id)
    if inputs is None:
        return {"study_id": study_id, "status": "deleted"}
    spec = StudySpec.from_definition(inputs.definition)
    if not spec.space.params:  # created empty (an Optuna storage's): nothing to fit until it grows
        return {"study_id": study_id, "status": "current", "n_obs": inputs.snapshot_n_obs,
                "n_failed": inputs.snapshot_n_failed}
    n = len(inputs.observations)
    failed = inputs.failed if spec.learn_failures else []
    if not spec.config.fits(n) or (n, len(failed)) <= (inputs.snapshot_n_obs, inputs.snapshot_n_failed):
        return {"study_id": study_id, "status": "current", "n_obs": inputs.snapshot_n_obs,
                "n_failed": inputs.snapshot_n_failed}
    t1 = time.perf_counter()
    # a running trial its caller runs may hold some of its parameters only so far: not yet pending
    pending = [p for p in inputs.running if spec.space.is_configuration(p)]
    snap = spec.fit(inputs.observations, pending=pending, constraints=inputs.constraints, device=_device,
                    failed=failed, tuned=Tuned.from_dict(inputs.tuned), previous=_previous(study_id, inputs.previous))
    t2 = time.perf_counter()
    result = {"study_id": study_id, "status": "fitted", **FitResult.of(snap).to_dict(), "revision": inputs.revision}
    # where the job's time went (``Metrics.observe_fit``): reading its inputs, the engine's fit, the
    # snapshot's encoding; ``store`` adds the write
    result["phases"] = {"load": t1 - t0, "fit": t2 - t1, "encode": time.perf_counter() - t2}
    return result if not save else store(storage, result)


def _previous(study_id: int, data: bytes | None) -> Snapshot | None:
    """The newest snapshot, which the fit may extend; None (a fit) where it cannot be read."""
    if data is None:
        return None
    try:
        return Snapshot.from_bytes(data)
    except ValueError as e:
        log.warning("study %s: the newest snapshot cannot be read, fitting anew: %s", study_id, e)
        return None


def store(storage: Storage, result: dict[str, Any]) -> dict[str, Any]:
    """Save the snapshot a ``fit_study(save=False)`` returned; the result without the bytes."""
    data = result.pop("snapshot", None)
    if data is None:
        return result
    if result.get("device_fallback"):
        log.warning("study %s: %s", result["study_id"], result["device_fallback"])
    t0 = time.perf_counter()
    version = storage.save_snapshot(result["study_id"], n_obs=result["n_obs"], method=result["method"],
                                    fit_seconds=result["fit_seconds"], data=data,
                                    device=result.get("device", "cpu"), revision=result.get("revision"),
                                    n_failed=result.get("n_failed", 0), kind=result.get("fit_kind", "full"),
                                    tuned=result.get("tuned"))
    if "phases" in result:
        result["phases"]["store"] = time.perf_counter() - t0
    log.debug("study %s: fitted on %d observations in %.3f s (version %s)",
              result["study_id"], result["n_obs"], result["fit_seconds"], version)
    return result | {"status": "fitted" if version else "superseded", "version": version}
