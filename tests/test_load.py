"""A crowd: 64 concurrent clients share 2,000 ask/tell pairs on one study, over real HTTP.

``calibo serve`` runs as a subprocess (one fit worker) on a fresh SQLite file and on a
fresh PostgreSQL database. The first 16 trials are told by one client so the crowd
runs on a fitted surrogate, as it would in practice; the other 1,984 by the crowd (see
``benchmarks/crowd/``: every request timed, retries on 503 and connection
errors, each ask with its own Idempotency-Key). Nothing may answer 5xx, and reading the
study back: no acknowledged tell lost or changed, no 409, no ask returning params
another running trial holds, all params distinct, numbers 0..1999, the complete count
equal to the acknowledged tells, one adaptive step per predicted tell.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_database_url

from benchmarks.crowd import run_load, server_on

CLIENTS = 64
TRIALS = 2000  # in total, on one study


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_crowd_of_64_clients_loses_nothing_and_never_sees_a_5xx(
        request: pytest.FixtureRequest, tmp_path: Path, backend: str,
        record_property: pytest.RecordProperty) -> None:
    url = make_database_url(request, backend, tmp_path)
    with server_on(url, tmp_path / "server.log") as srv:
        res = run_load(srv.url, clients=CLIENTS, trials=TRIALS, seed=11, timeout=240)
        log = srv.tail()
    for k in ("wall_s", "pairs_per_s", "retries", "outcomes"):
        record_property(k, res[k])
    record_property("ask_p99_ms", res["ask_ms"].get("p99"))
    record_property("tell_p99_ms", res["tell_ms"].get("p99"))
    inv = res["invariants"]
    assert res["finished"], res["problems"]
    assert res["errors_5xx"] == 0, f"{res['outcomes']}\n{log}"
    assert res["failed_permanently"]["total"] == 0, res["failed_examples"]
    assert inv["trials_total"] == TRIALS and inv["gaps"] == 0 and inv["dup_numbers"] == 0
    assert inv["lost"] == 0 and inv["value_changed"] == 0
    assert inv["duplicated_409"] == 0
    assert inv["dup_running"] == 0 and inv["dup_params"] == 0
    assert inv["complete_in_view"] == inv["acked"] == TRIALS
    assert res["problems"] == [], f"{res['problems']}\n{log}"
