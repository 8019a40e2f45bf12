"""optuna-dashboard (the optuna-dashboard extra's pinned package) over calibo studies through
``calibo.optuna.CaliboStorage``, and ``calibo optuna-dashboard``, the command that serves it.

Against a live calibo server on SQLite and on PostgreSQL: a study created with calibo's own Client
is listed by optuna-dashboard's JSON API by its name, with its 8 trials, their parameters and
values; its notes are kept in calibo; a study deleted while the page is open is optuna-dashboard's
404; a restart of the calibo server is a wait, not an error. The page
itself, in headless Debian chromium (as tests/test_dashboard.py: no browser download), draws the
study's history plot from its own assets; its screenshot is the one docs/how-to/optuna-dashboard.md
shows (``CALIBO_SCREENSHOTS=1`` replaces benchmarks/results/optuna_dashboard.png, otherwise it goes
to a temporary folder). The command: its arguments and defaults, its clear errors (no extra, no
server at the URL, a wrong token, a port taken), and the real command as a subprocess, read-only,
stopped by SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest

optuna_dashboard = pytest.importorskip("optuna_dashboard")  # the optuna-dashboard extra (and the test extra)
from conftest import LiveServer, free_port, unique  # noqa: E402
from test_dashboard import CHROMIUM, browser  # noqa: E402, F401 - Debian's chromium, headless
from test_dashboard_legible import smaller  # noqa: E402

from calibo import Client  # noqa: E402
from calibo.optuna import CaliboStorage  # noqa: E402
from calibo.server.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = (ROOT / "benchmarks" / "results" if os.environ.get("CALIBO_SCREENSHOTS") == "1"
              else Path(tempfile.gettempdir()) / f"calibo-screenshots-{os.getpid()}") / "optuna_dashboard.png"
SPACE = {"x": {"type": "float", "low": -5, "high": 10}}
X = {"type": "FloatDistribution", "low": -5.0, "high": 10.0, "step": None, "log": False}  # as optuna-dashboard says
N_TRIALS = 8


def quadratic(p: dict[str, Any]) -> float:
    return (p["x"] - 1) ** 2


@dataclass
class Made:
    name: str
    id: int
    trials: dict[int, Any]  # number -> calibo's TrialRecord


def make_study(url: str, n_trials: int = N_TRIALS) -> Made:
    with Client(url) as c:
        study = c.create_study(unique("quadratic"), SPACE, seed=0)
        study.optimize(quadratic, n_trials=n_trials)
        return Made(str(study.name), study.id, {t.number: t for t in study.trials()})


@pytest.fixture
def study(server: LiveServer) -> Made:
    return make_study(server.url)


class _Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` (WSGI) on a free port of 127.0.0.1 in a thread, as ``optuna_dashboard.run_server`` would: its URL."""
    httpd = make_server("127.0.0.1", 0, app, server_class=_Threaded, handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@contextlib.contextmanager
def dashboard(url: str, token: str | None = None) -> Iterator[httpx.Client]:
    """optuna-dashboard over ``CaliboStorage(url)``, the Python way the docs show: a client of it."""
    with serving(optuna_dashboard.wsgi(CaliboStorage(url, token=token))) as base, \
            httpx.Client(base_url=base, timeout=60.0) as http:
        yield http


def listed(http: httpx.Client) -> dict[str, dict[str, Any]]:
    r = http.get("/api/studies")
    assert r.status_code == 200, r.text
    return {s["study_name"]: s for s in r.json()["study_summaries"]}


def assert_the_trials(detail: dict[str, Any], made: Made) -> None:
    """optuna-dashboard's study detail holds calibo's trials: numbers, ids, states, params, values."""
    trials = detail["trials"]
    assert [t["number"] for t in trials] == list(range(N_TRIALS))
    for t in trials:
        record = made.trials[t["number"]]
        assert (t["trial_id"], t["study_id"], t["state"]) == (record.id, made.id, "Complete")
        assert [(p["name"], p["param_internal_value"], p["distribution"]) for p in t["params"]] == [
            ("x", record.params["x"], X)]
        assert t["values"] == [record.value] and record.value == pytest.approx(quadratic(record.params))
        assert t["datetime_start"] and t["datetime_complete"]


# ------------------------------------------------------------------ optuna-dashboard over CaliboStorage
def test_optuna_dashboard_lists_a_calibo_study_with_its_trials_params_and_values(server: LiveServer,
                                                                                 study: Made) -> None:
    with dashboard(server.url) as http:
        assert listed(http)[study.name] == {"study_id": study.id, "study_name": study.name, "directions": ["minimize"],
                                            "user_attrs": [], "is_preferential": False}
        r = http.get(f"/api/studies/{study.id}")
        assert r.status_code == 200, r.text
        detail = r.json()
        assert (detail["name"], detail["directions"]) == (study.name, ["minimize"])
        assert_the_trials(detail, study)
        best = min(study.trials.values(), key=lambda t: t.value)
        assert [t["number"] for t in detail["best_trials"]] == [best.number]
        assert detail["intersection_search_space"] == detail["union_search_space"] == [{"name": "x", "distribution": X}]
        assert detail["has_intermediate_values"] is False
        # the polls after the first read only the trials after ?after= (the page's incremental read)
        after = http.get(f"/api/studies/{study.id}", params={"after": 6}).json()["trials"]
        assert [t["number"] for t in after] == [6, 7]

        # the importance panel, and the CSV download: every trial, from calibo
        r = http.get(f"/api/studies/{study.id}/param_importances")
        assert r.status_code == 200, r.text
        ((x,),) = r.json()["param_importances"]
        assert (x["name"], x["importance"]) == ("x", 1.0)
        rows = http.get(f"/csv/{study.id}").text.strip().splitlines()
        assert rows[0].split(",") == ["Number", "State", "Value", "Param x"] and len(rows) == 1 + N_TRIALS

        # the page and its script come from the package (no CDN), under optuna-dashboard's own policy
        page = http.get("/dashboard")
        assert page.status_code == 200 and '<script defer src="/static/bundle.js">' in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert http.get("/static/bundle.js", headers={"Accept-Encoding": "identity"}).status_code == 200


def test_its_plots_through_optuna_visualization(server: LiveServer, study: Made) -> None:
    # optuna-dashboard's server-side plots (optuna.visualization, with plotly: the test extra has it)
    pytest.importorskip("plotly")
    with dashboard(server.url) as http:
        r = http.get(f"/api/studies/{study.id}/plot/slice")
        assert r.status_code == 200, r.text
        (trace,) = [d for d in r.json()["data"] if d.get("x")]
        assert sorted(trace["x"]) == sorted(t.params["x"] for t in study.trials.values())


def test_states_notes_and_a_tell_from_the_page_are_calibos(server: LiveServer) -> None:
    with Client(server.url) as c:
        s = c.create_study(unique("states"), SPACE, seed=1)
        done = s.ask()
        s.tell(done, quadratic(done.params))
        failed = s.ask()
        s.tell(failed, state="failed")
        pruned = s.ask()
        s.report(pruned, 1, 50.0)
        s.tell(pruned, state="pruned")
        running = s.ask()
    with dashboard(server.url) as http:
        trials = http.get(f"/api/studies/{s.id}").json()["trials"]
        assert [(t["number"], t["state"]) for t in trials] == [
            (done.number, "Complete"), (failed.number, "Fail"), (pruned.number, "Pruned"), (running.number, "Running")]
        assert "values" not in trials[1] and "values" not in trials[3] and "datetime_complete" not in trials[3]
        assert trials[2]["intermediate_values"] == [{"step": 1, "value": 50.0}]
        # the study's and a trial's notes (Markdown): optuna-dashboard keeps them in the study's system
        # attributes, in calibo
        assert http.put(f"/api/studies/{s.id}/note", json={"version": 1, "body": "try *x* near 1"}).status_code == 204
        assert http.put(f"/api/studies/{s.id}/{done.id}/note", json={"version": 1, "body": "the first"}
                        ).status_code == 204
        # the page's tell of a running trial is calibo's tell
        r = http.post(f"/api/trials/{running.id}/tell", json={"state": "Complete", "values": [2.5]})
        assert r.status_code == 204, r.text
    with Client(server.url) as c:
        told = c.load_study(s.name).trial(running.id)
        assert (str(told.state), told.value) == ("complete", 2.5)
    with dashboard(server.url) as http:  # another dashboard (a fresh storage) reads the notes back from the server
        detail = http.get(f"/api/studies/{s.id}").json()
        assert detail["note"] == {"version": 1, "body": "try *x* near 1"}
        assert detail["trials"][0]["note"] == {"version": 1, "body": "the first"}


def test_multi_objective_studies_and_learning_curves(server: LiveServer) -> None:
    with Client(server.url) as c:
        mo = c.create_study(unique("two-objectives"), SPACE, directions=["minimize", "maximize"], seed=0)
        for _ in range(5):
            t = mo.ask()
            mo.tell(t, [quadratic(t.params), t.params["x"]])
        front = {r.number for r in mo.trials() if not any(
            o.values[0] <= r.values[0] and o.values[1] >= r.values[1] and o.values != r.values for o in mo.trials())}
        curves = c.create_study(unique("curves"), SPACE, seed=0)
        t = curves.ask()
        for step in (1, 2, 3):
            curves.report(t, step, 10.0 / step)
        curves.tell(t, 10.0 / 3)
    with dashboard(server.url) as http:
        detail = http.get(f"/api/studies/{mo.id}").json()
        assert detail["directions"] == ["minimize", "maximize"]
        assert {t["number"] for t in detail["best_trials"]} == front  # the Pareto front
        detail = http.get(f"/api/studies/{curves.id}").json()
        assert detail["has_intermediate_values"] is True
        assert detail["trials"][0]["intermediate_values"] == [
            {"step": k, "value": pytest.approx(10.0 / k)} for k in (1, 2, 3)]


def test_a_study_deleted_while_the_page_is_open_is_a_404(server: LiveServer, study: Made) -> None:
    with dashboard(server.url) as http:
        assert http.get(f"/api/studies/{study.id}").status_code == 200
        with Client(server.url) as c:
            c.delete_study(study.id)
        r = http.get(f"/api/studies/{study.id}")
        # the page shows "Failed to fetch study (reason=...)"
        assert (r.status_code, r.json()) == (404, {"reason": f"study_id={study.id} is not found"})
        assert http.get(f"/api/studies/{study.id}/param_importances").status_code == 404
        assert study.name not in listed(http)


def test_a_calibo_server_restart_is_a_wait_not_an_error(tmp_path: Path) -> None:
    # CaliboStorage's client retries a server it has reached before for up to 60 s (calibo.Client's
    # retry_deadline): a dashboard call during a restart answers once the server is back. (A server down
    # for longer is a 500, {"reason": "internal server error"}, after those 60 s: not waited for here.)
    srv = LiveServer(f"sqlite:///{tmp_path / 'calibo.db'}", workers=0).start()
    try:
        with Client(srv.url) as c:
            s = c.create_study(unique("restart"), SPACE)
            s.add_trials([{"params": {"x": x}, "value": quadratic({"x": x})} for x in (-2.0, 0.5, 3.0)])
        with dashboard(srv.url) as http:
            assert s.name in listed(http)
            srv.stop()
            assert http.get("/dashboard").status_code == 200  # the page itself does not need the server
            answers: list[httpx.Response] = []
            call = threading.Thread(target=lambda: answers.append(http.get(f"/api/studies/{s.id}")))
            call.start()
            time.sleep(1.0)
            assert not answers  # still waiting for the server
            srv.start()  # the same database, on the same port
            call.join(60)
            (r,) = answers
            assert r.status_code == 200 and len(r.json()["trials"]) == 3
    finally:
        srv.stop()


# ------------------------------------------------------------------ the page, in headless chromium
def test_the_page_lists_the_study_and_draws_its_history(server: LiveServer, study: Made,
                                                       browser: Any) -> None:  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    try:
        with serving(optuna_dashboard.wsgi(CaliboStorage(server.url))) as base:
            page.goto(f"{base}/dashboard")
            page.get_by_text(study.name).first.wait_for()  # the study list
            page.goto(f"{base}/dashboard/studies/{study.id}")
            # the history plot: a marker per trial, drawn by plotly.js from the JSON API
            page.wait_for_function("document.querySelectorAll('#plot-history .point').length >= 8")
            page.wait_for_function("document.querySelectorAll('#graph-hyperparameter-importances .point').length")
            assert page.get_by_text("Best Trial (number=").count() == 1
            page.wait_for_timeout(500)  # plotly's transitions
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            if os.environ.get("CALIBO_SCREENSHOTS") == "1":
                smaller(SCREENSHOT)
            # the analytics page's slice plot (drawn in the browser), and the trial list
            page.goto(f"{base}/dashboard/studies/{study.id}/analytics")
            page.wait_for_function("document.querySelectorAll('#plot-slice .point').length >= 8")
            page.goto(f"{base}/dashboard/studies/{study.id}/trials")
            page.get_by_text(f"{N_TRIALS} Trials").first.wait_for()
            page.get_by_text(f"Trial 0 (trial_id={study.trials[0].id})").first.wait_for()
        origin = urlsplit(base).netloc
        assert {urlsplit(u).netloc for u in requested if not u.startswith("data:")} == {origin}  # no CDN
        assert not errors, errors
    finally:
        context.close()


# ------------------------------------------------------------------ calibo optuna-dashboard: arguments and errors
def test_the_subcommand_and_its_defaults(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "optuna-dashboard" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["optuna-dashboard", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for option in ("--host", "--port", "--url", "--token", "--read-only", "--log-level", "$CALIBO_URL",
                   "$CALIBO_TOKEN"):
        assert option in out

    import calibo.server.cli as cli

    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli, "optuna_dashboard", lambda args: seen.update(vars(args)) or 0)
    keys = ("host", "port", "url", "token", "read_only", "log_level")
    assert main(["optuna-dashboard"]) == 0
    assert {k: seen[k] for k in keys} == {"host": "127.0.0.1", "port": 8080, "url": None, "token": None,
                                          "read_only": False, "log_level": "info"}
    assert main(["optuna-dashboard", "--host", "0.0.0.0", "--port", "8081", "--url", "http://calibo:8000",
                 "--token", "t", "--read-only", "--log-level", "debug"]) == 0
    assert {k: seen[k] for k in keys} == {"host": "0.0.0.0", "port": 8081, "url": "http://calibo:8000", "token": "t",
                                          "read_only": True, "log_level": "debug"}


@pytest.mark.parametrize("argv", [["--port", "web"], ["--log-level", "loud"]])
def test_a_bad_argument_is_argparses_clear_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["optuna-dashboard", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[0]}" in err and "Traceback" not in err


@pytest.mark.parametrize("module", ["optuna_dashboard", "bottle", "optuna"])
def test_without_the_extra_the_message_names_it(module: str) -> None:
    code = textwrap.dedent(f"""
        import sys
        for name in list(sys.modules):
            if name == {module!r} or name.startswith({module!r} + "."):
                del sys.modules[name]
        sys.modules[{module!r}] = None  # import of {module} halted: as if not installed
        from calibo.server.cli import main
        sys.exit(main(["optuna-dashboard", "--url", "http://127.0.0.1:1"]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("calibo optuna-dashboard: ") and "Traceback" not in done.stderr
    assert "pip install 'calibo[server,optuna-dashboard]'" in done.stderr


def test_no_calibo_server_at_the_url_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert main(["optuna-dashboard", "--url", url, "--port", str(free_port())]) == 1
    err = capsys.readouterr().err
    assert f"calibo optuna-dashboard: cannot list the studies of the calibo server at {url}: " in err
    assert "is a calibo server running there?" in err and "Traceback" not in err


def test_a_wrong_token_or_a_url_that_is_no_calibo_server_is_a_clear_error(
        servers: list[LiveServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    srv = LiveServer(f"sqlite:///{tmp_path / 'auth.db'}", workers=0, api_tokens="reader:read")
    servers.append(srv.start())
    assert main(["optuna-dashboard", "--url", srv.url, "--token", "wrong", "--port", str(free_port())]) == 1
    err = capsys.readouterr().err
    assert f"cannot list the studies of the calibo server at {srv.url}: 401" in err and "Traceback" not in err
    assert main(["optuna-dashboard", "--url", f"{srv.url}/somewhere", "--token", "reader",
                 "--port", str(free_port())]) == 1
    err = capsys.readouterr().err
    assert f"cannot list the studies of the calibo server at {srv.url}/somewhere: " in err and "404" in err
    # the right token, a read one: it reads (a taken port stops it there)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["optuna-dashboard", "--url", srv.url, "--token", "reader", "--host", "127.0.0.1",
                     "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"calibo optuna-dashboard: cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


def test_the_url_and_token_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from optuna.storages import InMemoryStorage

    import calibo.optuna

    class _FakeStorage(InMemoryStorage):  # no server: what the command was given
        made: list[tuple[str, str | None]] = []

        def __init__(self, url: str, token: str | None = None) -> None:
            super().__init__()
            self.made.append((url, token))

    monkeypatch.setattr(calibo.optuna, "CaliboStorage", _FakeStorage)
    _FakeStorage.made.clear()
    with socket.socket() as taken:  # each run stops at the port, taken
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        argv = ["optuna-dashboard", "--host", "127.0.0.1", "--port", str(taken.getsockname()[1])]
        monkeypatch.delenv("CALIBO_URL", raising=False)
        monkeypatch.delenv("CALIBO_TOKEN", raising=False)
        assert main(argv) == 1
        monkeypatch.setenv("CALIBO_URL", "http://calibo-api:8000")
        monkeypatch.setenv("CALIBO_TOKEN", "from-env")
        assert main(argv) == 1
        assert main([*argv, "--url", "http://other:8000", "--token", "given"]) == 1
        monkeypatch.setenv("CALIBO_TOKEN", "")  # empty: no token (as calibo's Client reads it)
        assert main(argv) == 1
    assert _FakeStorage.made == [("http://127.0.0.1:8000", None), ("http://calibo-api:8000", "from-env"),
                                 ("http://other:8000", "given"), ("http://calibo-api:8000", None)]


# ------------------------------------------------------------------ calibo optuna-dashboard: the real command
def test_the_command_serves_the_study_read_only_and_stops_on_sigterm(server: LiveServer, study: Made,
                                                                     tmp_path: Path) -> None:
    calibo = shutil.which("calibo", path=str(Path(sys.executable).parent))
    command = [calibo] if calibo else [sys.executable, "-m", "calibo.server.cli"]
    port = free_port()
    log = tmp_path / "dashboard.log"
    with log.open("w") as out:
        process = subprocess.Popen([*command, "optuna-dashboard", "--host", "127.0.0.1", "--port", str(port),
                                    "--url", server.url, "--read-only"], stdout=out, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0) as http:
            deadline = time.monotonic() + 120
            while True:
                assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()}"
                try:
                    studies = listed(http)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, f"no answer on {port}:\n{log.read_text()}"
                    time.sleep(0.1)
            assert studies[study.name]["study_id"] == study.id
            assert_the_trials(http.get(f"/api/studies/{study.id}").json(), study)
            # --read-only: the page's writes are refused with a reason it shows, and nothing changes in calibo
            r = http.put(f"/api/studies/{study.id}/note", json={"version": 1, "body": "no"})
            assert r.status_code == 403 and "read-only" in r.json()["reason"]
            assert http.delete(f"/api/studies/{study.id}").status_code == 403
            assert http.get(f"/api/studies/{study.id}").json()["note"] == {"version": 0, "body": ""}
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = log.read_text()
    assert f"optuna-dashboard on http://127.0.0.1:{port}/dashboard over the calibo server {server.url}" in output
    assert "read-only" in output and "Traceback" not in output
    assert "GET /api/studies" not in output and "HTTP Request" not in output  # no line per request at info
