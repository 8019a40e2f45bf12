"""GET /dashboard: the page and its assets, and a headless-Chromium run against a live server.

The browser tests drive Debian's ``chromium`` (``CALIBO_CHROMIUM``, default /usr/bin/chromium) with
playwright-python through ``executable_path`` (no ``playwright install``); they skip where either is
missing (.ci/run installs both). The page polls every 0.3 s here (``?poll=0.3``). The screenshots
the docs show are taken by the browser tests (the Pareto panel's here, the dashboard's in
tests/test_dashboard_legible.py); with ``CALIBO_SCREENSHOTS=1`` they replace the PNGs in
benchmarks/results/, otherwise they go to a temporary folder, so that running the tests leaves the
committed files as they are.

The page runs under the Content-Security-Policy the server sends with it (never bypassed here): every
``securitypolicyviolation`` event and every console error (Chromium logs each refused script, style or
frame) fails the test that provoked it.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import tempfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from conftest import LiveServer

from calibo.server.api.headers import DASHBOARD_CSP

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "service" / "dashboard" / "static"
SCREENSHOT = (ROOT / "benchmarks" / "results" if os.environ.get("CALIBO_SCREENSHOTS") == "1"
              else Path(tempfile.gettempdir()) / f"calibo-screenshots-{os.getpid()}") / "dashboard.png"
CHROMIUM = os.environ.get("CALIBO_CHROMIUM", "/usr/bin/chromium")
PLOTS = ["best", "calibration", "coverage", "rolling", "alpha", "params", "curves"]
SPACE = {
    "x1": {"type": "float", "low": -5, "high": 10},
    "x2": {"type": "float", "low": 0, "high": 15},
    "kernel": {"type": "categorical", "choices": ["rbf", "matern", "linear"]},
}
OFFSET = {"rbf": 0.0, "matern": 2.0, "linear": 5.0}
WRITE, READ = "w-token", "r-token"

# reports each Content-Security-Policy violation of the page to the test (a binding: not itself a script
# the policy governs)
REPORT_VIOLATIONS = """document.addEventListener('securitypolicyviolation', (e) => window.cspViolation(
    `${e.effectiveDirective} blocked ${e.blockedURI || 'inline'} at ${e.sourceFile}:${e.lineNumber}`));"""

# every plot rendered with data: points counted, and a canvas drawn
ALL_DRAWN = """() => [...document.querySelectorAll('[data-plot]:not([hidden])')].every(
    f => Number(f.dataset.points) > 0 && f.querySelector('canvas:not([hidden])'))"""


def objective(p: dict) -> float:
    """Branin, shifted by the kernel's offset."""
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10 + OFFSET[p["kernel"]]


def ask(c: httpx.Client, sid: int) -> dict:
    r = c.post(f"/v1/studies/{sid}/ask", json={})
    assert r.status_code == 200, r.text
    return r.json()["trials"][0]


def tell(c: httpx.Client, sid: int, tid: int, **body) -> None:
    r = c.post(f"/v1/studies/{sid}/trials/{tid}/tell", json=body)
    assert r.status_code == 200, r.text


def report(c: httpx.Client, sid: int, tid: int, step: int, value: float) -> None:
    r = c.post(f"/v1/studies/{sid}/trials/{tid}/report", json={"step": step, "value": value})
    assert r.status_code == 200, r.text


def make_study(c: httpx.Client, name: str, n: int) -> tuple[int, dict]:
    """A study of ``n`` trials: every third reports a learning curve (two of those are pruned after 2
    steps), one failed, and the last one still running (with two reports). Returns (id, running trial)."""
    r = c.post("/v1/studies", json={"name": name, "space": SPACE, "settings": {"n_warmup": 5, "conformalize_from": 10}})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    for i in range(n - 1):
        t = ask(c, sid)
        v = objective(t["params"])
        if i == 7:
            tell(c, sid, t["id"], state="failed")
            continue
        if i % 3 == 0:
            steps = 2 if i in (9, 15) else 6
            for step in range(1, steps + 1):
                report(c, sid, t["id"], step, v * (1 + 3.0 / step))
            if steps == 2:
                tell(c, sid, t["id"], state="pruned", value=v * 2.5)
                continue
        tell(c, sid, t["id"], value=v)
    running = ask(c, sid)
    for step in (1, 2):
        report(c, sid, running["id"], step, objective(running["params"]) * (1 + 3.0 / step))
    return sid, running


