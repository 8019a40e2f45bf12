// calibo dashboard: polls the JSON API under /v1 and draws a study's state. Plain JS, no build step.
// Charts: the vendored uPlot (static/vendor, see VENDORED.md); parallel coordinates: a canvas of our own.
"use strict";

(() => {
  const query = new URLSearchParams(location.search);
  const POLL_MS = Math.max(200, 1000 * (parseFloat(query.get("poll")) || 3));
  // the page lives at <root>dashboard; the API at <root>v1 (root is "/" unless a proxy adds a prefix)
  const API = location.pathname.replace(/dashboard\/?$/, "") + "v1";
  const TOKEN_KEY = "calibo.token";
  const STUDIES_PER_PAGE = 20;
  const MAX_CURVES = 400;
  const PAGE = 1000; // the API's largest page

  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const STATE_COLORS = {
    complete: "rgba(31, 119, 180, 0.55)", running: "rgba(255, 127, 14, 0.9)",
    pruned: "rgba(140, 140, 140, 0.45)", failed: "rgba(214, 39, 40, 0.5)",
  };
  const VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
    [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];

  const $ = (sel, el = document) => el.querySelector(sel);
  const $$ = (sel, el = document) => Array.from(el.querySelectorAll(sel));

  // The token lives in this tab's sessionStorage (gone when the tab closes) and in memory, never in
  // localStorage, which outlives the tab; a token that earlier versions left there is removed on load.
  const session = {
    get() {
      try { return sessionStorage.getItem(TOKEN_KEY); } catch (e) { return null; } // storage off: memory only
    },
    set(token) {
      try {
        if (token) sessionStorage.setItem(TOKEN_KEY, token);
        else sessionStorage.removeItem(TOKEN_KEY);
      } catch (e) { /* storage off: memory only */ }
    },
  };
  try { localStorage.removeItem(TOKEN_KEY); } catch (e) { /* storage off: nothing kept there */ }

  const state = {
    token: session.get(),
    needToken: false,
    offset: 0, // of the study list
    studyId: null,
    // the selected study's data; trials and curves are refreshed incrementally
    study: null, calibration: null, trials: [], curves: [],
    notice: null, // a lasting warning (the selected study was deleted)
    pair: null, // chosen interval pair of the calibration plot (index), null: the widest
    log: { best: null, calibration: null, curves: null }, // log scales: null automatic, else the user's choice
    polls: 0,
  };

  // ------------------------------------------------------------------ helpers
  function h(tag, attrs = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v == null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "dataset") Object.assign(el.dataset, v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c != null) el.append(c instanceof Node ? c : String(c));
    return el;
  }

  function fmt(v, digits = 4) {
    if (v == null || Number.isNaN(v)) return "—";
    if (typeof v !== "number") return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2).replace(/\.?0+e/, "e");
    return String(parseFloat(v.toPrecision(digits)));
  }

  const pct = (c) => `${fmt(100 * c, 3)}%`;
  // Math.min(...a) overflows the stack on very long arrays (large studies)
  const minOf = (a) => a.reduce((m, v) => (v < m ? v : m), Infinity);
  const maxOf = (a) => a.reduce((m, v) => (v > m ? v : m), -Infinity);

  function ago(iso) {
    if (!iso) return "—";
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 60) return `${Math.round(s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
    return `${(s / 86400).toFixed(1)} d ago`;
  }

  function viridis(t) {
    const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
    const f = x - i;
    const c = VIRIDIS[i].map((a, k) => Math.round(a + f * (VIRIDIS[i + 1][k] - a)));
    return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
  }

  // ---------------------------------------------------------------------- API
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path) {
    const headers = { Accept: "application/json" };
    if (state.token) headers.Authorization = `Bearer ${state.token}`;
    let r;
    try {
      r = await fetch(API + path, { headers, cache: "no-store" });
    } catch (e) {
      throw new ApiError(0, "cannot reach the server");
    }
    if (!r.ok) {
      let msg = r.statusText;
      try {
        const body = await r.json();
        msg = (body.error && body.error.message) || body.detail || msg;
      } catch (e) { /* not JSON */ }
      throw new ApiError(r.status, msg);
    }
    return r.json();
  }

  // every item of a paged list endpoint from position `start` on
  async function pages(path, key, start) {
    const items = [];
    let offset = start;
    let total;
    for (;;) {
      const page = await api(`${path}?limit=${PAGE}&offset=${offset}`);
      items.push(...page[key]);
      total = page.total;
      offset += page[key].length;
      if (!page[key].length || offset >= total) break;
    }
    return { items, total };
  }

  // Trials (and learning curves) are listed by trial number, and only a running trial changes. Items
  // numbered below the first trial that was running at the last poll are final: keep them, read the rest.
  async function refresh(cache, path, key, firstOpen) {
    let keep = cache.findIndex((x) => x.number >= firstOpen);
    if (keep < 0) keep = cache.length;
    const { items, total } = await pages(path, key, keep);
    const out = cache.slice(0, keep).concat(items);
    return out.length === total ? out : (await pages(path, key, 0)).items;
  }

  // ---------------------------------------------------------------- polling
  let timer = null;
  let polling = false;
  let again = false;

  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  function pollNow() {
    if (polling) again = true;
    else schedule(0);
  }

  async function poll() {
    if (polling) return; // never two polls at once
    polling = true;
    again = false;
    try {
      if (!document.hidden || state.polls === 0) {
        const id = state.studyId;
        const [list, loaded] = await Promise.all([loadStudies(id), id != null ? loadStudy(id) : null]);
        const current = loaded && state.studyId === id; // not another study selected meanwhile
        if (current) Object.assign(state, loaded);
        renderStudies(list); // after the study: its row shows the same view as its details
        if (current) renderStudy();
        state.polls += 1;
        document.body.dataset.polls = state.polls;
        setStatus("ok", `updated ${new Date().toLocaleTimeString()}`);
        showBanner(state.notice);
      }
    } catch (e) {
      handleError(e);
    } finally {
      polling = false;
      if (!state.needToken) schedule(again ? 0 : POLL_MS);
    }
  }

  function handleError(e) {
    const status = e instanceof ApiError ? e.status : -1;
    if (status === 401) {
      askToken(state.token ? "The server rejected this token: enter another one." : null);
    } else if (status === 503) {
      setStatus("busy", "server busy, retrying");
      showBanner("The server is busy (503): retrying.", "warn");
    } else if (status === 0) {
      setStatus("error", "server unreachable, retrying");
      showBanner("Cannot reach the server: retrying.", "warn");
    } else if (status === -1) {
      console.error(e);
      setStatus("error", "error");
      showBanner(`The dashboard failed: ${e.message}`, "error");
    } else {
      setStatus("error", `error ${status}, retrying`);
      showBanner(`The server answered ${status}: ${e.message}`, "error");
    }
  }

  function setStatus(kind, text) {
    const el = $("#status");
    el.dataset.state = kind;
    el.textContent = text;
  }

  function showBanner(text, kind = "warn") {
    const el = $("#banner");
    el.hidden = !text;
    el.textContent = text || "";
    el.className = `banner ${kind}`;
  }

  // ------------------------------------------------------------------ token
  function askToken(why) {
    state.needToken = true;
    clearTimeout(timer);
    setStatus("token", "waiting for a token");
    const form = $("#token-form");
    form.hidden = false;
    if (why) $("#token-why").textContent = why;
    $("#token-input").focus();
    showBanner(null);
  }

  function setToken(token) {
    state.token = token || null;
    session.set(state.token);
    $("#token-button").hidden = !state.token;
  }

  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("#token-input").value.trim();
    if (!token) return;
    setToken(token);
    $("#token-input").value = "";
    $("#token-form").hidden = true;
    state.needToken = false;
    pollNow();
  });

  $("#token-button").addEventListener("click", () => {
    setToken(null);
    $("#token-why").textContent = "Token forgotten. Enter a token to read this server's studies.";
    pollNow(); // a server with auth answers 401: the form shows
  });

  // ----------------------------------------------------------- study list
  // a page of studies, and each one's view for its surrogate status (the selected one's comes with it)
  async function loadStudies(selected) {
    const page = await api(`/studies?limit=${STUDIES_PER_PAGE}&offset=${state.offset}`);
    if (!page.studies.length && state.offset > 0 && page.total > 0) {
      state.offset = Math.max(0, page.total - STUDIES_PER_PAGE);
      return loadStudies(selected);
    }
    const views = await Promise.all(page.studies.map((s) => (s.id === selected ? null : api(`/studies/${s.id}`)
      .catch((e) => {
        if (e.status === 404) return null; // deleted meanwhile
        throw e;
      }))));
    return { page, views };
  }

  function surrogateCell(st) {
    if (!st) return h("span", { class: "muted" }, "—");
    const parts = [];
    if (st.snapshot_version == null) parts.push(h("span", { class: "muted" }, "no fit yet"));
    else {
      parts.push(`v${st.snapshot_version} on ${st.fitted_on}`);
      parts.push(h("span", { class: st.lag > 0 ? "lag" : "muted" }, ` lag ${st.lag}`));
      parts.push(` · ${st.method || "?"} · ${st.device || "?"}`);
    }
    if (st.fitting) parts.push(" ", h("span", { class: "badge fitting" }, "fitting"));
    if (st.queued) parts.push(" ", h("span", { class: "badge queued" }, "queued"));
    if (st.last_error) parts.push(" ", h("span", { class: "badge error", title: st.last_error }, "error"));
    return h("span", { class: "surrogate" }, parts);
  }

  function renderStudies({ page, views }) {
    $("#studies-total").textContent = `(${page.total})`;
    const first = page.total ? page.offset + 1 : 0;
    $("#page-info").textContent = `${first}–${page.offset + page.studies.length} of ${page.total}`;
    $("#prev-page").disabled = page.offset === 0;
    $("#next-page").disabled = page.offset + page.studies.length >= page.total;
    $("#no-studies").hidden = page.total > 0;
    const rows = page.studies.map((row, i) => {
      const sel = state.study && state.study.id === row.id;
      const s = sel ? state.study : row;
      const v = sel ? state.study : views[i];
      const t = s.trials;
      return h("tr", { dataset: { studyId: s.id }, class: s.id === state.studyId ? "selected" : null },
        h("td", { class: "num" }, s.id),
        h("td", {}, h("a", { href: `#study=${s.id}` }, s.name)),
        h("td", {}, s.direction),
        h("td", {}, `${s.surrogate} / ${s.acquisition}`),
        h("td", { class: "num" }, t.running), h("td", { class: "num" }, t.complete),
        h("td", { class: "num" }, t.failed), h("td", { class: "num" }, t.pruned),
        h("td", { class: "num total" }, t.total),
        h("td", { class: "num best" }, s.directions ? `${s.directions.length} objectives`
          : s.best_trial ? fmt(s.best_trial.value) : "—"),
        h("td", {}, surrogateCell(v && v.surrogate_status)));
    });
    $("#study-table tbody").replaceChildren(...rows);
  }

  $("#study-table tbody").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-study-id]");
    if (tr && !ev.target.closest("a")) location.hash = `study=${tr.dataset.studyId}`;
  });
  $("#prev-page").addEventListener("click", () => {
    state.offset = Math.max(0, state.offset - STUDIES_PER_PAGE);
    pollNow();
  });
  $("#next-page").addEventListener("click", () => {
    state.offset += STUDIES_PER_PAGE;
    pollNow();
  });

  // ----------------------------------------------------------- one study
  function selectFromHash() {
    const m = /study=(\d+)/.exec(location.hash);
    const id = m ? Number(m[1]) : null;
    if (id === state.studyId) return;
    state.studyId = id;
    if (id != null) state.notice = null;
    Object.assign(state, { study: null, calibration: null, importance: null, trials: [], curves: [], pair: null,
      log: { best: null, calibration: null, curves: null } });
    for (const name of Object.keys(charts)) destroyChart(name);
    $("#study").hidden = id == null;
    $$("#study-table tbody tr").forEach((tr) => tr.classList.toggle("selected", Number(tr.dataset.studyId) === id));
    if (id != null) pollNow();
  }
  window.addEventListener("hashchange", selectFromHash);

  async function loadStudy(id) {
    const open = state.trials.filter((t) => t.state === "running").map((t) => t.number);
    const last = state.trials.length ? state.trials[state.trials.length - 1].number : -1;
    const firstOpen = open.length ? minOf(open) : last + 1;
    let study, calibration, trials, curves, pareto = null;
    try {
      [study, calibration, [trials, curves]] = await Promise.all([
        api(`/studies/${id}`),
        api(`/studies/${id}/calibration`),
        (async () => {
          // trials before curves: a curve of a trial finished at this trials read is final
          const t = await refresh(state.trials, `/studies/${id}/trials`, "trials", firstOpen);
          const c = await refresh(state.curves, `/studies/${id}/curves`, "curves", firstOpen);
          return [t, c];
        })(),
      ]);
    } catch (e) {
      if (e.status === 404 && state.studyId === id) {
        state.notice = `Study ${id} does not exist (deleted?).`;
        showBanner(state.notice); // at once: the page leaves the study before this poll ends
        location.hash = "";
        return null;
      }
      throw e;
    }
    if (study.directions) pareto = await api(`/studies/${id}/pareto`);
    const importance = await loadImportance(id, study);
    return { study, calibration, trials, curves, pareto, importance };
  }

  // the server caches it per set of results; read it again only when the completed count changes
  async function loadImportance(id, study) {
    const key = `${id}:${study.trials.complete}`;
    if (state.importance && state.importance.key === key) return state.importance;
    const body = await api(`/studies/${id}/importance`);
    return { key, body, note: body.reason };
  }

  function drawImportance() {
    const imp = state.importance;
    const panel = $('[data-panel="importance"]');
    const box = panel.querySelector(".importance");
    const rows = imp && imp.body ? imp.body.importances : [];
    panel.dataset.params = String(rows.length);
    if (!rows.length) {
      box.replaceChildren(h("p", { class: "muted" }, (imp && imp.note) || "—"));
      return;
    }
    const pctOf = (v) => `${Math.max(0, Math.min(100, 100 * v)).toFixed(1)}%`;
    // sized through the CSSOM: the page's policy refuses inline style attributes
    const sized = (cls, left, width) => {
      const el = h("span", { class: cls });
      el.style.left = left;
      el.style.width = width;
      return el;
    };
    const r2 = imp.body.fit && imp.body.fit.r2_oob;
    box.replaceChildren(
      ...rows.map((p) => h("div", { class: "imp-row", dataset: { param: p.param } },
        h("span", { class: "imp-name" }, p.param),
        h("span", { class: "imp-track" },
          sized("imp-band", pctOf(p.low), pctOf(p.high - p.low)),
          sized("imp-bar", "0%", pctOf(p.importance))),
        h("span", { class: "imp-value" }, fmt(p.importance, 2)))),
      h("p", { class: "muted" }, `${imp.body.n_trials} trials; out-of-bag R² of the model ${r2 == null ? "—" : fmt(r2, 2)}`));
  }

  function fact(label, value, attrs = {}) {
    return h("div", { class: "fact", ...attrs }, h("span", { class: "label" }, label), h("span", { class: "value" }, value));
  }

  function renderStudy() {
    const { study: s, calibration: cal } = state;
    $("#study").hidden = false;
    $("#study-title").replaceChildren(`#${s.id} `, h("span", {}, s.name));
    const t = s.trials;
    const best = s.best_trial;
    const st = s.surrogate_status;
    const multi = Array.isArray(s.directions) && s.directions.length > 1;
    const facts = [
      multi ? fact("objectives", s.directions.join(" · ")) : fact("direction", s.direction),
      fact("surrogate / acquisition", `${s.surrogate} / ${s.acquisition}`),
      fact("pruner", (s.pruner && s.pruner.name) || "none"),
      fact("trials", `${t.total} (${t.complete} complete, ${t.running} running, ${t.failed} failed, ${t.pruned} pruned`
        + `${t.waiting ? `, ${t.waiting} enqueued` : ""})`, { dataset: { fact: "trials", total: t.total } }),
      multi
        ? fact("Pareto front", s.pareto && s.pareto.size ? `${s.pareto.size} trials, hypervolume ${fmt(s.pareto.hypervolume)}`
          + ` (reference ${s.pareto.reference_point.map((v) => fmt(v)).join(", ")})` : "—",
        { dataset: { fact: "pareto", size: s.pareto ? s.pareto.size : 0 } })
        : fact(s.constraints && s.constraints.length ? "best feasible" : "best",
          best ? `${fmt(best.value)} (trial ${best.number}: ${Object.entries(best.params)
            .map(([k, v]) => `${k}=${fmt(v)}`).join(", ")})` : "—", { dataset: { fact: "best" } }),
      fact("surrogate", surrogateCell(st)),
      fact("last fit", st && st.fitted_at ? `${ago(st.fitted_at)}, took ${fmt(st.fit_seconds, 2)} s` : "—"),
    ];
    if (s.constraints && s.constraints.length) {
      const told = state.trials.filter((x) => x.state === "complete" && x.feasible != null);
      const ok = told.filter((x) => x.feasible).length;
      facts.push(fact("constraints", `${s.constraints.join(", ")}: ${ok} of ${told.length} completed trials feasible`,
        { dataset: { fact: "constraints", feasible: ok } }));
    }
    const origins = ["enqueued", "added", "copied"].map((o) => [o, state.trials.filter((x) => x.origin === o).length])
      .filter(([, n]) => n);
    if (origins.length) facts.push(fact("not asked", origins.map(([o, n]) => `${n} ${o}`).join(", "),
      { dataset: { fact: "origins" } }));
    if (s.adaptive) facts.push(fact("adapter", s.adaptive.adapter));
    const attrs = Object.entries(s.user_attrs || {});
    if (attrs.length) facts.push(fact("user attrs", attrs.map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
      .join(", "), { dataset: { fact: "user_attrs" } }));
    if (cal && cal.summary && cal.summary.n) {
      const cov = cal.summary.coverage.map((c, i) => `${pct(cal.nominal[i])}→${fmt(c, 2)}`).join(" · ");
      facts.push(fact(`coverage (${cal.summary.n} predicted)`, cov, { title: "nominal → observed coverage" }));
    }
    if (multi && cal && cal.objectives) {
      const cov = cal.objectives.map((o, j) => (o.summary && o.summary.n
        ? `${j}: ${pct(cal.nominal[0])}→${fmt(o.summary.coverage[0], 2)}` : `${j}: —`)).join(" · ");
      facts.push(fact("coverage by objective", cov, { title: "the widest interval: nominal → observed coverage" }));
    }
    $("#study-facts").replaceChildren(...facts);
    for (const name of ["pareto", "hypervolume", "objectives"]) figure(name).hidden = !multi;
    figure("best").hidden = multi;
    if (multi) {
      drawPareto();
      drawHypervolume();
      drawObjectiveCoverage();
    } else drawBest();
    drawCalibration();
    drawCoverage("coverage", "cumulative_coverage");
    drawCoverage("rolling", "rolling_coverage");
    drawAlpha();
    drawParams();
    drawImportance();
    drawCurves();
  }

  // ------------------------------------------------------------------ charts
  const charts = {}; // name -> {u, sig, key}

  function figure(name) {
    return $(`[data-plot="${name}"]`);
  }

  function chartSize(el) {
    return { width: Math.max(280, el.clientWidth), height: 260 };
  }

  function destroyChart(name) {
    if (charts[name]) charts[name].u.destroy();
    delete charts[name];
    const fig = figure(name);
    if (fig) fig.dataset.points = 0;
  }

  function empty(name, text) {
    destroyChart(name);
    const fig = figure(name);
    fig.classList.add("empty");
    fig.dataset.points = 0;
    $(".chart", fig).replaceChildren(h("p", { class: "nodata" }, text));
  }

  // (re)draws chart `name`: a new uPlot when its series change (sig), else only new data
  function chart(name, sig, points, makeOpts, data) {
    const fig = figure(name);
    const el = $(".chart", fig);
    fig.classList.remove("empty");
    fig.dataset.points = points;
    const key = JSON.stringify(data);
    const c = charts[name];
    if (c && c.sig === sig) {
      if (c.key !== key) c.u.setData(data);
      c.key = key;
      return;
    }
    destroyChart(name);
    fig.dataset.points = points;
    el.replaceChildren();
    charts[name] = { u: new uPlot({ ...chartSize(el), ...makeOpts() }, data, el), sig, key };
  }

  const tickValues = (u, ticks) => ticks.map((v) => (v == null ? "" : fmt(v)));
  // trial numbers and steps are integers: no ticks between them
  const INT_INCRS = [1, 2, 5].flatMap((m) => [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7].map((e) => m * e))
    .concat([25, 250, 2500]).sort((a, b) => a - b);
  // on a log scale, ticks, labels and grid lines at the powers of ten only (not at every 1..9 × 10^k)
  const decade = (v) => v === 0 || Math.abs(Math.log10(Math.abs(v)) % 1) < 1e-9 || Math.abs(Math.log10(Math.abs(v)) % 1) > 1 - 1e-9;
  const decades = (u, splits) => splits.map((v) => (v != null && decade(v) ? v : null));
  const axes = (x, y, log = false) => [
    { label: x, stroke: "#444", grid: { stroke: "#eee" }, ticks: { stroke: "#ddd" }, incrs: INT_INCRS },
    {
      label: y, stroke: "#444", size: 58, values: tickValues, ...(log ? { filter: decades } : {}),
      grid: { stroke: "#eee", ...(log ? { filter: decades } : {}) },
      ticks: { stroke: "#ddd", ...(log ? { filter: decades } : {}) },
    },
  ];
  const legendValue = (u, v) => fmt(v);
  const dots = (color, size = 6) => ({
    stroke: color, fill: color, width: 1, paths: () => null, points: { show: true, size, fill: color, stroke: color },
    value: legendValue,
  });
  const line = (color, extra = {}) => ({ stroke: color, width: 1.75, points: { show: false }, spanGaps: true, value: legendValue, ...extra });

  // dashed horizontal target lines at `values` (y scale), one color each
  function targets(values, colors) {
    return {
      hooks: {
        draw: [(u) => {
          const ctx = u.ctx;
          const { left, top, width, height } = u.bbox;
          ctx.save();
          ctx.beginPath();
          ctx.rect(left, top, width, height);
          ctx.clip();
          ctx.setLineDash([6 * devicePixelRatio, 5 * devicePixelRatio]);
          ctx.lineWidth = 1.25 * devicePixelRatio;
          values.forEach((v, i) => {
            const y = u.valToPos(v, "y", true);
            ctx.strokeStyle = colors[i];
            ctx.beginPath();
            ctx.moveTo(left, y);
            ctx.lineTo(left + width, y);
            ctx.stroke();
          });
          ctx.restore();
        }],
      },
    };
  }

  // each told value's series: asked and feasible, enqueued, added or copied, infeasible, pruned
  const KINDS = [
    ["asked", "trial value", "rgba(31, 119, 180, 0.6)", 6],
    ["enqueued", "enqueued", "rgba(148, 103, 189, 0.85)", 7],
    ["imported", "added / copied", "rgba(44, 160, 44, 0.85)", 7],
    ["infeasible", "infeasible (a constraint > 0)", "rgba(214, 39, 40, 0.75)", 5],
    ["pruned", "pruned (last value)", "rgba(140, 140, 140, 0.6)", 5],
  ];

  function kindOf(t) {
    if (t.state !== "complete") return "pruned";
    if (t.feasible === false) return "infeasible";
    if (t.origin === "added" || t.origin === "copied") return "imported";
    return t.origin === "enqueued" ? "enqueued" : "asked";
  }

  function drawBest() {
    const s = state.study;
    const done = state.trials.filter((t) => t.value != null && (t.state === "complete" || t.state === "pruned"));
    const nComplete = done.filter((t) => t.state === "complete").length;
    if (!nComplete) return empty("best", "no completed trial yet");
    const sign = s.direction === "maximize" ? -1 : 1;
    const xs = [], best = [];
    const cols = Object.fromEntries(KINDS.map(([k]) => [k, []]));
    let b = null;
    for (const t of done) {
      xs.push(t.number);
      const kind = kindOf(t);
      for (const [k] of KINDS) cols[k].push(k === kind ? t.value : null);
      // the best is the best feasible completed trial, as the study view's
      if (kind !== "pruned" && kind !== "infeasible" && (b == null || sign * t.value < sign * b)) b = t.value;
      best.push(b);
    }
    const shown = KINDS.filter(([k]) => k === "asked" || cols[k].some((v) => v != null));
    const y = logScale("best", done.map((t) => t.value));
    const data = [xs, cols.asked, best, ...shown.slice(1).map(([k]) => cols[k])];
    chart("best", `best:${y.sig}:${shown.map(([k]) => k).join()}`, nComplete, () => ({
      scales: { x: { time: false }, y: y.scale },
      axes: axes("trial number", "objective value", y.sig !== "linear"),
      series: [
        { label: "trial" },
        { label: KINDS[0][1], ...dots(KINDS[0][2], KINDS[0][3]) },
        line("#e8590c", { label: `best ${s.constraints && s.constraints.length ? "feasible " : ""}so far (${s.direction})`,
          width: 2.5, paths: uPlot.paths.stepped({ align: 1 }) }),
        ...shown.slice(1).map(([, label, color, size]) => ({ label, ...dots(color, size) })),
      ],
    }), data);
  }

  // a log y scale where the values span decades: log10 when all are positive, else asinh (log-like
  // on both sides of 0, linear within the smallest |value|); the checkbox of plot `name` overrides the automatic choice
  function logScale(name, values, others = []) {
    const mags = values.filter((v) => v != null).map(Math.abs).filter((v) => v > 0);
    const lo = mags.length ? minOf(mags) : 1;
    const hi = mags.length ? maxOf(mags) : 1;
    const on = state.log[name] == null ? hi / lo > 100 : state.log[name];
    $(`[data-plot="${name}"] [data-option="log"]`).checked = on;
    if (!on) return { sig: "linear", scale: {} };
    if (values.concat(others).every((v) => v == null || v > 0)) return { sig: "log", scale: { distr: 3 } };
    const lin = Number(lo.toPrecision(1));
    return { sig: `asinh${lin}`, scale: { distr: 4, log: 10, asinh: lin } };
  }

  for (const name of ["best", "calibration", "curves"]) {
    $(`[data-plot="${name}"] [data-option="log"]`).addEventListener("change", (ev) => {
      state.log[name] = ev.target.checked;
      if (state.study) renderStudy();
    });
  }

  function drawCalibration() {
    const cal = state.calibration;
    const select = $('[data-plot="calibration"] [data-option="pair"]');
    if (!cal || !cal.n) {
      select.replaceChildren();
      resetCaption("calibration");
      return empty("calibration", "no predicted trial has completed yet (warm start)");
    }
    const nominal = cal.nominal;
    const widest = nominal.indexOf(Math.max(...nominal));
    const pair = state.pair != null && state.pair < nominal.length ? state.pair : widest;
    if (select.options.length !== nominal.length) {
      select.replaceChildren(...nominal.map((c, i) => h("option", { value: i }, pct(c))));
    }
    select.value = String(pair);
    const rows = cal.trials.slice().sort((a, b) => a.number - b.number);
    const xs = rows.map((t) => t.number);
    const lower = rows.map((t) => t.intervals[pair].lower);
    const upper = rows.map((t) => t.intervals[pair].upper);
    const mean = rows.map((t) => t.mean);
    const inside = rows.map((t) => (t.intervals[pair].covered ? t.value : null));
    const outside = rows.map((t) => (t.intervals[pair].covered ? null : t.value));
    const label = pct(nominal[pair]);
    captionCalibration(cal, pair, rows);
    const y = logScale("calibration", rows.map((t) => t.value), lower);
    chart("calibration", `cal:${pair}:${y.sig}`, rows.length, () => ({
      scales: { x: { time: false }, y: y.scale },
      axes: axes("trial number", "objective value", y.sig !== "linear"),
      series: [
        { label: "trial" },
        // an unbounded end is null: a gap in the band, not a line drawn across it
        line("rgba(31, 119, 180, 0.7)", { label: `${label} lower`, width: 1, spanGaps: false }),
        line("rgba(31, 119, 180, 0.7)", { label: `${label} upper`, width: 1, spanGaps: false }),
        line("rgba(60, 60, 60, 0.7)", { label: "predicted mean", width: 1, dash: [4, 4] }),
        { label: "value (inside)", ...dots("#2b8a3e", 7) },
        { label: "value (breach)", ...dots("#e03131", 7) },
      ],
      bands: [{ series: [2, 1], fill: "rgba(31, 119, 180, 0.15)" }],
    }), [xs, lower, upper, mean, inside, outside]);
  }

  $('[data-plot="calibration"] [data-option="pair"]').addEventListener("change", (ev) => {
    state.pair = Number(ev.target.value);
    if (state.study) drawCalibration();
  });

  function calibrationXs(cal) {
    return cal.trials.map((t) => t.number);
  }

  function drawCoverage(name, key) {
    const cal = state.calibration;
    if (!cal || !cal.n) {
      resetCaption(name);
      return empty(name, "no predicted trial has completed yet (warm start)");
    }
    if (key === "rolling_coverage") captionRolling(cal);
    else captionCoverage(cal);
    const nominal = cal.nominal;
    const series = nominal.map((c, i) => line(COLORS[i % COLORS.length], { label: `${pct(c)} interval` }));
    const data = [calibrationXs(cal), ...nominal.map((_, i) => cal[key].map((row) => row[i]))];
    chart(name, `${name}:${nominal.join()}`, cal.n, () => ({
      scales: { x: { time: false }, y: { range: [0, 1.02] } },
      axes: axes("trial number", key === "rolling_coverage" ? "rolling coverage" : "cumulative coverage"),
      series: [{ label: "trial" }, ...series],
      plugins: [targets(nominal, nominal.map((_, i) => COLORS[i % COLORS.length]))],
    }), data);
  }

  function drawAlpha() {
    const cal = state.calibration;
    if (!cal || !cal.n) {
      resetCaption("alpha");
      return empty("alpha", "no predicted trial has completed yet (warm start)");
    }
    const nominal = cal.nominal;
    const pairs = (state.study.adaptive && state.study.adaptive.pairs) || [];
    const target = nominal.map((c, i) => (pairs[i] ? pairs[i].target_alpha : 1 - c));
    captionAlpha(cal, target);
    const series = nominal.map((c, i) => line(COLORS[i % COLORS.length], { label: `α of ${pct(c)}` }));
    const data = [calibrationXs(cal), ...nominal.map((_, i) => cal.alpha_trajectory.map((row) => row[i]))];
    chart("alpha", `alpha:${nominal.join()}`, cal.n, () => ({
      // an alpha driven below 0 (misses the widest interval could not stop) stays in view
      scales: { x: { time: false }, y: { range: (u, lo, hi) => [Math.min(0, lo), Math.max(1.02, hi)] } },
      axes: axes("trial number", "alpha (miscoverage)"),
      series: [{ label: "trial" }, ...series],
      plugins: [targets(target, nominal.map((_, i) => COLORS[i % COLORS.length]))],
    }), data);
  }

  function drawCurves() {
    let curves = state.curves.filter((c) => c.steps.length);
    if (!curves.length) return empty("curves", "no trial has reported a learning curve");
    const total = curves.length;
    const bestId = state.study.best_trial && state.study.best_trial.id;
    if (curves.length > MAX_CURVES) {
      curves = curves.slice(-MAX_CURVES).concat(curves.filter((c, i) => c.trial_id === bestId && i < total - MAX_CURVES));
    }
    const order = { pruned: 0, failed: 1, complete: 2, running: 3 };
    curves.sort((a, b) => (a.trial_id === bestId) - (b.trial_id === bestId) || order[a.state] - order[b.state] || a.number - b.number);
    const steps = Array.from(new Set(curves.flatMap((c) => c.steps))).sort((a, b) => a - b);
    const at = new Map(steps.map((s, i) => [s, i]));
    const data = [steps];
    for (const c of curves) {
      const ys = new Array(steps.length).fill(null);
      c.steps.forEach((s, i) => { ys[at.get(s)] = c.values[i]; });
      data.push(ys);
    }
    const series = curves.map((c) => line(c.trial_id === bestId ? "#111" : STATE_COLORS[c.state] || "#999", {
      label: `trial ${c.number} (${c.state})`, width: c.trial_id === bestId ? 2.5 : 1.25,
    }));
    const caption = $('[data-plot="curves"] figcaption .muted');
    caption.title = total > MAX_CURVES ? `the last ${MAX_CURVES} of ${total} curves` : "";
    const y = logScale("curves", curves.flatMap((c) => c.values));
    const sig = `curves:${y.sig}:${curves.map((c) => `${c.trial_id}/${c.state}`).join()}:${bestId}`;
    chart("curves", sig, curves.length, () => ({
      scales: { x: { time: false }, y: y.scale },
      axes: axes("step (resource)", "reported value", y.sig !== "linear"),
      legend: { show: false },
      cursor: { points: { show: false } },
      series: [{ label: "step" }, ...series],
    }), data);
  }

  // the cleared 2-D context of the canvas plot `fig` for `points` points (null, and "no completed
  // trial yet" shown, when there are none); ctx.size is its size in CSS pixels
  function canvasOf(fig, points, height) {
    const wrap = $(".chart", fig);
    fig.dataset.points = points;
    if (!points) {
      fig.classList.add("empty");
      wrap.replaceChildren(h("p", { class: "nodata" }, "no completed trial yet"), h("canvas", { hidden: true }));
      return null;
    }
    let canvas = $("canvas", wrap);
    if (!canvas || canvas.hidden) {
      canvas = h("canvas");
      wrap.replaceChildren(canvas);
    }
    fig.classList.remove("empty");
    const { width } = chartSize(wrap);
    const dpr = window.devicePixelRatio || 1;
    canvas.width = width * dpr;
    canvas.height = height * dpr;
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.size = { width, height };
    return ctx;
  }

  // ------------------------------------------------------------------ captions
  // Each calibration chart says in plain words what it plots, what good looks like and what to do when
  // it is not, from the numbers the calibration route returns: the study's own interval levels, window
  // and counts. The page's own text stands until a predicted trial has completed.
  const STATIC_CAPTIONS = new Map($$("[data-caption]").map((el) => [el.dataset.caption,
    Array.from(el.childNodes, (c) => c.cloneNode(true))]));
  const VERDICTS = { on: "on target", below: "below target", above: "above target", early: "too early to judge" };

  function caption(name, verdict, sentences, data = {}) {
    const el = $(`[data-caption="${name}"]`);
    const parts = verdict ? [h("span", { class: `verdict ${verdict}` }, VERDICTS[verdict]), " "] : [];
    el.replaceChildren(...parts, ...sentences.flatMap((x, i) => (i ? [" ", x] : [x])));
    for (const k of Object.keys(el.dataset)) if (k !== "caption") delete el.dataset[k];
    Object.assign(el.dataset, verdict ? { verdict } : {}, data);
  }

  function resetCaption(name) {
    const el = $(`[data-caption="${name}"]`);
    el.replaceChildren(...STATIC_CAPTIONS.get(name).map((c) => c.cloneNode(true)));
    for (const k of Object.keys(el.dataset)) if (k !== "caption") delete el.dataset[k];
  }

  // where a share `observed` of `m` results stands against the target share `c`: within two binomial
  // standard errors of it is the ordinary scatter of m results
  function judge(observed, c, m) {
    const noise = 2 * Math.sqrt((c * (1 - c)) / Math.max(1, m));
    const verdict = m < 10 ? "early" : observed < c - noise ? "below" : observed > c + noise ? "above" : "on";
    return { verdict, noise };
  }

  const widestPair = (cal) => cal.nominal.indexOf(Math.max(...cal.nominal));
  const pctPoints = (share) => `${fmt(100 * share, 2)} points`;
  const intervalsOf = (cal) => (cal.nominal.length > 1
    ? `one line per interval (${cal.nominal.map(pct).join(", ")}), each with its dashed target`
    : `dashed: its target`);

  function captionCalibration(cal, pair, rows) {
    const c = cal.nominal[pair];
    const m = rows.length;
    const k = rows.filter((t) => t.intervals[pair].covered).length;
    const width = cal.summary && cal.summary.mean_width ? cal.summary.mean_width[pair] : null;
    const open = rows.filter((t) => t.intervals[pair].lower == null || t.intervals[pair].upper == null).length;
    caption("calibration", judge(k / m, c, m).verdict, [
      "Each dot is a finished trial's result; the shaded band is the range the model predicted for it when",
      `the trial was asked, meant to hold the result ${pct(c)} of the time.`,
      `${k} of ${m} results (${pct(k / m)}) fell inside it (green), ${m - k} outside (red)`
        + `${width == null ? "" : `; the band is ${fmt(width, 3)} wide on average, in the objective's units`}.`,
      ...(open ? [`${open} of the ${m} bands had an open end, not drawn: too few results to bound the range`
        + ` at ${pct(c)}, so it covers whatever comes.`] : []),
      `Good: about ${pct(c)} of the dots inside, the red ones scattered rather than in a run.`,
      "A run of red dots means the model is wrong about the region the search is in now: calibo widens",
      "the next bands by itself (alpha, below); if the run goes on, see the rolling coverage.",
    ], { target: c, now: k / m, n: m });
  }

  function captionCoverage(cal) {
    const i = widestPair(cal);
    const c = cal.nominal[i];
    const now = cal.cumulative_coverage[cal.cumulative_coverage.length - 1][i];
    caption("coverage", judge(now, c, cal.n).verdict, [
      "The share of told results that fell inside the interval predicted at ask time, over all",
      `${cal.n} predicted trials so far; ${intervalsOf(cal)}.`,
      `Good: each line settles near its target; the ${pct(c)} interval is at ${pct(now)}.`,
      "Below its target for long, the model is overconfident (its intervals are too narrow) and the search",
      "leans on predictions that miss: the rolling coverage shows whether that is still so. Above it, the",
      "intervals are wider than they need to be, which is safe.",
    ], { target: c, now, n: cal.n });
  }

  function captionRolling(cal) {
    const i = widestPair(cal);
    const c = cal.nominal[i];
    const w = cal.window;
    const m = Math.min(cal.n, w);
    const now = cal.rolling_coverage[cal.rolling_coverage.length - 1][i];
    const { verdict, noise } = judge(now, c, m);
    caption("rolling", verdict, [
      "The share of told results that fell inside the interval predicted at ask time, over the last",
      `${w} trials, so that it shows what the cumulative line averages away; ${intervalsOf(cal)}.`,
      `Good: the ${pct(c)} interval's line stays near its ${pct(c)} target; it is at ${pct(now)}`,
      `(${Math.round(now * m)} of the last ${m}), and over ${m} trials ${pctPoints(noise)} either way is ordinary scatter.`,
      `If it stays below ${pct(Math.max(0, c - noise))} for more than ${w} trials, look at the surrogate`,
      "status above for failed or lagging fits, and at whether the objective changed during the study",
      "(new data or code: start a new study).",
    ], { target: c, now, n: m, window: w });
  }

  function captionAlpha(cal, targets) {
    const i = widestPair(cal);
    const c = cal.nominal[i];
    const adapter = state.study.adaptive ? state.study.adaptive.adapter : null;
    const pairs = (state.study.adaptive && state.study.adaptive.pairs) || [];
    const now = pairs[i] ? pairs[i].alpha : cal.current_alpha[i];
    const t = targets[i];
    caption("alpha", null, [
      `The share of results each interval was allowed to miss (alpha) when each trial was asked; ${
        cal.nominal.length > 1 ? "one line per interval, each with its dashed target" : "dashed: its target"}.`,
      adapter === "none" ? "This study's adapter is none: the alphas stay at their targets."
        : `After a miss the ${adapter ? `${adapter.toUpperCase()} ` : ""}adapter lowers alpha, which widens the next`
          + " intervals; after a hit it raises it a little.",
      `Good: it wanders around its target; the ${pct(c)} interval's target is ${fmt(t, 3)}, and its alpha is`,
      `${fmt(now, 3)} now.`,
      now <= 0
        ? "At 0 or below, that interval is as wide as the model can make it and results still fall outside it:"
          + " the model's predictions are not to be trusted yet; see the rolling coverage for whether it recovers."
        : "Far below the target for long, calibo keeps widening the intervals to make up for misses (the rolling"
          + " coverage shows whether that worked); at 0 or below, the model's predictions are not to be trusted yet.",
    ], { target: t, now });
  }

  function captionObjectives(cal, objs) {
    const c = cal.nominal[0];
    const now = objs.map((o) => (o.cumulative_coverage.length
      ? o.cumulative_coverage[o.cumulative_coverage.length - 1][0] : null));
    const verdicts = objs.map((o, j) => (now[j] == null ? "early" : judge(now[j], c, o.n).verdict));
    const verdict = ["below", "early", "above", "on"].find((v) => verdicts.includes(v));
    // the objective the model predicts least well: the lowest coverage, where it is below the target
    const known = now.map((v, j) => [v, j]).filter(([v]) => v != null);
    const [low, worst] = known.length ? known.reduce((a, b) => (b[0] < a[0] ? b : a)) : [null, null];
    caption("objectives", verdict, [
      `The share of each objective's told results that fell inside its ${pct(c)} interval predicted at ask`,
      "time, over all its predicted trials; dashed: the target.",
      `Good: each line settles near ${pct(c)}; now ${objs.map((o, j) => `objective ${j} ${
        now[j] == null ? "—" : pct(now[j])}`).join(", ")}.`,
      low != null && low < c
        ? `Objective ${worst} is the one the model predicts least well (${pct(low)} against ${pct(c)}): its`
          + " intervals are too narrow, so trust its part of the suggestions less."
        : "No objective is below its target.",
    ], { target: c, now: now.join(","), ...(low != null && low < c ? { worst } : {}) });
  }

  function captionParams(trials, params, best, scrolls) {
    caption("params", null, [
      `Parallel coordinates of the ${trials} completed trials: one axis per parameter (${params}), the`,
      "objective last; each line is a trial, colored by its rank from",
      h("span", { class: "key worse" }, "worse"), "to", h("span", { class: "key better" }, "better"),
      "and", h("span", { class: "key lead" }, best > 1 ? `the ${best} best` : "the best"), "on top.",
      `Categorical axes list their choices; hover a name for all of it${scrolls ? "; scroll sideways for the rest of the axes" : ""}.`,
    ]);
  }

  // ---------------------------------------------------------- parallel coordinates
  // One vertical axis per parameter and the objective last, at least PC_SPACING px apart (past that the
  // chart scrolls sideways). The names stand above the axes in up to 3 staggered rows, each inside a cell
  // of its own, so that no two overlap; a name wider than its cell is cut with an ellipsis and shown whole
  // on hover. Lines on a canvas (hundreds of trials), axes and text in an SVG over it.
  const SVG_NS = "http://www.w3.org/2000/svg";
  const PC_SPACING = 64; // px at least between two axes
  const PC_ROW = 16; // px between two rows of names
  const PC_GAP = 8; // px at least between two names of a row
  const PC_TICK_GAP = 14; // px at least between two tick labels of an axis
  const PC_PLOT_HEIGHT = 230;
  const PC_BEST = 5; // trials highlighted, at most

  function svg(tag, attrs = {}, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) if (v != null) el.setAttribute(k, v);
    for (const c of children) if (c != null) el.append(c);
    return el;
  }

  // sets the text of the SVG text `el` to `text`, cut with an ellipsis to at most `max` px; its width
  function fitText(el, text, max) {
    el.textContent = text;
    if (el.getComputedTextLength() <= max) return el.getComputedTextLength();
    const chars = Array.from(text);
    let lo = 0, hi = chars.length - 1; // the longest prefix that fits with the ellipsis
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      el.textContent = `${chars.slice(0, mid).join("")}…`;
      if (el.getComputedTextLength() <= max) lo = mid;
      else hi = mid - 1;
    }
    el.textContent = `${chars.slice(0, lo).join("")}…`;
    return el.getComputedTextLength();
  }

  // the axes: position of a value in [0, 1] (NaN: the parameter is inactive), ticks, and what hover says
  function pcAxes(s, vmin, vmax) {
    const dims = Object.entries(s.space).map(([name, p]) => {
      if (p.type === "categorical" || p.type === "ordinal") {
        const n = p.choices.length;
        const at = (i) => (i < 0 ? NaN : n > 1 ? i / (n - 1) : 0.5);
        return {
          key: name, label: name, pos: (v) => at(p.choices.findIndex((c) => c === v)),
          ticks: p.choices.map((c, i) => [at(i), String(c)]), about: `${p.type}: ${p.choices.join(", ")}`,
        };
      }
      const log = p.log && p.low > 0;
      const f = log ? Math.log : (x) => x;
      const lo = f(p.low), hi = f(p.high);
      const tick = (v) => (p.type === "int" && Math.abs(v) < 1e6 ? String(v) : fmt(v));
      let mid = log ? Math.sqrt(p.low * p.high) : (p.low + p.high) / 2;
      if (p.type === "int") mid = Math.round(mid);
      return {
        key: name, label: log ? `${name} (log)` : name,
        pos: (v) => (v == null ? NaN : hi > lo ? (f(v) - lo) / (hi - lo) : 0.5),
        // the ends as they are (an int's exactly: 4096, not 4100), the middle rounded
        ticks: [[0, tick(p.low)], [(f(mid) - lo) / (hi - lo || 1), p.type === "int" ? tick(mid) : fmt(mid, 3)],
          [1, tick(p.high)]],
        about: `${p.type}${log ? ", log scale" : ""}: ${tick(p.low)} to ${tick(p.high)}`,
      };
    });
    const multi = Array.isArray(s.directions);
    const label = multi ? `objective 0 (${s.directions[0]})` : `value (${s.direction})`;
    dims.push({
      key: null, label, pos: (v) => (vmax > vmin ? (v - vmin) / (vmax - vmin) : 0.5),
      ticks: [[0, fmt(vmin)], [0.5, fmt((vmin + vmax) / 2)], [1, fmt(vmax)]],
      about: `${label}: ${fmt(vmin)} to ${fmt(vmax)} over the completed trials`,
    });
    return dims;
  }

  function drawParams() {
    const fig = figure("params");
    const wrap = $(".chart", fig);
    const s = state.study;
    // a multi-objective study's trials are ranked by their first objective
    const val = (t) => (Array.isArray(t.values) ? t.values[0] : t.value);
    const done = state.trials.filter((t) => t.state === "complete" && val(t) != null)
      .map((t) => ({ ...t, value: val(t) }));
    fig.dataset.points = done.length;
    if (!done.length) {
      fig.classList.add("empty");
      fig.pcSig = null;
      resetCaption("params");
      wrap.replaceChildren(h("p", { class: "nodata" }, "no completed trial yet"), h("canvas", { hidden: true }));
      return;
    }
    fig.classList.remove("empty");
    const n = Object.keys(s.space).length + 1;
    const pad = { left: 64, right: 80, bottom: 22 };
    const avail = chartSize(wrap).width;
    const spacing = n > 1 ? Math.max(PC_SPACING, (avail - pad.left - pad.right) / (n - 1)) : 0;
    const width = Math.max(avail, Math.ceil(pad.left + pad.right + spacing * (n - 1)));
    const sig = `${s.id}:${width}:${done.map((t) => `${t.id}/${t.value}`).join()}`;
    if (fig.pcSig === sig) return; // nothing new: keep the drawing (and a tooltip the reader is on)
    fig.pcSig = sig;

    let inner = $(".pc", wrap);
    if (!inner) {
      inner = h("div", { class: "pc" }, h("canvas"));
      inner.append(svg("svg", { class: "pc-text" }));
      wrap.replaceChildren(inner);
    }
    const canvas = $("canvas", inner);
    const layer = $("svg", inner);
    layer.replaceChildren();
    const values = done.map((t) => t.value);
    const vmin = minOf(values), vmax = maxOf(values);
    const dims = pcAxes(s, vmin, vmax);
    const xOf = (i) => pad.left + i * spacing;

    // the names: the fewest rows (1 to 3) in which each fits its cell, else 3 rows and cut names
    const names = dims.map((d) => svg("text", { class: "pc-name", "data-axis": d.key, "data-full": d.label,
      "data-objective": d.key == null ? "" : null }));
    layer.append(...names);
    const natural = names.map((el, i) => { el.textContent = dims[i].label; return el.getComputedTextLength(); });
    const cell = (i, rows) => [i - rows >= 0 ? (xOf(i - rows) + xOf(i)) / 2 + PC_GAP / 2 : 2,
      i + rows < n ? (xOf(i) + xOf(i + rows)) / 2 - PC_GAP / 2 : width - 2];
    let rows = 1;
    while (rows < 3 && natural.some((w, i) => { const [l, r] = cell(i, rows); return w > r - l; })) rows += 1;
    pad.top = 32 + (rows - 1) * PC_ROW;
    const height = pad.top + PC_PLOT_HEIGHT + pad.bottom;
    const yOf = (p) => pad.top + (1 - p) * PC_PLOT_HEIGHT;

    inner.style.width = `${width}px`;
    inner.style.height = `${height}px`;
    layer.setAttribute("width", width);
    layer.setAttribute("height", height);
    layer.setAttribute("viewBox", `0 0 ${width} ${height}`);
    fig.classList.toggle("scrolls", width > avail);
    Object.assign(fig.dataset, { axes: n, rows, scrolls: width > avail });

    // lines: the worst first, so that the better lie on top; the best few last, thick and orange
    const dpr = window.devicePixelRatio || 1;
    canvas.width = width * dpr;
    canvas.height = height * dpr;
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const sign = s.direction === "maximize" || (Array.isArray(s.directions) && s.directions[0] === "maximize") ? -1 : 1;
    const ranked = done.slice().sort((a, b) => sign * (b.value - a.value) || b.number - a.number);
    const best = Math.min(PC_BEST, Math.max(1, Math.floor(ranked.length / 10)));
    fig.dataset.best = best;
    const trace = (t) => {
      ctx.beginPath();
      let pen = false; // lifted across an inactive (conditional) parameter
      dims.forEach((d, i) => {
        const p = d.pos(d.key == null ? t.value : t.params[d.key]);
        if (Number.isNaN(p)) { pen = false; return; }
        const y = yOf(Math.min(1, Math.max(0, p)));
        if (pen) ctx.lineTo(xOf(i), y);
        else ctx.moveTo(xOf(i), y);
        pen = true;
      });
      ctx.stroke();
    };
    ctx.lineJoin = "round";
    ctx.lineCap = "round";
    ctx.globalAlpha = Math.min(0.8, Math.max(0.12, 0.8 * Math.sqrt(40 / ranked.length)));
    ctx.lineWidth = ranked.length > 300 ? 0.75 : 1;
    ranked.slice(0, ranked.length - best).forEach((t, r) => {
      ctx.strokeStyle = viridis(ranked.length > 1 ? r / (ranked.length - 1) : 1);
      trace(t);
    });
    ctx.globalAlpha = 1;
    ranked.slice(ranked.length - best).forEach((t, r) => {
      const top = r === best - 1;
      ctx.strokeStyle = "rgba(255, 255, 255, 0.9)";
      ctx.lineWidth = top ? 5 : 4;
      trace(t);
      ctx.strokeStyle = "#e8590c";
      ctx.lineWidth = top ? 3 : 2;
      trace(t);
    });

    // axes, and the tick labels left of each (right of the objective's), cut to the room there
    dims.forEach((d, i) => {
      const x = xOf(i);
      const last = i === n - 1;
      const room = last ? pad.right - 10 : i === 0 ? pad.left - 10 : spacing - 16;
      layer.append(svg("line", { class: "pc-axis", x1: x, x2: x, y1: pad.top, y2: pad.top + PC_PLOT_HEIGHT }));
      const every = Math.max(1, Math.ceil(PC_TICK_GAP / (PC_PLOT_HEIGHT / Math.max(1, d.ticks.length - 1))));
      d.ticks.filter((_, k) => k % every === 0).forEach(([p, label]) => {
        const y = yOf(p);
        const text = svg("text", { class: "pc-tick", x: last ? x + 6 : x - 6, y: y + 4,
          "text-anchor": last ? "start" : "end", "data-axis": d.key });
        layer.append(svg("line", { class: "pc-mark", x1: x - 3, x2: x + 3, y1: y, y2: y }), text);
        fitText(text, label, room);
        if (text.textContent !== label) text.append(svg("title", {}, label)); // cut: whole on hover
      });
    });

    // the names, each in its cell of its row; a leader from a raised name down to its axis
    names.forEach((el, i) => {
      const d = dims[i];
      const row = i % rows;
      const [left, right] = cell(i, rows);
      const w = fitText(el, d.label, right - left);
      const start = Math.min(Math.max(xOf(i) - w / 2, left), right - w);
      const y = pad.top - 14 - row * PC_ROW;
      el.setAttribute("x", start);
      el.setAttribute("y", y);
      el.append(svg("title", {}, `${d.label}\n${d.about}`));
      if (row > 0) layer.insertBefore(svg("line", { class: "pc-leader", x1: xOf(i), x2: xOf(i), y1: y + 3,
        y2: pad.top }), layer.firstChild);
    });

    captionParams(done.length, n - 1, best, width > avail);
  }

  // ------------------------------------------------------------ several objectives
  // the pairs of objectives the front can be shown on: (0, 1) for two, each pair for three or four
  function objectivePairs(m) {
    const out = [];
    for (let i = 0; i < m; i++) for (let j = i + 1; j < m; j++) out.push([i, j]);
    return out;
  }

  function drawPareto() {
    const fig = figure("pareto");
    const s = state.study;
    const m = s.directions.length;
    const select = $('[data-option="objectives"]', fig);
    const pairs = objectivePairs(m);
    if (select.options.length !== pairs.length) {
      select.replaceChildren(...pairs.map(([i, j], k) => h("option", { value: k }, `${i} × ${j}`)));
      select.closest("label").hidden = pairs.length < 2;
    }
    const [a, b] = pairs[Number(select.value) || 0];
    const done = state.trials.filter((t) => t.state === "complete" && Array.isArray(t.values));
    const ctx = canvasOf(fig, done.length, 280);
    if (!ctx) return;
    const { width, height } = ctx.size;
    const onFront = new Set(((state.pareto && state.pareto.trials) || []).map((t) => t.id));
    fig.dataset.front = onFront.size;
    const xs = done.map((t) => t.values[a]), ys = done.map((t) => t.values[b]);
    const pad = (lo, hi) => (hi > lo ? 0.05 * (hi - lo) : Math.abs(lo) * 0.05 || 1);
    const x0 = minOf(xs) - pad(minOf(xs), maxOf(xs)), x1 = maxOf(xs) + pad(minOf(xs), maxOf(xs));
    const y0 = minOf(ys) - pad(minOf(ys), maxOf(ys)), y1 = maxOf(ys) + pad(minOf(ys), maxOf(ys));
    const box = { left: 64, right: 16, top: 12, bottom: 40 };
    const X = (v) => box.left + ((v - x0) / (x1 - x0)) * (width - box.left - box.right);
    const Y = (v) => height - box.bottom - ((v - y0) / (y1 - y0)) * (height - box.top - box.bottom);
    ctx.strokeStyle = "#444";
    ctx.lineWidth = 1;
    ctx.strokeRect(box.left, box.top, width - box.left - box.right, height - box.top - box.bottom);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#444";
    for (const f of [0, 0.5, 1]) {
      const vx = x0 + f * (x1 - x0), vy = y0 + f * (y1 - y0);
      ctx.textAlign = "center";
      ctx.fillText(fmt(vx), X(vx), height - box.bottom + 14);
      ctx.textAlign = "right";
      ctx.fillText(fmt(vy), box.left - 6, Y(vy) + 4);
    }
    ctx.font = "600 12px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.fillText(`objective ${a} (${s.directions[a]})`, box.left + (width - box.left - box.right) / 2, height - 6);
    ctx.save();
    ctx.translate(14, box.top + (height - box.top - box.bottom) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(`objective ${b} (${s.directions[b]})`, 0, 0);
    ctx.restore();
    done.forEach((t) => {
      if (onFront.has(t.id)) return;
      ctx.fillStyle = t.feasible === false ? "rgba(214, 39, 40, 0.7)" : "rgba(31, 119, 180, 0.45)";
      ctx.beginPath();
      ctx.arc(X(t.values[a]), Y(t.values[b]), 3, 0, 2 * Math.PI);
      ctx.fill();
    });
    // the front's points on this pair, joined as the staircase they dominate (two objectives)
    const front = done.filter((t) => onFront.has(t.id)).sort((p, q) => p.values[a] - q.values[a]);
    if (m === 2 && front.length) {
      const pts = front;
      ctx.strokeStyle = "#e8590c";
      ctx.lineWidth = 2;
      ctx.beginPath();
      pts.forEach((t, i) => {
        if (i === 0) ctx.moveTo(X(t.values[a]), Y(t.values[b]));
        else {
          ctx.lineTo(X(t.values[a]), Y(pts[i - 1].values[b]));
          ctx.lineTo(X(t.values[a]), Y(t.values[b]));
        }
      });
      ctx.stroke();
    }
    ctx.fillStyle = "#e8590c";
    front.forEach((t) => {
      ctx.beginPath();
      ctx.arc(X(t.values[a]), Y(t.values[b]), 4.5, 0, 2 * Math.PI);
      ctx.fill();
    });
  }
  $('[data-plot="pareto"] [data-option="objectives"]').addEventListener("change", () => {
    if (state.study && state.study.directions) drawPareto();
  });

  function drawHypervolume() {
    const hist = (state.pareto && state.pareto.history) || [];
    if (!hist.length) return empty("hypervolume", "no completed trial yet");
    const ref = state.pareto.reference_point || [];
    chart("hypervolume", "hypervolume", hist.length, () => ({
      scales: { x: { time: false } },
      axes: axes("completed trials", "hypervolume"),
      series: [{ label: "trials" }, line("#e8590c", { label: `hypervolume (reference ${ref.map((v) => fmt(v)).join(", ")})`, width: 2.5 })],
    }), [hist.map((p) => p.trials), hist.map((p) => p.hypervolume)]);
  }

  function drawObjectiveCoverage() {
    const cal = state.calibration;
    const objs = (cal && cal.objectives) || [];
    const n = Math.max(0, ...objs.map((o) => o.cumulative_coverage.length));
    if (!n) {
      resetCaption("objectives");
      return empty("objectives", "no predicted trial told yet");
    }
    captionObjectives(cal, objs);
    const xs = Array.from({ length: n }, (_, i) => i + 1);
    const ys = objs.map((o) => xs.map((_, i) => (i < o.cumulative_coverage.length ? o.cumulative_coverage[i][0] : null)));
    const nominal = cal.nominal[0];
    chart("objectives", `objectives:${objs.length}`, n, () => ({
      scales: { x: { time: false }, y: { range: [0, 1] } },
      axes: axes("predicted trials", "coverage"),
      series: [{ label: "trial" }, ...objs.map((o, j) => line(COLORS[j % COLORS.length],
        { label: `objective ${j} (${o.direction}), nominal ${pct(nominal)}` }))],
      ...targets([nominal], ["#888"]),
    }), [xs, ...ys]);
  }

  // ------------------------------------------------------------------ resize
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      for (const [name, c] of Object.entries(charts)) c.u.setSize(chartSize($(".chart", figure(name))));
      if (state.study) drawParams();
      if (state.study && state.study.directions) drawPareto();
    }, 150);
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && !state.needToken) pollNow();
  });

  // -------------------------------------------------------------------- start
  $("#poll-seconds").textContent = fmt(POLL_MS / 1000, 3);
  $("#token-button").hidden = !state.token;
  selectFromHash();
  pollNow();
})();
