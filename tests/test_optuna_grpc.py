"""`calibo optuna-grpc`: Optuna's gRPC storage proxy in front of a calibo server.

The command's arguments and its clear errors (no optuna extra, a port taken) here without a server;
then, against a live calibo server on SQLite and on PostgreSQL, the real command as a subprocess:
Optuna loads a study created with calibo's Client through ``GrpcStorageProxy`` and sees the same
trials, ``study.optimize`` through the proxy writes trials the REST API lists as complete, and
SIGTERM stops the command cleanly.
"""

from __future__ import annotations

import math
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import LiveServer, free_port, unique

from calibo.server.cli import main

ROOT = Path(__file__).resolve().parents[1]
# Optuna warns that its gRPC proxy is experimental at each GrpcStorageProxy: known, and pinned (optuna==5.0.0)
pytestmark = pytest.mark.filterwarnings("ignore:GrpcStorageProxy is experimental")


# ------------------------------------------------------------------ arguments, help, errors
def test_the_subcommand_and_its_defaults(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "optuna-grpc" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["optuna-grpc", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for option in ("--host", "--port", "--url", "--token", "--log-level", "$CALIBO_URL", "$CALIBO_TOKEN"):
        assert option in out

    seen = {}
    import calibo.server.cli as cli

    monkeypatch.setattr(cli, "optuna_grpc", lambda args: seen.update(vars(args)) or 0)
    # the parser binds the function when main() builds it: the patched one runs
    assert main(["optuna-grpc"]) == 0
    assert {k: seen[k] for k in ("host", "port", "url", "token", "log_level")} == {
        "host": "0.0.0.0", "port": 13000, "url": None, "token": None, "log_level": "info"}
    assert main(["optuna-grpc", "--host", "127.0.0.1", "--port", "13001", "--url", "http://calibo:8000",
                 "--token", "t", "--log-level", "debug"]) == 0
    assert (seen["host"], seen["port"], seen["url"], seen["token"], seen["log_level"]) == (
        "127.0.0.1", 13001, "http://calibo:8000", "t", "debug")


@pytest.mark.parametrize("argv", [["--port", "grpc"], ["--log-level", "loud"]])
def test_a_bad_argument_is_argparses_clear_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["optuna-grpc", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[0]}" in err and "Traceback" not in err


def _run_without(module: str, port: int = 1) -> subprocess.CompletedProcess[str]:
    """``calibo optuna-grpc --port port`` in a fresh interpreter where ``module`` cannot be imported."""
    code = textwrap.dedent(f"""
        import sys
        for name in list(sys.modules):
            if name == {module!r} or name.startswith({module!r} + "."):
                del sys.modules[name]
        sys.modules[{module!r}] = None  # import of {module} halted: as if not installed
        from calibo.server.cli import main
        sys.exit(main(["optuna-grpc", "--host", "127.0.0.1", "--port", "{port}"]))
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("module", ["optuna", "grpc", "google.protobuf"])
def test_without_the_optuna_extra_the_message_names_it(module: str) -> None:
    done = _run_without(module)
    assert done.returncode == 2, done.stderr
    assert "pip install 'calibo[optuna]'" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.startswith("calibo optuna-grpc: ")


def test_without_the_server_extra_the_message_names_that() -> None:
    # calibo.optuna imports calibo's engine (scipy): without it, main()'s server-extra message. (Were
    # the storage to need no engine, the command would get as far as the port, taken here.)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = _run_without("scipy", taken.getsockname()[1])
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode == 2:
        assert "pip install 'calibo[server]'" in done.stderr
    else:
        assert done.returncode == 1 and "cannot listen on" in done.stderr, done.stderr


class _FakeStorage:
    made: list[tuple[str, str | None]] = []

    def __init__(self, url: str, token: str | None = None) -> None:
        self.made.append((url, token))


def test_the_url_and_token_default_to_the_environment_and_a_taken_port_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import calibo.optuna

    monkeypatch.setattr(calibo.optuna, "CaliboStorage", _FakeStorage, raising=False)
    _FakeStorage.made.clear()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        monkeypatch.delenv("CALIBO_URL", raising=False)
        monkeypatch.delenv("CALIBO_TOKEN", raising=False)
        assert main(["optuna-grpc", "--host", "127.0.0.1", "--port", port]) == 1
        monkeypatch.setenv("CALIBO_URL", "http://calibo-api:8000")
        monkeypatch.setenv("CALIBO_TOKEN", "from-env")
        assert main(["optuna-grpc", "--host", "127.0.0.1", "--port", port]) == 1
        assert main(["optuna-grpc", "--host", "127.0.0.1", "--port", port, "--url", "http://other:8000",
                     "--token", "given"]) == 1
        monkeypatch.setenv("CALIBO_TOKEN", "")  # empty: no token (as calibo's Client reads it)
        assert main(["optuna-grpc", "--host", "127.0.0.1", "--port", port]) == 1
    assert _FakeStorage.made == [("http://127.0.0.1:8000", None), ("http://calibo-api:8000", "from-env"),
                                 ("http://other:8000", "given"), ("http://calibo-api:8000", None)]
    err = capsys.readouterr().err
    assert f"calibo optuna-grpc: cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


# ------------------------------------------------------------------ the proxy in front of a live server
@dataclass
class Proxy:
    process: subprocess.Popen[str]
    port: int
    log: Path

    def output(self) -> str:
        return self.log.read_text()


def start_proxy(url: str, log: Path, *extra: str) -> Proxy:
    """The real ``calibo optuna-grpc`` (the installed command) on a free port, once it accepts."""
    calibo = shutil.which("calibo", path=str(Path(sys.executable).parent))
    command = [calibo] if calibo else [sys.executable, "-m", "calibo.server.cli"]
    port = free_port()
    with log.open("w") as out:
        process = subprocess.Popen([*command, "optuna-grpc", "--host", "127.0.0.1", "--port", str(port),
                                    "--url", url, *extra], stdout=out, stderr=subprocess.STDOUT, text=True)
    proxy = Proxy(process, port, log)
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"calibo optuna-grpc exited {process.returncode}:\n{proxy.output()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proxy
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"calibo optuna-grpc did not listen on {port}:\n{proxy.output()}") from None
            time.sleep(0.1)


def stop_proxy(proxy: Proxy) -> int:
    """SIGTERM, as a container stop: its exit status."""
    proxy.process.send_signal(signal.SIGTERM)
    try:
        return proxy.process.wait(30)
    except subprocess.TimeoutExpired:
        proxy.process.kill()
        proxy.process.wait()
        raise


@pytest.fixture(scope="module")
def optuna_mod() -> Any:
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@pytest.fixture
def proxy(server: LiveServer, tmp_path: Path) -> Iterator[Proxy]:
    p = start_proxy(server.url, tmp_path / "proxy.log", "--log-level", "info")
    try:
        yield p
    finally:
        if p.process.poll() is None:
            stop_proxy(p)


SPACE = {"x": {"type": "float", "low": -5.0, "high": 10.0},
         "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
         "n": {"type": "int", "low": 1, "high": 8},
         "kind": {"type": "categorical", "choices": ["a", "b"]}}


def loss(p: dict[str, Any]) -> float:
    return (p["x"] - 2.0) ** 2 + (math.log10(p["lr"]) + 2.0) ** 2 + 0.1 * p["n"] + (p["kind"] == "b")


def objective(trial: Any) -> float:
    return loss({"x": trial.suggest_float("x", -5.0, 10.0), "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
                 "n": trial.suggest_int("n", 1, 8), "kind": trial.suggest_categorical("kind", ["a", "b"])})


def test_optuna_loads_a_calibo_study_through_the_proxy_and_its_trials_land_in_calibo(
        optuna_mod: Any, server: LiveServer, proxy: Proxy) -> None:
    optuna = optuna_mod
    from optuna.storages import GrpcStorageProxy

    from calibo import Client
    from calibo.optuna import CaliboStorage

    name = unique("grpc")
    with Client(server.url) as client:
        study = client.create_study(name, SPACE, "minimize", seed=0)
        for _ in range(3):
            t = study.ask()
            study.tell(t, loss(t.params))
        failed = study.ask()
        study.tell(failed, state="failed")
        running = study.ask()  # handed out, not told: Optuna's running trial
        before = {r.number: r for r in study.trials()}

    storage = GrpcStorageProxy(host="127.0.0.1", port=proxy.port)
    try:
        loaded = optuna.load_study(study_name=name, storage=storage)
        assert loaded.directions == [optuna.study.StudyDirection.MINIMIZE]
        # the same trials, parameters and values as calibo holds, and as CaliboStorage reads them directly
        seen = {t.number: t for t in loaded.get_trials(deepcopy=False)}
        assert sorted(seen) == sorted(before) == list(range(5))
        state = {"complete": optuna.trial.TrialState.COMPLETE, "failed": optuna.trial.TrialState.FAIL,
                 "running": optuna.trial.TrialState.RUNNING}
        for number, record in before.items():
            trial = seen[number]
            assert trial._trial_id == record.id
            assert trial.state == state[str(record.state)]
            assert trial.params == record.params
            assert trial.value == record.value
        assert seen[running.number].state == optuna.trial.TrialState.RUNNING
        direct = optuna.load_study(study_name=name, storage=CaliboStorage(server.url))
        assert loaded.get_trials(deepcopy=False) == direct.get_trials(deepcopy=False)
        assert loaded.best_trial.number == direct.best_trial.number

        # Optuna's own sampler, through the proxy: five trials calibo's REST API lists as complete
        loaded.sampler = optuna.samplers.TPESampler(seed=0)
        loaded.optimize(objective, n_trials=5)
        ran = [t for t in loaded.get_trials(deepcopy=False) if t.number >= 5]
        assert len(ran) == 5 and all(t.state == optuna.trial.TrialState.COMPLETE for t in ran)
        with Client(server.url) as client:
            after = {r.number: r for r in client.load_study(name).trials()}
        for t in ran:
            record = after[t.number]
            assert str(record.state) == "complete" and record.id == t._trial_id
            assert record.params == t.params and record.value == t.value == loss(t.params)
        # and over the plain REST route
        with server.client() as http:
            page = http.get(f"/v1/studies/{before[0].study_id}/trials", params={"state": "complete"}).json()
        assert page["total"] == 3 + 5
        assert {row["number"]: row["value"] for row in page["trials"] if row["number"] >= 5} == {
            t.number: t.value for t in ran}
    finally:
        storage.remove_session()

    # SIGTERM (a container stop): it stops cleanly, exit 0
    assert stop_proxy(proxy) == 0, proxy.output()
    assert "Traceback" not in proxy.output()
    assert "Optuna gRPC storage proxy on 127.0.0.1" in proxy.output()


def test_a_study_optuna_creates_through_the_proxy_is_a_calibo_study(
        optuna_mod: Any, server: LiveServer, proxy: Proxy) -> None:
    optuna = optuna_mod
    from optuna.storages import GrpcStorageProxy

    from calibo import Client

    name = unique("grpc-new")
    storage = GrpcStorageProxy(host="127.0.0.1", port=proxy.port)
    study = optuna.create_study(study_name=name, storage=storage, directions=["minimize", "maximize"],
                                sampler=optuna.samplers.TPESampler(seed=0))
    study.set_user_attr("owner", "grpc")
    study.optimize(lambda t: (objective(t), t.suggest_float("y", 0.0, 1.0)), n_trials=5)
    with Client(server.url) as client:
        calibo_study = client.load_study(name)
        assert calibo_study.directions == ["minimize", "maximize"]
        assert calibo_study.user_attrs["owner"] == "grpc"
        records = calibo_study.trials("complete")
    assert [r.number for r in records] == [t.number for t in study.trials] == list(range(5))
    assert [r.values for r in records] == [t.values for t in study.trials]
    assert [r.params for r in records] == [t.params for t in study.trials]
    # a second Optuna process, through the same proxy, sees the same study
    again = optuna.load_study(study_name=name, storage=GrpcStorageProxy(host="127.0.0.1", port=proxy.port))
    assert [t.values for t in again.best_trials] == [t.values for t in study.best_trials]
