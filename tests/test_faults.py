"""Faults under a crowd of clients: the API killed (-9) and restarted, PostgreSQL unreachable.

Both run ``calibo serve`` as a subprocess with a crowd of clients on one study
(``benchmarks/crowd/``: retries on 503 and connection errors until a
deadline, an ask with its same Idempotency-Key, a tell as it is) and check the same
invariants as the load test when the crowd is done: no acknowledged tell lost, no 409,
no duplicate suggestion, numbers gapless, every trial complete.

* kill -9 of the API, twice, restarted each time on the same database and port: once
  with the crowd running (it retries through the connection errors), once with the
  crowd paused, where the study's adaptive state, counts and best trial read right
  before the kill must read the same right after the restart.
* the PostgreSQL database refuses connections for a few seconds (ALLOW_CONNECTIONS
  false, every session terminated) and comes back: clients see 503 with Retry-After,
  never 500; /healthz says the database is down during it and ok after; the service
  recovers without a restart; the recovery time is recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import _pg_admin_conninfo, make_database_url

from benchmarks.crowd import CaliboServer, run_kill, run_outage, server_on

CLIENTS = 32
TRIALS = 1000  # in total, on one study
KILL_WARM = 40  # > conformalize_from (32)


def _common(res: dict, log: str) -> None:
    inv = res["invariants"]
    assert res["finished"], res["problems"]
    assert res["answers_500"] == 0, f"{res['outcomes']}\n{log}"
    assert res["failed_permanently"]["total"] == 0, f"{res['failed_examples']}\n{log}"
    assert inv["lost"] == 0 and inv["value_changed"] == 0, inv
    assert inv["duplicated_409"] == 0 and inv["dup_running"] == 0 and inv["dup_params"] == 0, inv
    assert inv["trials_total"] == TRIALS and inv["gaps"] == 0 and inv["running_left"] == 0, inv
    assert res["problems"] == [], f"{res['problems']}\n{log}"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_crowd_goes_on_through_a_kill_9_and_restart(request: pytest.FixtureRequest, tmp_path: Path,
                                                        backend: str,
                                                        record_property: pytest.RecordProperty) -> None:
    url = make_database_url(request, backend, tmp_path)
    srv = CaliboServer(url, tmp_path / "server.log")
    srv.start()
    try:
        # the warm-up (one client, waiting for its fit) passes conformalize_from (32), so every crowd
        # ask carries a calibrated prediction and tells adapt from the start: the state compared across
        # the quiet kill is a real one however slowly the fit worker starts (cold caches in CI)
        res = run_kill(srv, clients=CLIENTS, trials=TRIALS, seed=5, timeout=240, warm=KILL_WARM)
    finally:
        srv.stop()
    log = srv.tail()
    for k in ("hot_restart_s", "quiet_restart_s", "retries", "outcomes", "wall_s"):
        record_property(k, res.get(k))
    assert res["transport_errors"] > 0, "the hot kill cut off no request: it tested nothing"
    assert res["state_equal"], (res["state_before"], res["state_after"])
    assert res["state_before"]["adaptive"]["pairs"][0]["steps"] > 0, "no adapted tell before the kill"
    _common(res, log)


def test_the_service_rides_out_a_postgresql_outage(request: pytest.FixtureRequest, tmp_path: Path,
                                                   record_property: pytest.RecordProperty) -> None:
    url = make_database_url(request, "postgresql", tmp_path)
    database = url.rsplit("/", 1)[1]
    with server_on(url, tmp_path / "server.log") as srv:
        res = run_outage(srv.url, _pg_admin_conninfo(), database, clients=CLIENTS, trials=TRIALS, seed=7,
                         outage_s=4.0, timeout=240)
        log = srv.tail(60)
        whole_log = srv.log_path.read_text(errors="replace")
    for k in ("recovery_s", "healthz_recovery_s", "answers_503", "answers_500", "retries",
              "outcomes_during_outage", "healthz_during"):
        record_property(k, res.get(k))
    print(f"recovery: first ask+tell pair {res['recovery_s']} s, /healthz ok {res['healthz_recovery_s']} s "
          f"after connections were allowed again")
    assert res["answers_503"] > 0, f"no 503 during the outage: {res['outcomes_during_outage']}\n{log}"
    assert res["answers_500"] == 0, f"{res['outcomes_during_outage']}\n{log}"
    assert res["answers_503_without_retry_after"] == 0
    assert res["healthz_down_seen"], res["healthz_during"]
    assert res["healthz_recovery_s"] is not None, "/healthz never said ok again"
    assert res["recovery_s"] is not None and res["recovery_s"] < 30, res["recovery_s"]
    # an outage is logged in a few concise lines, not a traceback per failed request (it was 19 MB in 8 s)
    assert "Traceback" not in whole_log, whole_log[-3000:]
    outage_lines = [ln for ln in whole_log.splitlines() if "unreachable" in ln or "waits for the database" in ln]
    print(f"outage log: {len(whole_log.splitlines())} lines in all, {len(outage_lines)} about the outage")
    assert 1 <= len(outage_lines) <= 10, outage_lines
    _common(res, log)
