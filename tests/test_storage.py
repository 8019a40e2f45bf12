"""Storage on SQLite and PostgreSQL: migrations match the models, snapshots, locks, deletes."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from conftest import migrate_to
from sqlalchemy import inspect

from calibo.server.errors import Conflict, NotFound
from calibo.server.storage import Storage, make_engine
from calibo.server.storage.models import TrialRow


@pytest.fixture
def storage(database_url: str):
    st = Storage(database_url)
    yield st
    st.close()


def test_migrations_build_exactly_the_models(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from calibo.server.storage.models import Base, calibo_owns

    st = Storage(database_url)  # runs upgrade head
    try:
        with st.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_name": calibo_owns})
            diff = compare_metadata(ctx, Base.metadata)
        assert diff == []
        tables = set(inspect(st.engine).get_table_names())
        assert {"studies", "trials", "snapshots", "intermediate_values", "alembic_version"} <= tables
        # the fit queue (migration 0004) exists on PostgreSQL only
        assert ("procrastinate_jobs" in tables) == database_url.startswith("postgresql")
        Storage(database_url).close()  # upgrading an up-to-date schema is a no-op
    finally:
        st.close()


def test_calibo_migrate_cli(database_url: str) -> None:
    out = subprocess.run([sys.executable, "-m", "calibo.server.cli", "migrate", "--database-url", database_url],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    engine = make_engine(database_url)
    try:
        assert {"studies", "trials", "snapshots"} <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_concurrent_creates_of_one_name_make_one_study(storage: Storage) -> None:
    definition = {"space": {"x": 1}}
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: storage.create_study("same", definition, {}), range(8)))
    assert len({info.id for info, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    with pytest.raises(Conflict):
        storage.create_study("same", {"space": {"x": 2}}, {})


def test_snapshots_only_move_forward_and_old_ones_are_pruned(storage: Storage) -> None:
    info, _ = storage.create_study("s", {}, {})
    sid = info.id
    assert storage.save_snapshot(sid, n_obs=10, method="raw", fit_seconds=0.1, data=b"a") == 1
    assert storage.save_snapshot(sid, n_obs=10, method="raw", fit_seconds=0.1, data=b"b") is None
    assert storage.save_snapshot(sid, n_obs=9, method="raw", fit_seconds=0.1, data=b"c") is None
    for n in range(11, 16):
        storage.save_snapshot(sid, n_obs=n, method="split", fit_seconds=0.1, data=bytes([n]))
    with storage.locked(sid) as tx:
        assert tx.study.snapshot_version == 6 and tx.study.snapshot_n_obs == 15
        assert tx.snapshot_data(6) == bytes([15])
        assert tx.snapshot_data(3) is None  # only the newest three are kept
        assert tx.snapshot_data(4) == bytes([13])
    got = storage.get_study(sid)
    assert got.fit_method == "split" and got.fitted_at is not None
    storage.delete_study(sid)
    assert storage.save_snapshot(sid, n_obs=20, method="raw", fit_seconds=0.1, data=b"z") is None  # gone
    with pytest.raises(NotFound):
        storage.get_study(sid)


def test_locked_transactions_serialise_read_modify_write(storage: Storage) -> None:
    """Many threads increment a counter under the study lock: none is lost."""
    info, _ = storage.create_study("c", {}, {})
    n = 40

    def bump(_: int) -> None:
        with storage.locked(info.id) as tx:
            v = tx.study.next_number
            threading.Event().wait(0.001)  # widen the race window
            tx.study.next_number = v + 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(bump, range(n)))
    assert storage.get_study(info.id).next_number == n


def test_a_failed_transaction_changes_nothing(storage: Storage) -> None:
    info, _ = storage.create_study("r", {}, {})
    with pytest.raises(RuntimeError), storage.locked(info.id) as tx:
        tx.add_trials([{"params": {"x": 1}, "ukey": "00", "worker_id": "w"}])
        raise RuntimeError("boom")
    got = storage.get_study(info.id)
    assert got.next_number == 0 and got.counts["total"] == 0


def test_ids_are_never_reused(storage: Storage) -> None:
    a, _ = storage.create_study("a", {}, {})
    storage.delete_study(a.id)
    b, _ = storage.create_study("b", {}, {})
    assert b.id > a.id


def test_sqlite_ids_are_never_reused_after_the_migrations(tmp_path) -> None:
    import sqlite3

    st = Storage(f"sqlite:///{tmp_path / 'ids.db'}")
    st.close()
    with sqlite3.connect(tmp_path / "ids.db") as c:
        for table in ("studies", "trials"):
            ddl = c.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
            assert "AUTOINCREMENT" in ddl, (table, ddl)


def test_an_existing_database_upgrades_with_its_data(tmp_path) -> None:
    from alembic import command
    from alembic.config import Config

    from calibo.server.migrations import DIRECTORY
    from calibo.server.storage import make_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    cfg = Config(str(DIRECTORY / "alembic.ini"))
    cfg.set_main_option("script_location", str(DIRECTORY))
    cfg.set_main_option("sqlalchemy.url", url)
    engine = make_engine(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.exec_driver_sql("INSERT INTO studies (name, definition, created_at, next_number, n_complete, finish_seq,"
                             " adaptive, snapshot_version, snapshot_n_obs) VALUES ('s', '{\"seed\": 0}', '2026-01-01',"
                             " 1, 0, 0, '[]', 0, 0)")
        conn.exec_driver_sql("INSERT INTO trials (study_id, number, state, params, ukey, asked_at) VALUES "
                             "(1, 0, 'running', '{}', 'ab', '2026-01-01')")
    engine.dispose()
    st = Storage(url)  # upgrade head
    try:
        with st.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT number, ukey, ask_key FROM trials").all() == [(0, "ab", None)]
    finally:
        st.close()


def test_a_database_from_before_the_studies_features_upgrades_and_serves(database_url: str) -> None:
    """A study made at revision 0005 (no names in routes, enqueue, constraints, user attributes) keeps
    its definition, trials and calibration state, and is served by the new code."""
    import asyncio

    from calibo.server.config import Settings
    from calibo.server.studies import StudyService

    migrate_to(database_url, "0005")
    old = Storage(database_url, migrate=False)
    space = {"x": {"type": "float", "low": 0, "high": 1}}
    with old.engine.begin() as conn:  # what the code of revision 0005 wrote: no new columns
        from calibo.server.studies import build_definition

        definition = build_definition("old", space, "minimize", None, None, 3, {"n_warmup": 4}, None)
        import json
        adaptive = [{"kind": "aci", "target": 0.1, "alpha": 0.1, "gamma": 0.05, "steps": 0}]
        conn.exec_driver_sql(
            "INSERT INTO studies (name, definition, created_at, next_number, n_complete, finish_seq, adaptive, "
            "snapshot_version, snapshot_n_obs) VALUES ('old', %s, '2026-01-01', 2, 1, 1, %s, 0, 0)"
            if database_url.startswith("postgresql") else
            "INSERT INTO studies (name, definition, created_at, next_number, n_complete, finish_seq, adaptive, "
            "snapshot_version, snapshot_n_obs) VALUES ('old', ?, '2026-01-01', 2, 1, 1, ?, 0, 0)",
            (json.dumps(definition), json.dumps(adaptive)))
    old.close()
    st = Storage(database_url)  # upgrade head
    try:
        svc = StudyService(Settings(database_url=database_url), st, None)
        sid = svc.resolve("old")
        info = st.get_study(sid)
        assert info.definition == definition and info.user_attrs is None
        assert info.state == {"seed": 3, "states": adaptive, "objectives": [], "constraints": []}
        trials = asyncio.run(svc.ask(sid, 2))
        assert len(trials) == 2
        view, _ = asyncio.run(svc.tell(sid, trials[0]["id"], 0.5))
        assert view["value"] == 0.5 and view["origin"] == "asked" and view["constraints"] is None
    finally:
        st.close()


# ------------------------------------------------------------------ migration 0008
def test_migration_0008_keeps_keys_as_written_and_turns_json_null_into_null(database_url: str) -> None:
    """Rows from before 0008: a JSON ``null`` where SQL NULL was meant (a tell after expiry wrote one)
    becomes NULL, every row and value stays; afterwards PostgreSQL keeps keys in the order written."""
    from datetime import UTC, datetime

    migrate_to(database_url, "0007")
    engine = make_engine(database_url)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO studies (name, definition, created_at, next_number, n_complete, "
                                 "finish_seq, state, snapshot_version, snapshot_n_obs) VALUES ('old', :d, :t, 2, 1, 1, "
                                 ":s, 0, 0)"), {"d": '{"space": {"zz": 1, "a": 2}}', "t": now, "s": "{}"})
            for number, record in ((0, "null"), (1, '{"reason": "expired"}')):
                conn.execute(sa.text("INSERT INTO trials (study_id, number, state, params, ukey, record, asked_at) "
                                     "VALUES (1, :n, 'complete', :p, '', :r, :t)"),
                             {"n": number, "p": '{"zz": 0.5, "a": 1}', "r": record, "t": now})
    finally:
        engine.dispose()
    migrate_to(database_url, "head")
    st = Storage(database_url)
    try:
        with st._read() as s:
            rows = {t.number: t for t in s.scalars(sa.select(TrialRow))}
        assert rows[0].record is None and rows[1].record == {"reason": "expired"}
        assert rows[0].params == {"zz": 0.5, "a": 1}
        assert [r[1] for r in st.calibration_rows(1)] == [1]  # NULL: no record to read
        info, _ = st.create_study("new", {"space": {"zz": 1, "a": 2, "mmm": 3}}, {"x": 1})
        assert list(st.definition(info.id)["space"]) == ["zz", "a", "mmm"]  # as written, on both backends
    finally:
        st.close()


# ------------------------------------------------------------------ migration 0010
def test_migration_0010_counts_the_failures_a_fit_learns_from(database_url: str) -> None:
    """Failed trials stored before 0010 are counted in ``studies.n_failed``, but for one the service
    failed for a silent worker; the fit's inputs hold the same ones."""
    from datetime import UTC, datetime

    migrate_to(database_url, "0009")
    engine = make_engine(database_url)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    definition = '{"space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}, "direction": "minimize", ' \
                 '"seed": 0, "config": {}, "service": {}}'
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO studies (name, definition, created_at, next_number, n_complete, "
                                 "finish_seq, state, snapshot_version, snapshot_n_obs) VALUES ('old', :d, :t, 4, 1, 4, "
                                 ":s, 0, 0)"), {"d": definition, "t": now, "s": "{}"})
            for number, state, record in ((0, "complete", None), (1, "failed", None),
                                          (2, "failed", '{"reason": "heartbeat timeout"}'), (3, "failed", None)):
                conn.execute(sa.text("INSERT INTO trials (study_id, number, state, params, ukey, record, asked_at, "
                                     "value) VALUES (1, :n, :st, :p, :k, :r, :t, :v)"),
                             {"n": number, "st": state, "p": f'{{"x": 0.{number}}}', "k": str(number), "r": record,
                              "t": now, "v": 1.0 if state == "complete" else None})
    finally:
        engine.dispose()
    migrate_to(database_url, "head")
    st = Storage(database_url)
    try:
        info = st.get_study(1)
        assert (info.n_failed, info.snapshot_n_failed) == (2, 0)
        assert st.fit_inputs(1).failed == [{"x": 0.1}, {"x": 0.3}]
    finally:
        st.close()
