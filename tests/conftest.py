"""Shared fixtures: databases (SQLite file, fresh PostgreSQL database) and live uvicorn servers.

PostgreSQL: ``CALIBO_TEST_PG`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``)
names the server; each test run creates its own database there and drops it at
the end. Without a reachable server the PostgreSQL variants skip, unless
``CALIBO_REQUIRE_PG=1`` (set by .ci/run), where they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

PG_ADMIN = os.environ.get("CALIBO_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_admin_conninfo() -> str:
    return PG_ADMIN.replace("postgresql+psycopg://", "postgresql://")


def _pg_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(_pg_admin_conninfo(), connect_timeout=3):
            return None
    except Exception as e:  # noqa: BLE001 - any failure means: no server to test against
        return f"{type(e).__name__}: {e}"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """Admin URL of a reachable PostgreSQL (skip or fail if there is none)."""
    why = _pg_reachable()
    if why is not None:
        if os.environ.get("CALIBO_REQUIRE_PG") == "1":
            pytest.fail(f"PostgreSQL is required (CALIBO_REQUIRE_PG=1) but unreachable: {why}")
        pytest.skip(f"no PostgreSQL at {PG_ADMIN}: {why}")
    yield PG_ADMIN


class PgDatabases:
    """Creates fresh databases on the server; drops them all at the end of the session."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.names: list[str] = []

    def create(self) -> str:
        import psycopg

        name = f"calibo_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        self.names.append(name)
        base = self.admin.rsplit("/", 1)[0]
        return f"{base}/{name}"

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as c:
            for name in self.names:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_databases(pg_server: str) -> Iterator[PgDatabases]:
    dbs = PgDatabases(pg_server)
    yield dbs
    dbs.drop_all()


def make_database_url(request: pytest.FixtureRequest, backend: str, tmp: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp / f'calibo-{uuid.uuid4().hex[:8]}.db'}"
    return request.getfixturevalue("pg_databases").create()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend."""
    return make_database_url(request, request.param, tmp_path)



def migrate_to(database_url: str, revision: str, down: bool = False) -> None:
    """Upgrade (or, ``down``, downgrade) the database to Alembic ``revision``, as ``calibo migrate``
    does to head: the migration tests' way to build a database of an older revision."""
    from alembic import command
    from alembic.config import Config

    from calibo.server.migrations import DIRECTORY
    from calibo.server.storage import make_engine

    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            cfg = Config(str(DIRECTORY / "alembic.ini"))
            cfg.set_main_option("script_location", str(DIRECTORY))
            cfg.attributes["connection"] = conn
            (command.downgrade if down else command.upgrade)(cfg, revision)
    finally:
        engine.dispose()

# ------------------------------------------------------------------ servers
@dataclass
class LiveServer:
    """A calibo app under a real uvicorn on a free port, in a thread of the test process."""

    database_url: str
    workers: int = 1
    api_tokens: str = ""
    # how long a sequential ask may wait for its fit: generous, as fits run slowly on this 2-core
    # machine when the suite keeps it busy (the fit process itself is warm before start() returns)
    ask_wait_seconds: float = 30.0
    port: int = 0
    settings: dict = field(default_factory=dict)  # other Settings fields

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self._thread: threading.Thread | None = None
        self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        import uvicorn

        from calibo.server.app import create_app
        from calibo.server.config import Settings
        from calibo.server.server import uvicorn_config

        settings = Settings(database_url=self.database_url, workers=self.workers, api_tokens=self.api_tokens,
                            ask_wait_seconds=self.ask_wait_seconds, **self.settings)
        config = uvicorn_config(create_app(settings), settings, "127.0.0.1", self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 120
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"calibo server on {self.url} did not start")
            time.sleep(0.02)
        # ready: /healthz says 200 once the fit processes are warm
        with httpx.Client(base_url=self.url, timeout=5.0) as c:
            while (r := c.get("/healthz")).status_code != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"calibo server on {self.url} not ready: {r.text}")
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(60)
            self._server = None

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60.0, **kw)


