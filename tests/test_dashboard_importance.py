"""The dashboard's importance panel: the parameters in order of importance, with their bands, and the
study's user attributes among its facts (headless Debian chromium, as tests/test_dashboard.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import LiveServer
from test_dashboard import browser, page  # noqa: F401 -- the same browser and page fixtures

pytestmark = pytest.mark.live  # a server and a browser: not among `make test-fast`'s unit tests


@pytest.fixture(scope="module")
def dash_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('dash-imp') / 'calibo.db'}", workers=0).start()
    yield srv
    srv.stop()


def test_the_panel_lists_parameters_by_importance(dash_server: LiveServer, page) -> None:  # noqa: F811
    space = {"big": {"type": "float", "low": 0, "high": 1}, "small": {"type": "float", "low": 0, "high": 1},
             "none": {"type": "categorical", "choices": ["a", "b"]}}
    with dash_server.client() as c:
        sid = c.post("/v1/studies", json={"name": "importance-panel", "space": space,
                                          "user_attrs": {"team": "vision"}}).json()["id"]
        rows = [{"params": {"big": i / 30, "small": (i * 7 % 30) / 30, "none": "ab"[i % 2]},
                 "value": 10 * (i / 30) ** 2 + (i * 7 % 30) / 30} for i in range(30)]
        assert c.post(f"/v1/studies/{sid}/trials", json={"trials": rows}).status_code == 201
        page.goto(f"{dash_server.url}/dashboard?poll=0.3#study={sid}")
        page.wait_for_function("""() => document.querySelector('[data-panel="importance"]').dataset.params === "3" """)
        order = page.eval_on_selector_all('[data-panel="importance"] .imp-row', "els => els.map(e => e.dataset.param)")
        assert order[0] == "big" and set(order) == {"big", "small", "none"}
        width = page.eval_on_selector('[data-panel="importance"] .imp-row .imp-bar', "e => e.style.width")
        assert width.endswith("%") and float(width[:-1]) > 30
        assert "team=vision" in page.text_content('[data-fact="user_attrs"]')
        assert page.errors == []  # no script error and no policy violation (the bars are sized via the CSSOM)