# ------------------------------------------------------------------ servers
@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('dash') / 'calibo.db'}", workers=0).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('dash-auth') / 'calibo.db'}", workers=0,
                     api_tokens=f"{WRITE},{READ}:read").start()
    yield srv
    srv.stop()


# -------------------------------------------------------------- no browser
def test_page_and_assets_are_public_and_out_of_the_schema(auth_server: LiveServer) -> None:
    with auth_server.client() as c:
        assert c.get("/v1/studies").status_code == 401  # the data needs a token...
        page = c.get("/dashboard")  # ...the page and its assets do not
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assets = re.findall(r'(?:src|href)="(dashboard/static/[^"]+)"', page.text)
        assert {"dashboard/static/app.js", "dashboard/static/style.css",
                "dashboard/static/vendor/uPlot.iife.min.js"} <= set(assets)
        for a in assets:
            r = c.get(f"/{a}")
            assert r.status_code == 200 and r.content, a
        assert "cdn" not in page.text.lower() and "https://" not in page.text
        slash = c.get("/dashboard/?poll=1")
        assert slash.status_code == 307 and slash.headers["location"] == "../dashboard?poll=1"
        schema = c.get("/openapi.json", headers={"Authorization": f"Bearer {READ}"})
        if schema.status_code == 200:
            assert not [p for p in schema.json()["paths"] if p.startswith("/dashboard")]


def test_vendored_chart_library_matches_its_record() -> None:
    record = (STATIC / "vendor" / "VENDORED.md").read_text()
    sums = dict(re.findall(r"\| `([\w.]+)` \| `[^`]+` \| `([0-9a-f]{64})` \|", record))
    assert set(sums) == {"uPlot.iife.min.js", "uPlot.min.css", "LICENSE"}
    for name, digest in sums.items():
        assert hashlib.sha256((STATIC / "vendor" / name).read_bytes()).hexdigest() == digest, name
    assert "MIT" in (STATIC / "vendor" / "LICENSE").read_text()