@contextlib.contextmanager
def backend_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, label: str,
                   **kw) -> Iterator[LiveServer]:
    """A live server (``LiveServer(**kw)``) on a fresh database of ``request.param``'s backend."""
    url = make_database_url(request, request.param, tmp_path_factory.mktemp(label))
    srv = LiveServer(url, **kw).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session", params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One live server per backend for the whole session; tests use their own studies."""
    url = make_database_url(request, request.param, tmp_path_factory.mktemp("db"))
    srv = LiveServer(url).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live server on SQLite (for client tests)."""
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('client') / 'calibo.db'}").start()
    yield srv
    srv.stop()


@pytest.fixture
def servers() -> Iterator[list[LiveServer]]:
    """Servers a test starts (``servers.append(LiveServer(...).start())``), all stopped at its end."""
    started: list[LiveServer] = []
    yield started
    for srv in started:
        srv.stop()


REDIS = os.environ.get("CALIBO_TEST_REDIS", "redis://127.0.0.1:6379")


@pytest.fixture(scope="module")
def redis_url() -> str:
    """The Redis at ``CALIBO_TEST_REDIS``: skips without one, unless ``CALIBO_REQUIRE_REDIS=1`` or
    ``CI=true``, where it fails."""
    import redis

    try:
        redis.Redis.from_url(REDIS, socket_connect_timeout=2).ping()
    except Exception as e:  # noqa: BLE001 - any failure means: no server to test against
        if os.environ.get("CALIBO_REQUIRE_REDIS") == "1" or os.environ.get("CI") == "true":
            pytest.fail(f"Redis is required here but unreachable at {REDIS}: {e}")
        pytest.skip(f"no Redis at {REDIS}: {e}")
    return REDIS


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def unique(prefix: str = "study") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------------ markers
# Every test carries ``unit``, ``live`` or ``slow`` (pyproject registers them; `make test-fast` runs
# ``-m "unit and not slow"``). Assigned here, not in each file:
#   live: the test uses a live server or a database server: one of LIVE_FIXTURES (directly or through
#         another fixture), a PostgreSQL parameter, or its file is in LIVE_FILES (files whose own
#         fixtures or tests start servers, subprocess servers, process pools or a browser);
#   slow: SLOW_FILES and SLOW_TESTS (long statistical, search or benchmark-like tests: a case over
#         ~1.5 s, or its cases together over ~4 s, in ``--durations`` of the whole suite with
#         ``-n 2`` on 2 cores), or the file or test marks itself slow (``pytestmark =
#         pytest.mark.slow``, or ``@pytest.mark.slow`` on the test: tests/test_golden.py's asks);
#   unit: every other test (no server, no database server, fast).
# A test that marks itself keeps its own marker; ``unit`` is added only to a test neither live nor slow.
LIVE_FIXTURES = {"server", "live_server", "http", "pg_server", "pg_databases"}
LIVE_FILES = {
    "test_api.py", "test_auth.py", "test_client_interrupt.py", "test_client_live.py", "test_cluster.py",
    "test_cold_start.py", "test_concurrency.py", "test_dashboard.py", "test_faults.py", "test_fit_pool.py",
    "test_http_edge.py", "test_load.py", "test_observability.py", "test_probe.py", "test_rate_limit.py",
    "test_reliability.py", "test_restart.py", "test_schemathesis.py", "test_auth_throttle.py",
}
SLOW_FILES = {
    "test_calibration_bench.py",  # the calibration benchmark's scoring, on its own rows
    "test_package.py",  # builds the wheel and installs it into fresh virtual environments
}
SLOW_TESTS = {  # file::test, every case of it (or file::test[case], that case only)
    # over ~1.5 s on a quiet 2-core machine in `make test-fast`'s --durations:
    "test_optimizer.py::test_adaptive_state_moves_once_conformalized",
    "test_warp.py::test_every_outcome_an_extreme_of_alternating_sign_keeps_predictions_finite",
    "test_optuna_remote.py::test_a_wrong_token_is_a_clear_error_and_the_right_one_works",
    "test_optuna_sampler.py::test_failed_pruned_and_nan_trials_do_not_break_it",
    "test_retune.py::test_the_schedule_refits_fully_as_the_data_grows_and_at_each_change_of_method",
    "test_retune.py::test_the_optimizer_updates_between_full_refits",
    "test_surrogates.py::test_quantiles_sorted_calibrated_and_deterministic[mlp-ensemble]",
    "test_qgp_torch.py::test_importing_the_engine_does_not_import_torch",
    "test_surrogates_mlp.py::test_importing_the_engine_does_not_import_torch",
    "test_multi_objective.py::test_state_dict_resumes_the_same_next_ask",
    "test_multi_objective.py::test_a_multi_objective_snapshot_round_trips_through_storage_bytes",
    "test_conditional.py::test_the_engine_searches_a_conditional_space",
    "test_conformal.py::test_crossval_and_jackknife_after_bootstrap_cover_within_four_points",
    "test_conformal.py::test_cv_plus_covers_within_three_points",
    "test_conformal.py::test_cv_plus_is_valid_for_unstable_tree_models",
    "test_conformal.py::test_qgp_normalized_scores_keep_the_posterior_shape_and_cover",
    "test_conformal.py::test_split_conformal_covers_within_three_points",
    "test_constraints.py::test_the_best_feasible_is_found_and_suggestions_learn_the_boundary",
    "test_crowd.py::test_a_crowd_is_reproducible_under_a_seed",
    "test_crowd.py::test_a_crowd_never_gets_a_running_or_observed_configuration",
    "test_metrics.py::test_llr_detects_breaches_that_depend_on_params",
    "test_metrics.py::test_summarize_an_optimizer_run",
    "test_multi_objective.py::test_a_maximised_objective_is_handled_in_its_own_orientation",
    "test_multi_objective.py::test_constraints_leave_infeasible_points_off_the_front",
    "test_multi_objective.py::test_per_objective_calibration_after_conformalization",
    "test_multi_objective.py::test_qgp_normalized_scores_travel_with_a_multi_objective_snapshot",
    "test_multi_objective.py::test_three_objective_ehvi_prefers_improving_candidates_and_runs_a_study",
    "test_multi_objective.py::test_three_objectives_use_parego_and_each_objective_is_predicted",
    "test_multi_objective.py::test_zdt1_hypervolume_beats_the_quasi_random_design",
    "test_noise_free.py::test_signal_fraction_is_small_amid_noisy_data_and_near_one_far_from_it",
    "test_optimizer.py::test_beats_random_search_on_branin",
    "test_optimizer.py::test_maximize_finds_the_maximum",
    "test_optimizer.py::test_minimizing_f_and_maximizing_minus_f_suggest_the_same",
    "test_optimizer.py::test_same_seed_same_sequence",
    "test_optuna_sampler.py::test_constraints_told_with_set_constraint_are_modelled",
    "test_optuna_sampler.py::test_finds_branin_and_steps_grids",
    "test_optuna_sampler.py::test_multi_objective_studies_model_each_objective",
    "test_optuna_sampler.py::test_parallel_jobs_on_rdb_storage",
    "test_optuna_sampler.py::test_reproducible_with_a_seed",
    "test_real_tasks.py::test_a_held_out_objective_is_deterministic_and_finite",
    "test_surrogates_engine.py::test_split_conformal_coverage_through_the_engine",
    "test_surrogates_lw.py::test_coverage_after_split_conformal_is_nominal",
    "test_surrogates_mlp.py::test_ensemble_learns_the_signal_and_is_unsure_away_from_data",
    "test_surrogates_mlp.py::test_seeded_fits_are_reproducible",
    "test_surrogates_mlp.py::test_split_conformal_coverage_is_nominal",
    "test_warp.py::test_a_study_told_extreme_values_keeps_fitting_and_asking",
}
CATEGORIES = ("unit", "live", "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        own = {m.name for m in item.iter_markers() if m.name in CATEGORIES}
        path = item.path.name
        params = getattr(getattr(item, "callspec", None), "params", {}).values()
        if "live" not in own and (LIVE_FIXTURES & set(getattr(item, "fixturenames", ()))
                                  or any(isinstance(v, str) and v == "postgresql" for v in params)
                                  or path in LIVE_FILES):
            item.add_marker(pytest.mark.live)
            own.add("live")
        ids = {f"{path}::{getattr(item, 'originalname', item.name)}", f"{path}::{item.name}"}
        if "slow" not in own and (path in SLOW_FILES or ids & SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
            own.add("slow")
        if not own:
            item.add_marker(pytest.mark.unit)
    modules = {item.path.name: item.module for item in items if getattr(item, "module", None) is not None}
    stale = sorted(t for t in SLOW_TESTS if t.split("::")[0] in modules
                   and not hasattr(modules[t.split("::")[0]], t.split("::")[1].split("[")[0]))
    if stale:  # a renamed slow test would otherwise fall silently into `make test-fast`
        warnings.warn(pytest.PytestWarning(f"tests/conftest.py SLOW_TESTS names no collected test: {stale}"),
                      stacklevel=1)


def pytest_terminal_summary(terminalreporter) -> None:
    """tests/test_docs.py's count, summed over its pages (xdist's reports carry user properties)."""
    ran, skipped = 0, Counter()
    for report in (r for reports in terminalreporter.stats.values() for r in reports):
        for name, value in getattr(report, "user_properties", ()):
            if name == "docs" and getattr(report, "when", "call") == "call":
                ran += value["run"]
                skipped.update(value["not run"])
    if ran or skipped:
        reasons = "; ".join(f"{n} {why}" for why, n in skipped.most_common())
        terminalreporter.write_line(f"docs: {ran} blocks run, {skipped.total()} not run here ({reasons})")
