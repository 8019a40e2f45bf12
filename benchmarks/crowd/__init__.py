"""A crowd of ask/tell clients on one study of ``calibo serve``, with retries, faults, and what must hold afterwards.

Shared by ``benchmarks.load`` (and ``benchmarks.crowd_live``) and ``tests/test_load.py`` / ``tests/test_faults.py``.

* :mod:`.clients`: :class:`Crowd`, the clients and their retry policy;
* :mod:`.verify`: reading the study back and checking the invariants;
* :mod:`.server`: :class:`CaliboServer`, a ``calibo serve`` that can be killed -9 and restarted;
* :mod:`.faults`: :class:`PgOutage` (a PostgreSQL database refusing connections for a
  while) and :class:`HealthMonitor` (``/healthz`` polled throughout);
* :mod:`.scenarios`: :func:`run_load`, :func:`run_kill` and :func:`run_outage`.
"""

from benchmarks.crowd.clients import RETRY_STATUSES, TASK, Crowd, Progress, params_key
from benchmarks.crowd.faults import HealthMonitor, PgOutage
from benchmarks.crowd.scenarios import (
    WARM,
    create_study,
    run_kill,
    run_load,
    run_outage,
    study_view,
    timeline,
    warm_up,
)
from benchmarks.crowd.server import CaliboServer, server_on
from benchmarks.crowd.verify import read_trials, verify

__all__ = [
    "RETRY_STATUSES", "TASK", "WARM", "CaliboServer", "Crowd", "HealthMonitor", "PgOutage", "Progress",
    "create_study", "params_key", "read_trials", "run_kill", "run_load", "run_outage", "server_on",
    "study_view", "timeline", "verify", "warm_up",
]
