"""The dashboard a team lead reads (headless Debian chromium, as tests/test_dashboard.py).

* Each calibration chart carries a caption in plain words built from the numbers the calibration
  route returns: the study's own interval levels, window and counts, never a hard-coded 90%.
* Parallel coordinates stay legible with many parameters: no two of its labels (axis names, tick
  labels) overlap, every axis has a name (cut with an ellipsis only where there is no room, and whole
  on hover), categorical axes list their choices, the objective's axis is last and the best trial is
  drawn on top.

The 12-parameter study of ~100 asked trials is the one the dashboard page shows: with
``CALIBO_SCREENSHOTS=1`` its screenshot replaces benchmarks/results/dashboard.png, otherwise it goes to
a temporary folder.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import LiveServer

# browser and page: the same fixtures as tests/test_dashboard.py
from test_dashboard import SCREENSHOT, ask, browser, page, report, tell  # noqa: F401

pytestmark = pytest.mark.live

CALIBRATION_CHARTS = ["calibration", "coverage", "rolling", "alpha"]

# a gradient-boosting search of 12 parameters: 9 numeric (4 on a log scale), 3 categorical
SPACE12 = {
    "learning_rate": {"type": "float", "low": 1e-3, "high": 0.3, "log": True},
    "n_estimators": {"type": "int", "low": 50, "high": 1000},
    "max_depth": {"type": "int", "low": 2, "high": 12},
    "min_child_weight": {"type": "float", "low": 0.1, "high": 20, "log": True},
    "subsample": {"type": "float", "low": 0.5, "high": 1},
    "colsample_bytree": {"type": "float", "low": 0.3, "high": 1},
    "reg_alpha": {"type": "float", "low": 1e-4, "high": 10, "log": True},
    "reg_lambda": {"type": "float", "low": 1e-4, "high": 10, "log": True},
    "min_split_gain": {"type": "float", "low": 0, "high": 5},
    "booster": {"type": "categorical", "choices": ["gbtree", "dart"]},
    "tree_method": {"type": "categorical", "choices": ["hist", "approx", "exact"]},
    "grow_policy": {"type": "categorical", "choices": ["depthwise", "lossguide"]},
}


def validation_loss(p: dict) -> float:
    """A smooth stand-in for a validation loss: best near learning_rate 0.05, depth 6, subsample 0.8."""
    return (0.25 + (math.log10(p["learning_rate"]) + 1.3) ** 2 / 4 + (p["max_depth"] - 6) ** 2 / 80
            + (p["subsample"] - 0.8) ** 2 + abs(math.log10(p["reg_lambda"])) / 40
            + 0.05 * (p["booster"] == "dart") + 0.02 * ["hist", "approx", "exact"].index(p["tree_method"])
            + 0.1 / math.sqrt(p["n_estimators"] / 50))


# 20 parameters, one name far too long for any cell and a categorical of 24 choices
SPACE20 = {
    "encoder_layers": {"type": "int", "low": 1, "high": 24},
    "decoder_layers": {"type": "int", "low": 1, "high": 24},
    "attention_heads": {"type": "int", "low": 1, "high": 32},
    "hidden_size": {"type": "int", "low": 64, "high": 4096, "log": True},
    "decoder_feedforward_hidden_dimension_multiplier_for_wide_models": {"type": "float", "low": 1, "high": 8},
    "dropout": {"type": "float", "low": 0, "high": 0.5},
    "attention_dropout": {"type": "float", "low": 0, "high": 0.5},
    "weight_decay": {"type": "float", "low": 1e-6, "high": 0.1, "log": True},
    "learning_rate": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True},
    "warmup_steps": {"type": "int", "low": 0, "high": 10000},
    "batch_size": {"type": "ordinal", "choices": [16, 32, 64, 128, 256, 512]},
    "optimizer": {"type": "categorical", "choices": ["adamw", "adafactor", "lion", "sgd_momentum"]},
    "scheduler": {"type": "categorical", "choices": ["cosine", "linear", "constant_with_warmup"]},
    "activation": {"type": "categorical", "choices": [f"act_{i:02d}" for i in range(24)]},
    "label_smoothing": {"type": "float", "low": 0, "high": 0.3},
    "gradient_clip_norm": {"type": "float", "low": 0.1, "high": 10, "log": True},
    "beta1": {"type": "float", "low": 0.8, "high": 0.99},
    "beta2": {"type": "float", "low": 0.9, "high": 0.9999},
    "epsilon": {"type": "float", "low": 1e-9, "high": 1e-6, "log": True},
    "tie_embeddings": {"type": "categorical", "choices": [True, False]},
}


def random_params(space: dict, rng: random.Random) -> dict:
    out = {}
    for name, p in space.items():
        if "choices" in p:
            out[name] = rng.choice(p["choices"])
        elif p.get("log"):
            v = math.exp(rng.uniform(math.log(p["low"]), math.log(p["high"])))
            out[name] = round(v) if p["type"] == "int" else v
        else:
            out[name] = rng.randint(p["low"], p["high"]) if p["type"] == "int" else rng.uniform(p["low"], p["high"])
        if p["type"] == "int":
            out[name] = min(p["high"], max(p["low"], int(out[name])))
    return out


@pytest.fixture(scope="module")
def legible_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(f"sqlite:///{tmp_path_factory.mktemp('dash-legible') / 'calibo.db'}", workers=0).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def study12(legible_server: LiveServer) -> int:
    """100 asked and told trials of the 12-parameter search (the study's default levels: 90% widest);
    every fifth reports a learning curve of 5 steps."""
    with legible_server.client() as c:
        r = c.post("/v1/studies", json={"name": "xgboost-12-parameters", "space": SPACE12, "seed": 7})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        for i in range(100):
            t = ask(c, sid)
            v = validation_loss(t["params"])
            if i % 5 == 0:
                for step in range(1, 6):
                    report(c, sid, t["id"], step, v * (1 + 1.5 / step))
            tell(c, sid, t["id"], value=v)
    return sid


@pytest.fixture(scope="module")
def study20(legible_server: LiveServer) -> int:
    """120 trials of the 20-parameter space added with their values (no asks: the plot is the point)."""
    rng = random.Random(20)
    rows = []
    for _ in range(120):
        p = random_params(SPACE20, rng)
        rows.append({"params": p, "value": (math.log10(p["learning_rate"]) + 3.5) ** 2 + p["dropout"]})
    with legible_server.client() as c:
        r = c.post("/v1/studies", json={"name": "transformer-20-parameters", "space": SPACE20})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert c.post(f"/v1/studies/{sid}/trials", json={"trials": rows}).status_code == 201
    return sid


def smaller(png: Path) -> None:
    """The committed screenshot in 256 colours: under a third of the bytes, where Pillow is installed."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    small.save(png, optimize=True)


# every text of the parallel-coordinates plot: class, axis, shown text, title (the hover text), box
TEXTS = """() => [...document.querySelectorAll('[data-plot="params"] svg text')].map((e) => {
    const r = e.getBoundingClientRect();
    const title = e.querySelector('title');
    return {cls: e.getAttribute('class'), axis: e.dataset.axis ?? null, objective: e.hasAttribute('data-objective'),
            text: [...e.childNodes].filter((n) => n.nodeType === 3).map((n) => n.nodeValue).join(''),
            title: title ? title.textContent : null, l: r.left, r: r.right, t: r.top, b: r.bottom};
})"""

PLOT_BOX = """() => { const r = document.querySelector('[data-plot="params"] svg').getBoundingClientRect();
    return {l: r.left, r: r.right, t: r.top, b: r.bottom}; }"""


def overlapping(texts: list[dict]) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes share an area."""
    out = []
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            if min(a["r"], b["r"]) - max(a["l"], b["l"]) > 0 and min(a["b"], b["b"]) - max(a["t"], b["t"]) > 0:
                out.append((f"{a['cls']} {a['axis']} {a['text']!r}", f"{b['cls']} {b['axis']} {b['text']!r}"))
    return out


def shows(full: str, shown: str) -> bool:
    """``shown`` is ``full``, or a non-empty start of it cut with an ellipsis."""
    return shown == full or (shown.endswith("…") and len(shown) > 1 and full.startswith(shown[:-1]))


def open_study(pg, srv: LiveServer, sid: int, width: int = 1400) -> None:
    pg.set_viewport_size({"width": width, "height": 900})
    pg.goto(f"{srv.url}/dashboard?poll=0.3#study={sid}")
    pg.wait_for_function("""() => Number(document.querySelector('[data-plot="params"]').dataset.points) > 0
        && document.querySelectorAll('[data-plot="params"] svg text.pc-name').length > 0""")


def check_parallel_coordinates(pg, space: dict) -> list[dict]:
    """The legibility checks common to every study and width; returns the names."""
    texts = pg.evaluate(TEXTS)
    assert texts, "no text in the parallel-coordinates plot"
    assert overlapping(texts) == []
    box = pg.evaluate(PLOT_BOX)
    for t in texts:  # nothing cut off at the plot's edges
        assert box["l"] <= t["l"] and t["r"] <= box["r"] and box["t"] <= t["t"], t

    names = [t for t in texts if t["cls"] == "pc-name"]
    # one name per parameter in the space's order, then the objective's, last
    assert [t["axis"] for t in names] == [*space, None] and names[-1]["objective"]
    assert names[-1]["l"] > max(t["l"] for t in names[:-1])
    for t, name in zip(names, space, strict=False):
        p = space[name]
        full = f"{name} (log)" if p.get("log") else name
        assert shows(full, t["text"]), t
        assert t["title"].startswith(full + "\n"), t  # whole on hover, with what the axis holds
    assert names[-1]["text"] == "value (minimize)"

    # a categorical or ordinal axis lists its choices (every one, or every k-th where they would crowd)
    for name, p in space.items():
        if "choices" not in p:
            continue
        ticks = [t for t in texts if t["cls"] == "pc-tick" and t["axis"] == name]
        choices = [c if isinstance(c, str) else json.dumps(c) for c in p["choices"]]  # as JavaScript's String()
        every = math.ceil(len(choices) / len(ticks))
        assert len(ticks) == math.ceil(len(choices) / every) and len(ticks) >= min(len(choices), 8), name
        # listed from the bottom (first choice) up
        ordered = sorted(ticks, key=lambda t: -t["t"])
        for t, c in zip(ordered, choices[::every], strict=True):
            assert shows(c, t["text"]) and (t["text"] == c or t["title"] == c), (t, c)
    return names


def best_drawn_on_top(pg) -> bool:
    """Whether the canvas where the objective's axis meets its best (lowest) value is the highlight's
    orange: the best trial is drawn over the others. A 5x5 window about that point: where
    antialiasing puts the line's full colour differs between renderers (GPU or software, pixel ratio)."""
    return pg.evaluate("""() => {
        const fig = document.querySelector('[data-plot="params"]');
        const axes = fig.querySelectorAll('.pc-axis');
        const axis = axes[axes.length - 1];
        const canvas = fig.querySelector('canvas');
        const dpr = canvas.width / canvas.getBoundingClientRect().width;
        const x = Math.round(Number(axis.getAttribute('x1')) * dpr);
        const y = Math.round(Number(axis.getAttribute('y2')) * dpr);
        const d = canvas.getContext('2d').getImageData(x - 2, y - 3, 5, 5).data;
        for (let i = 0; i < d.length; i += 4) {
            const [r, g, b, a] = [d[i], d[i + 1], d[i + 2], d[i + 3]];
            if (r > 200 && g > 60 && g < 130 && b < 60 && a > 200) return true;
        }
        return false;
    }""")


def test_parallel_coordinates_of_12_parameters_are_legible(legible_server: LiveServer, study12: int,
                                                           page) -> None:  # noqa: F811
    open_study(page, legible_server, study12)
    names = check_parallel_coordinates(page, SPACE12)
    assert all(t["text"] == t["title"].split("\n")[0] for t in names)  # at 1400 px, every name whole
    fig = page.locator('[data-plot="params"]')
    assert fig.get_attribute("data-axes") == "13" and fig.get_attribute("data-points") == "100"
    assert fig.get_attribute("data-best") == "5" and best_drawn_on_top(page)
    assert "100 completed trials" in page.text_content('[data-caption="params"]')
    assert "the 5 best" in page.text_content('[data-caption="params"]')

    # the study's default levels: the captions speak of its widest interval, 90%, and its window
    for name in CALIBRATION_CHARTS:
        assert "90%" in page.text_content(f'[data-caption="{name}"]'), name
    assert "over the last 20 trials" in page.text_content('[data-caption="rolling"]')

    page.wait_for_timeout(300)  # let the last poll's redraw land
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    if os.environ.get("CALIBO_SCREENSHOTS") == "1":
        smaller(SCREENSHOT)
    assert not page.errors, page.errors


@pytest.mark.parametrize("width", [1400, 900])
def test_parallel_coordinates_of_20_parameters_are_legible(legible_server: LiveServer, study20: int, page,  # noqa: F811
                                                           width: int) -> None:
    open_study(page, legible_server, study20, width)
    names = check_parallel_coordinates(page, SPACE20)
    long = names[4]
    assert long["text"].endswith("…") and len(long["text"]) >= 10  # cut, yet still says what it is
    assert sum(t["text"] != t["title"].split("\n")[0] for t in names) == 1  # the others whole
    fig = page.locator('[data-plot="params"]')
    assert fig.get_attribute("data-axes") == "21" and best_drawn_on_top(page)
    # the axes keep their minimum spacing: the plot scrolls sideways instead of crowding them
    spacing = page.evaluate("""() => { const xs = [...document.querySelectorAll('[data-plot="params"] .pc-axis')]
        .map((l) => Number(l.getAttribute('x1'))); return Math.min(...xs.slice(1).map((x, i) => x - xs[i])); }""")
    assert spacing >= 64
    scrolls = page.evaluate("""() => { const c = document.querySelector('[data-plot="params"] .chart');
        return c.scrollWidth > c.clientWidth; }""")
    assert scrolls == (fig.get_attribute("data-scrolls") == "true")
    if width == 900:
        assert scrolls and "scroll sideways" in page.text_content('[data-caption="params"]')
    assert not page.errors, page.errors


def pct(share: float) -> str:
    """The page's percentage: three significant digits, no trailing zeros."""
    return f"{float(f'{100 * share:.3g}'):g}%"


# the calibration band's hover legend at every trial: the mouse swept across the plot, the legend's
# rows read at each stop, keyed by the trial number it shows
HOVER_LEGEND = """async () => {
  const fig = document.querySelector('[data-plot="calibration"]');
  const over = fig.querySelector('.u-over');
  const r = over.getBoundingClientRect();
  const seen = {};
  for (let px = 1; px < r.width; px += 2) {
    over.dispatchEvent(new MouseEvent('mousemove',
      {clientX: r.left + px, clientY: r.top + r.height / 2, bubbles: true}));
    await new Promise((ok) => requestAnimationFrame(ok));
    const rows = [...fig.querySelectorAll('.u-legend .u-series')].map((s) =>
      [s.querySelector('.u-label')?.textContent, s.querySelector('.u-value')?.textContent]);
    const trial = rows.find(([l]) => l === 'trial');
    if (trial) seen[trial[1]] = Object.fromEntries(rows);
  }
  return seen;
}"""


def run_2d_study(server: LiveServer, name: str, seed: int, settings: dict, trials: int = 30) -> int:
    """A 2-D study of ``trials`` asked and told trials (a bowl at x = 1, y = 0); its id."""
    space = {"x": {"type": "float", "low": -3, "high": 3}, "y": {"type": "float", "low": -3, "high": 3}}
    with server.client() as c:
        r = c.post("/v1/studies", json={"name": name, "space": space, "seed": seed, "settings": settings})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        for _ in range(trials):
            t = ask(c, sid)
            tell(c, sid, t["id"], value=(t["params"]["x"] - 1) ** 2 + abs(t["params"]["y"]))
    return sid


def test_captions_say_what_each_calibration_chart_shows_in_the_studys_numbers(
        legible_server: LiveServer, page) -> None:  # noqa: F811
    """A study of 4 quantile levels has 75% and 25% intervals: every caption speaks of 75%, none of
    90%, and quotes the calibration route's own counts, shares and window."""
    sid = run_2d_study(legible_server, "four-levels", 3, {"n_levels": 4, "n_warmup": 5, "conformalize_from": 8})
    with legible_server.client() as c:
        study = c.get(f"/v1/studies/{sid}").json()
        cal = c.get(f"/v1/studies/{sid}/calibration").json()
    assert cal["nominal"] == [0.75, 0.25] and cal["n"] >= 20 and cal["window"] == 20

    page.goto(f"{legible_server.url}/dashboard?poll=0.3#study={sid}")
    page.wait_for_function("""() => ['calibration', 'coverage', 'rolling', 'alpha'].every(
        (n) => document.querySelector(`[data-caption="${n}"]`).dataset.target !== undefined)""")
    text = {n: page.text_content(f'[data-caption="{n}"]') for n in CALIBRATION_CHARTS}
    data = {n: page.eval_on_selector(f'[data-caption="{n}"]', "e => ({...e.dataset})") for n in CALIBRATION_CHARTS}
    for n in CALIBRATION_CHARTS:
        assert "75%" in text[n] and "90%" not in text[n], (n, text[n])

    # the band: how many of the told results fell inside the widest interval, and what good looks like
    covered = sum(t["intervals"][0]["covered"] for t in cal["trials"])
    assert f"{covered} of {cal['n']} results ({pct(covered / cal['n'])}) fell inside" in text["calibration"]
    assert "Good: about 75% of the dots inside" in text["calibration"]
    opened = sum(t["intervals"][0]["lower"] is None or t["intervals"][0]["upper"] is None for t in cal["trials"])
    assert ("open end" in text["calibration"]) == (opened > 0), (opened, text["calibration"])

    # cumulative and rolling coverage: the route's last shares, the target, the window
    cumulative, rolling = cal["cumulative_coverage"][-1][0], cal["rolling_coverage"][-1][0]
    assert float(data["coverage"]["now"]) == pytest.approx(cumulative) and float(data["coverage"]["target"]) == 0.75
    assert f"the 75% interval is at {pct(cumulative)}" in text["coverage"]
    assert float(data["rolling"]["now"]) == pytest.approx(rolling) and data["rolling"]["window"] == "20"
    assert "over the last 20 trials" in text["rolling"]
    assert (f"stays near its 75% target; it is at {pct(rolling)} ({round(rolling * 20)} of the last 20)"
            in text["rolling"])
    # judged against the scatter of 20 results: two binomial standard errors
    noise = 2 * math.sqrt(0.75 * 0.25 / 20)
    verdict = "below" if rolling < 0.75 - noise else "above" if rolling > 0.75 + noise else "on"
    assert data["rolling"]["verdict"] == verdict
    assert {"on": "on target", "below": "below target", "above": "above target"}[verdict] in text["rolling"]

    # alpha: the target miss share of the 75% interval and where the adapter has it now
    pair = study["adaptive"]["pairs"][0]
    assert float(data["alpha"]["target"]) == pytest.approx(0.25) == pytest.approx(pair["target_alpha"])
    assert float(data["alpha"]["now"]) == pytest.approx(pair["alpha"])
    assert "target is 0.25" in text["alpha"]

    # choosing the 25% interval re-captions the band in its level
    page.select_option('[data-plot="calibration"] [data-option="pair"]', "1")
    page.wait_for_function("""() => document.querySelector('[data-caption="calibration"]').dataset.target === '0.25'""")
    inside = sum(t["intervals"][1]["covered"] for t in cal["trials"])
    assert f"{inside} of {cal['n']} results" in page.text_content('[data-caption="calibration"]')
    assert "Good: about 25% of the dots inside" in page.text_content('[data-caption="calibration"]')
    assert not page.errors, page.errors


def test_the_band_caption_counts_the_intervals_with_an_open_end(legible_server: LiveServer, page) -> None:  # noqa: F811
    """CV+'s 90% interval needs 9 scores to be bounded: on fewer its upper end is unbounded (null in the
    calibration route) and the chart leaves it undrawn. The caption says how many bands had an open end,
    the count the route gives, rather than letting a missing line pass for a narrow band."""
    sid = run_2d_study(legible_server, "open-ends", 5, {"n_warmup": 5})
    with legible_server.client() as c:
        cal = c.get(f"/v1/studies/{sid}/calibration").json()
    assert cal["nominal"][0] == 0.9
    opened = sum(t["intervals"][0]["lower"] is None or t["intervals"][0]["upper"] is None for t in cal["trials"])
    assert opened > 0 and cal["summary"]["unbounded_share"][0] == pytest.approx(opened / cal["n"])

    page.goto(f"{legible_server.url}/dashboard?poll=0.3#study={sid}")
    page.wait_for_function("""() => document.querySelector('[data-caption="calibration"]').dataset.target === '0.9'""")
    text = page.text_content('[data-caption="calibration"]')
    assert f"{opened} of the {cal['n']} bands had an open end, not drawn" in text, text
    # hovering a trial shows no number for an open end, and the bounded ones' ends as numbers
    legend = page.evaluate(HOVER_LEGEND)
    for t in cal["trials"]:
        shown = legend[str(t["number"])]["90% upper"]
        assert (shown == "—") == (t["intervals"][0]["upper"] is None), (t["number"], shown, t["intervals"][0])
    assert not page.errors, page.errors


def test_a_band_of_fewer_than_10_results_is_too_early_to_judge(legible_server: LiveServer, page) -> None:  # noqa: F811
    """Under 10 predicted results the badge says "too early to judge", whatever their share: the scatter
    of so few results says nothing yet. The same study 20 trials later is judged."""
    sid = run_2d_study(legible_server, "too-early", 11, {"n_warmup": 5}, trials=12)
    with legible_server.client() as c:
        n = c.get(f"/v1/studies/{sid}/calibration").json()["n"]
    assert 0 < n < 10
    page.goto(f"{legible_server.url}/dashboard?poll=0.3#study={sid}")
    page.wait_for_function("""() => document.querySelector('[data-caption="calibration"]').dataset.target === '0.9'""")
    assert page.get_attribute('[data-caption="calibration"]', "data-verdict") == "early"
    assert page.text_content('[data-caption="calibration"] .verdict') == "too early to judge"
    with legible_server.client() as c:
        for _ in range(20):
            t = ask(c, sid)
            tell(c, sid, t["id"], value=(t["params"]["x"] - 1) ** 2 + abs(t["params"]["y"]))
    page.wait_for_function("""() => document.querySelector('[data-caption="calibration"]')"""
                           ".dataset.verdict !== 'early'")
    assert page.text_content('[data-caption="calibration"] .verdict') in ("on target", "below target", "above target")
    assert not page.errors, page.errors


# how many painted canvas pixels lie on each axis of the parallel coordinates (a column 3 px wide
# over the axis's height, just inside its ends)
INK_ON_AXES = """() => {
    const fig = document.querySelector('[data-plot="params"]');
    const canvas = fig.querySelector('canvas');
    const dpr = canvas.width / canvas.getBoundingClientRect().width;
    const ctx = canvas.getContext('2d');
    return [...fig.querySelectorAll('.pc-axis')].map((axis) => {
        const x = Math.round(Number(axis.getAttribute('x1')) * dpr);
        const y1 = Math.round((Number(axis.getAttribute('y1')) + 4) * dpr);
        const y2 = Math.round((Number(axis.getAttribute('y2')) - 4) * dpr);
        const d = ctx.getImageData(x - 1, y1, 3, y2 - y1).data;
        let ink = 0;
        for (let i = 3; i < d.length; i += 4) ink += d[i] > 0;
        return ink;
    });
}"""


def test_an_inactive_conditional_parameter_leaves_a_gap_in_the_line(legible_server: LiveServer, page) -> None:  # noqa: F811
    """A trial whose conditional parameter is inactive draws no line through that parameter's axis:
    the line stops at the axis before and starts again at the one after. With ``gamma`` inactive in
    every trial, its axis (between ``kernel`` and ``C``) holds no ink while ``C``'s does; one
    trial with ``gamma`` active puts ink on it."""
    space = {"kernel": {"type": "categorical", "choices": ["linear", "rbf"]},
             "gamma": {"type": "float", "low": 1e-3, "high": 1, "log": True,
                       "condition": {"parent": "kernel", "values": ["rbf"]}},
             "C": {"type": "float", "low": 0.1, "high": 10, "log": True}}
    rows = [{"params": {"kernel": "linear", "C": 0.1 * 1.5 ** i}, "value": 1 / (1 + i)} for i in range(12)]
    with legible_server.client() as c:
        r = c.post("/v1/studies", json={"name": "inactive-gap", "space": space, "seed": 1})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert c.post(f"/v1/studies/{sid}/trials", json={"trials": rows}).status_code == 201
    open_study(page, legible_server, sid)
    ink = page.evaluate(INK_ON_AXES)
    # kernel, gamma, C, objective (every line leaves kernel at the end of its axis, "linear")
    assert len(ink) == 4 and ink[1] == 0 and ink[2] > 0 and ink[3] > 0, ink

    with legible_server.client() as c:
        r = c.post(f"/v1/studies/{sid}/trials", json={"params": {"kernel": "rbf", "gamma": 0.1, "C": 1.0},
                                                       "value": 0.5})
        assert r.status_code == 201, r.text
    page.wait_for_function("""() => document.querySelector('[data-plot="params"]').dataset.points === '13'""")
    assert page.evaluate(INK_ON_AXES)[1] > 0
    assert not page.errors, page.errors