class Inline(HTMLParser):
    """What a strict policy would refuse in markup: inline scripts, event handlers, style attributes
    and elements, javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and "src" not in names:
            self.found.append("inline <script>")
        if tag == "style":
            self.found.append("<style>")
        for name, value in attrs:
            if name.startswith("on") or name == "style" or (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}=...>")


def test_the_page_has_no_inline_script_style_or_handler() -> None:
    parser = Inline()
    parser.feed((STATIC / "index.html").read_text())
    assert parser.found == []
    js = (STATIC / "app.js").read_text()
    assert not re.search(r"\beval\(|new Function\(|innerHTML|setAttribute\(\s*[\"']style", js)
    assert "localStorage.setItem" not in js and "localStorage.getItem" not in js


def test_the_page_is_sent_with_a_policy_that_refuses_framing(auth_server: LiveServer) -> None:
    assert "frame-ancestors 'none'" in DASHBOARD_CSP.split("; ")
    with auth_server.client() as c:
        for path in ("/dashboard", "/dashboard/static/app.js"):
            r = c.get(path)
            assert r.headers["content-security-policy"] == DASHBOARD_CSP and r.headers["x-frame-options"] == "DENY"
            assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"


# ------------------------------------------------------------------ browser
@pytest.fixture(scope="module")
def browser() -> Iterator:
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright-python is not installed (pip install playwright)")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; or set CALIBO_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


@pytest.fixture
def page(browser) -> Iterator:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    # uncaught exceptions and the page's console errors; not the browser's own line for each 401 or 503
    # answer (the auth flow and the busy check provoke them, and the page handles them)
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(f"pageerror: {e}"))
    pg.on("console", lambda m: m.type == "error" and not m.text.startswith("Failed to load resource")
          and pg.errors.append(m.text))
    context.expose_function("cspViolation", lambda text: pg.errors.append(f"CSP violation: {text}"))
    context.add_init_script(REPORT_VIOLATIONS)
    yield pg
    context.close()


def points(pg) -> dict[str, int]:
    return pg.eval_on_selector_all("[data-plot]:not([hidden])", "els => Object.fromEntries(els.map("
                                   "e => [e.dataset.plot, Number(e.dataset.points)]))")


def select_study(pg, sid: int) -> None:
    pg.click(f'#study-table tr[data-study-id="{sid}"] td:nth-child(3)')
    pg.wait_for_function(ALL_DRAWN)


def test_dashboard_renders_every_plot_and_follows_new_trials(open_server: LiveServer, page) -> None:
    with open_server.client() as c:
        sid, running = make_study(c, "dashboard-branin", 30)
        study = c.get(f"/v1/studies/{sid}").json()
        calibration = c.get(f"/v1/studies/{sid}/calibration").json()
        curves = c.get(f"/v1/studies/{sid}/curves").json()
        assert study["trials"] == {"waiting": 0, "running": 1, "complete": 26, "failed": 1, "pruned": 2, "total": 30}

        answer = page.goto(f"{open_server.url}/dashboard?poll=0.3")
        assert answer.headers["content-security-policy"] == DASHBOARD_CSP  # what the page runs under
        page.wait_for_selector(f'#study-table tr[data-study-id="{sid}"]')
        assert page.text_content(f'#study-table tr[data-study-id="{sid}"] td.total') == "30"
        select_study(page, sid)
        assert page.url.endswith(f"#study={sid}")
        assert page.get_attribute('[data-fact="trials"]', "data-total") == "30"
        assert points(page) == {
            "best": 26, "params": 26, "curves": curves["total"],
            **{k: calibration["n"] for k in ("calibration", "coverage", "rolling", "alpha")},
        }
        assert calibration["n"] >= 20 and curves["total"] == 11  # the running trial's curve too

        # tells during the test show at the next poll: the running trial completes, one more is asked
        tell(c, sid, running["id"], value=objective(running["params"]))
        extra = ask(c, sid)
        tell(c, sid, extra["id"], value=objective(extra["params"]))
        page.wait_for_function("""() => document.querySelector('[data-fact="trials"]').dataset.total === "31"
            && document.querySelector('[data-plot="best"]').dataset.points === "28" """)
        page.wait_for_function(f"""() => document.querySelector(
            '#study-table tr[data-study-id="{sid}"] td.total').textContent === "31" """)
        assert points(page)["params"] == 28
        n = c.get(f"/v1/studies/{sid}/calibration").json()["n"]
        page.wait_for_function(f"""() => document.querySelector('[data-plot="alpha"]').dataset.points === "{n}" """)

    # a busy server (503) shows, and the page goes on polling
    busy = re.compile(r"/v1/studies\?")
    page.route(busy, lambda route: route.fulfill(
        status=503, content_type="application/json", headers={"Retry-After": "1"},
        body='{"error": {"code": "unavailable", "message": "the database does not answer"}}'))
    page.wait_for_selector('#status[data-state="busy"]')
    assert "busy" in page.text_content("#banner") and page.is_visible("#banner")
    page.unroute(busy)
    page.wait_for_selector('#status[data-state="ok"]')
    assert page.is_hidden("#banner")

    # the study deleted: said, and deselected
    with open_server.client() as c:
        assert c.delete(f"/v1/studies/{sid}").status_code == 204
    page.wait_for_selector("#study", state="hidden")
    assert "does not exist" in page.text_content("#banner")  # said when the study is left, not a poll later
    page.wait_for_selector(f'#study-table tr[data-study-id="{sid}"]', state="detached")
    assert not page.errors, page.errors


def test_dashboard_with_a_read_token(auth_server: LiveServer, page) -> None:
    with auth_server.client(headers={"Authorization": f"Bearer {WRITE}"}) as c:
        sid, _ = make_study(c, "dashboard-auth", 12)

    page.goto(f"{auth_server.url}/dashboard?poll=0.3")
    page.wait_for_selector("#token-form", state="visible")  # the API answered 401: the page asks
    assert page.get_attribute("#status", "data-state") == "token"

    # a token an older version kept in localStorage: removed on load, and not used
    page.evaluate(f"() => localStorage.setItem('calibo.token', '{READ}')")
    page.reload()
    page.wait_for_selector("#token-form", state="visible")
    assert page.evaluate("() => localStorage.length") == 0

    page.fill("#token-input", "not-a-token")
    page.click("#token-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#token-why').textContent.includes('rejected')")
    page.wait_for_selector("#token-form", state="visible")

    page.fill("#token-input", READ)
    page.click("#token-form button[type=submit]")
    page.wait_for_selector(f'#study-table tr[data-study-id="{sid}"]')
    assert page.is_hidden("#token-form")
    select_study(page, sid)
    assert page.get_attribute('[data-fact="trials"]', "data-total") == "12"

    # kept in this tab's sessionStorage, nowhere in localStorage: a reload needs no token
    stored = "() => [localStorage, sessionStorage].map((s) => Object.keys(s).map((k) => [k, s.getItem(k)]))"
    in_local, in_session = page.evaluate(stored)
    assert in_local == [] and in_session == [["calibo.token", READ]]
    page.reload()
    page.wait_for_function(ALL_DRAWN)
    assert page.is_hidden("#token-form")
    assert page.evaluate(stored) == [[], [["calibo.token", READ]]]

    # another tab of the same browser asks for its own
    other = page.context.new_page()
    other.goto(f"{auth_server.url}/dashboard?poll=0.3")
    other.wait_for_selector("#token-form", state="visible")
    other.close()

    # forgotten: asked again
    page.click("#token-button")
    page.wait_for_selector("#token-form", state="visible")
    assert page.evaluate(stored) == [[], []]
    assert not page.errors, page.errors


def test_dashboard_marks_enqueued_added_and_infeasible_trials(open_server: LiveServer, page) -> None:
    with open_server.client() as c:
        r = c.post("/v1/studies", json={"name": "dashboard-constrained", "space": SPACE, "constraints": ["size"],
                                        "settings": {"n_warmup": 5, "conformalize_from": 10}})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        for x1 in (2.0, 3.0):
            assert c.post(f"/v1/studies/{sid}/enqueue", json={"params": {"x1": x1}}).status_code == 201
        feasible = 0
        for _ in range(10):
            t = ask(c, sid)
            size = t["params"]["x2"] - 7.5
            feasible += size <= 0
            tell(c, sid, t["id"], value=objective(t["params"]), constraints=[size])
        rows = [{"params": {"kernel": "rbf", "x1": float(x), "x2": 1.0}, "value": 30.0 + x, "constraints": [-1.0]}
                for x in range(3)]
        assert c.post(f"/v1/studies/{sid}/trials", json={"trials": rows}).status_code == 201
        view = c.get(f"/v1/studies/{sid}").json()
        assert view["best_trial"]["constraints"][0] <= 0

        page.goto(f"{open_server.url}/dashboard?poll=0.3#study={sid}")
        page.wait_for_selector('[data-fact="constraints"]')
        assert page.get_attribute('[data-fact="constraints"]', "data-feasible") == str(feasible + 3)
        origins = page.text_content('[data-fact="origins"]')
        assert "2 enqueued" in origins and "3 added" in origins
        assert page.get_attribute('[data-plot="best"]', "data-points") == "13"
        legend = page.text_content('[data-plot="best"]')
        assert "added / copied" in legend and "enqueued" in legend and "best feasible so far" in legend
        if feasible < 10:
            assert "infeasible" in legend
    assert not page.errors, page.errors


def test_dashboard_shows_a_multi_objective_study(open_server: LiveServer, page) -> None:
    """The front (scatter with the non-dominated trials), the hypervolume over trials and each
    objective's coverage, in place of the best-so-far plot."""
    with open_server.client() as c:
        r = c.post("/v1/studies", json={"name": "dashboard-two-objectives", "space": SPACE,
                                        "directions": ["minimize", "maximize"],
                                        "settings": {"n_warmup": 5, "conformalize_from": 8}})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        for _ in range(14):
            t = ask(c, sid)
            v = [objective(t["params"]), t["params"]["x1"] + t["params"]["x2"]]
            assert c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"values": v}).status_code == 200
        front = c.get(f"/v1/studies/{sid}/pareto").json()
        cal = c.get(f"/v1/studies/{sid}/calibration").json()
        assert cal["n"] > 0

        page.goto(f"{open_server.url}/dashboard?poll=0.3")
        page.wait_for_selector(f'#study-table tr[data-study-id="{sid}"]')
        assert page.text_content(f'#study-table tr[data-study-id="{sid}"] td.best') == "2 objectives"
        page.click(f'#study-table tr[data-study-id="{sid}"] td:nth-child(3)')
        page.wait_for_function("""() => ['pareto', 'hypervolume', 'objectives', 'params'].every(n =>
            Number(document.querySelector(`[data-plot="${n}"]`).dataset.points) > 0)""")
        assert page.is_hidden('[data-plot="best"]')
        shown = points(page)
        assert shown["pareto"] == 14 and shown["hypervolume"] == len(front["history"])
        assert shown["objectives"] == cal["n"] and shown["params"] == 14
        assert page.get_attribute('[data-plot="pareto"]', "data-front") == str(len(front["trials"]))
        assert page.get_attribute('[data-fact="pareto"]', "data-size") == str(len(front["trials"]))
        assert "objective 1 (maximize)" in page.text_content('[data-plot="objectives"]')
        # the caption names the objective whose widest interval covers least, from the route's shares
        shares = [o["cumulative_coverage"][-1][0] for o in cal["objectives"]]
        worst, text = min(range(len(shares)), key=shares.__getitem__), page.text_content('[data-caption="objectives"]')
        if shares[worst] < cal["nominal"][0]:
            assert f"Objective {worst} is the one the model predicts least well" in text, (shares, text)
            assert page.get_attribute('[data-caption="objectives"]', "data-worst") == str(worst)
        else:
            assert "No objective is below its target." in text, (shares, text)
        page.wait_for_timeout(300)  # let the last poll's redraw land
        page.locator("#study").screenshot(path=str(SCREENSHOT.with_name("dashboard_pareto.png")))
    assert not page.errors, page.errors




def reported(pg, text: str, seconds: float = 20.0) -> bool:
    """Whether an error containing ``text`` reaches the test within ``seconds`` (they arrive as events)."""
    for _ in range(int(seconds / 0.05)):
        if any(text in e for e in pg.errors):
            return True
        pg.wait_for_timeout(50)
    return False


def test_the_policy_is_enforced_and_a_violation_is_caught(open_server: LiveServer, page) -> None:
    """The check every browser test ends with can fail: an inline script injected into the page is
    refused, and reported both ways."""
    page.goto(f"{open_server.url}/dashboard?poll=0.3")
    page.wait_for_selector('#status[data-state="ok"]')
    assert not page.errors, page.errors
    page.evaluate("""() => {
        const s = document.createElement('script');
        s.textContent = 'window.injected = true';
        document.body.append(s);
    }""")
    assert reported(page, "CSP violation: script-src"), page.errors  # the event
    assert reported(page, "Content Security Policy"), page.errors  # the console line
    assert page.evaluate("() => window.injected") is None


def test_the_page_cannot_be_framed(open_server: LiveServer, page) -> None:
    page.set_content(f'<iframe src="{open_server.url}/dashboard?poll=0.3"></iframe>')  # on about:blank
    assert reported(page, "frame-ancestors"), page.errors
    framed = page.frames[1]
    assert "/dashboard" not in framed.url or framed.query_selector("#study-table") is None
