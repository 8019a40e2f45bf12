"""A model-based stateful test of the REST API, on SQLite and PostgreSQL, and races on one server.

``test_the_api_agrees_with_the_model`` drives a live server over HTTP with hypothesis's
``RuleBasedStateMachine``: rules create, copy and delete studies (names from a small pool, so they
collide: unicode, emoji, spaces, ``/``, ``%``, digits), ask, tell (extreme finite values too),
heartbeat (one study kind has a 1 s heartbeat timeout: its trials expire, and a rare rule sleeps past
it), enqueue (whole, partial, conditional), cancel waiting trials, add trials in batches (one bad
row stores nothing), and change study and trial user attributes. Each answer is compared with a
plain model (``tests/stateful_model.py``, no calibo import), and after every step an invariant reads
back what the step touched (study view, a page of trials, one trial, the study by name, calibration,
pareto, importance, curves, user_attr filters) and what every step may change (the study list,
/metrics): the dashboard polls the same routes.

A disagreement is recorded, not raised: the model is then re-read from the server for that study
and the run goes on, so one run lists every disagreement (the rule, the request, expected and
actual, the requests before it), and the test fails at the end if there is any; a 5xx is always
one. To shrink one to a minimal sequence of steps instead, set ``CALIBO_STATEFUL_STRICT=1`` (the first
disagreement raises and hypothesis shrinks; ``CALIBO_STATEFUL_IGNORE=sub1,sub2`` skips findings whose
signature contains one of these). ``CALIBO_STATEFUL_EXAMPLES`` / ``CALIBO_STATEFUL_STEPS`` change the
budget (default 50 examples of up to 40 steps: about 65 s on SQLite and 80 s on PostgreSQL on 2
cores), ``CALIBO_STATEFUL_SEED`` runs another (seeded) sequence than CI's derandomized one.

The race tests line threads up on a ``threading.Barrier``: 8 copies to one new name, creates and
copies of one name, enqueues of the same parameters with skip_if_exists, tells of one trial with
different values; a few rounds each, every failure of every round listed.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
import stateful_model as M
from conftest import BACKENDS, LiveServer, backend_server
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.errors import FlakyStrategyDefinition
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

pytestmark = [pytest.mark.live, pytest.mark.slow]

EXAMPLES = int(os.environ.get("CALIBO_STATEFUL_EXAMPLES", "50"))
STEPS = int(os.environ.get("CALIBO_STATEFUL_STEPS", "40"))
STRICT = os.environ.get("CALIBO_STATEFUL_STRICT") == "1"
IGNORE = [s for s in os.environ.get("CALIBO_STATEFUL_IGNORE", "").split(",") if s]
SEED = os.environ.get("CALIBO_STATEFUL_SEED")  # explore other sequences (CI runs the derandomized one)

# a few names often (collisions), every kind of name sometimes
CORE_NAMES = ["alpha", "研究-一", "a/b c", "🔥 study"]
NAMES = CORE_NAMES + ["beta", "x/../y", "100%", "%41", "A", "123", ".", "a?b#c&d=e", " lead and trail ",
                      "名" * 86, "名" * 255, "😀" * 64, "é" * 255]
NAME = st.one_of(st.sampled_from(CORE_NAMES), st.sampled_from(NAMES))
KIND = st.sampled_from([*M.KINDS, "hb"])  # hb twice: its trials expire
ATTRS = st.dictionaries(st.sampled_from(M.ATTR_KEYS), st.sampled_from(M.ATTR_VALUES), min_size=1, max_size=3)
MAYBE_ATTRS = st.none() | ATTRS
PICK = st.integers(0, 2**16)
OUTCOME = st.sampled_from(["value", "value", "value", "failed", "pruned", "pruned_value", "bad"])
VALUE = st.sampled_from(M.VALUES)
UNKNOWN_TRIAL = 2**31 - 1
MAX_SLEEPS = 8  # runs of the rule that sleeps past a heartbeat timeout (~1.2 s each)
MAX_FIT_WAITS = 8  # runs of the rule that waits for a fit on extreme values
FIT_KINDS = ["f2", "f1", "multi", "mixed", "constr", "cond"]
NOBODY = object()


# ------------------------------------------------------------------ findings
@dataclass
class Finding:
    sig: str
    rule: str
    request: str
    expected: str
    actual: str
    recent: list[str]
    count: int = 1
    steps: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"[{self.count}x] {self.sig}", f"    rule:     {self.rule}", f"    request:  {self.request}",
                 f"    expected: {self.expected}", f"    actual:   {self.actual}"]
        if self.recent:
            lines.append("    requests before it (this example):")
            lines += [f"      {r}" for r in self.recent]
        return "\n".join(lines)


class Recorder:
    """Every disagreement of one backend's run, by signature (the first occurrence in full)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.findings: dict[str, Finding] = {}
        self.notes: Counter[str] = Counter()
        self.examples = self.steps = self.requests = 0
        self.rules: Counter[str] = Counter()
        self.per_example: list[int] = []
        self.sleeps = self.fit_waits = 0
        self.events: Counter[str] = Counter()  # which situations the model predicted: what the run exercised
        self.t0 = time.monotonic()

    def add(self, sig: str, rule: str, request: str, expected: str, actual: str, recent: list[str]) -> None:
        f = self.findings.get(sig)
        if f is not None:
            f.count += 1
            return
        f = self.findings[sig] = Finding(sig, rule, request[:1500], expected[:1500], actual[:1500], recent)
        if STRICT and not any(i in sig for i in IGNORE):
            raise AssertionError(f.render())

    @property
    def five_xx(self) -> list[Finding]:
        return [f for f in self.findings.values() if f.sig.startswith("5xx")]

    def summary(self) -> str:
        n = sum(f.count for f in self.findings.values())
        return (f"stateful[{self.backend}]: {self.examples} examples, {self.steps} steps, {self.requests} requests "
                f"in {time.monotonic() - self.t0:.1f} s (steps per example {self.per_example}); "
                f"{len(self.findings)} distinct disagreements ({n} in all), "
                f"{len(self.five_xx)} of them 5xx ({sum(f.count for f in self.five_xx)} in all); rules run: "
                f"{dict(sorted(self.rules.items()))}; situations: {dict(sorted(self.events.items()))}; "
                f"notes: {dict(self.notes) or 'none'}")

    def report(self) -> str:
        out = [self.summary(), ""]
        for f in sorted(self.findings.values(), key=lambda f: (not f.sig.startswith("5xx"), f.sig)):
            out += [f.render(), ""]
        return "\n".join(out)


# ------------------------------------------------------------------ the state machine
def fields_of(diffs: list[str], label: str) -> list[str]:
    """The top-level fields ``json_diff``'s differences are about (for a finding's signature)."""
    out = set()
    for d in diffs:
        parts = d.split(": ", 1)[0].split(".")
        out.add(next((p for p in parts if p and p != label and not p.isdigit()), "(root)"))
    return sorted(out)


def path_of(name: str) -> str:
    return f"/v1/studies/{quote(name, safe='')}"


class ApiMachine(RuleBasedStateMachine):
    """The API against ``stateful_model``; ``server`` and ``rec`` are set by the test."""

    server: LiveServer
    rec: Recorder

    studies = Bundle("studies")  # model study ids (a deleted one stays: its requests answer 404)
    trials = Bundle("trials")  # (study id, trial id)

    def __init__(self) -> None:
        super().__init__()
        self.http = httpx.Client(base_url=self.server.url, timeout=60.0)
        self.model: dict[int, M.Study] = {}
        self.names: dict[str, int] = {}  # live studies by name
        self.accepted: set[str] = set()
        self.refused: set[str] = set()
        self.touched: set[int] = set()
        self.last_trial: dict[int, int] = {}
        self.dirty: set[int] = set()
        self.dirty_all = False
        self.recent: deque[str] = deque(maxlen=10)
        self.rule = "init"
        self.slept = self.fitted = False
        self.rec.examples += 1
        self.rec.per_example.append(0)

    def teardown(self) -> None:
        self.http.close()

    # -------------------------------------------------------------- plumbing
    def call(self, method: str, url: str, route: str, *, params: dict[str, Any] | None = None,
             body: Any = NOBODY) -> httpx.Response | None:
        self.rec.requests += 1
        desc = f"{method} {url}" + (f"?{urlencode(params, doseq=True)}" if params else "")
        if body is not NOBODY:
            desc += " " + json.dumps(body, ensure_ascii=False)
        self.desc = desc[:1200]
        try:
            r = self.http.request(method, url, params=params, json=None if body is NOBODY else body)
        except httpx.HTTPError as e:
            self.finding(f"no answer: {route}", "an answer", repr(e))
            self.dirty_all = True
            return None
        self.recent.append(f"{self.desc[:300]} -> {r.status_code}")
        if r.status_code >= 500:
            self.finding(f"5xx {r.status_code} on {route}", "not a 5xx", f"{r.status_code} {r.text[:600]}")
            self.dirty_all = True
        return r

    def finding(self, what: str, expected: str, actual: str, study: int | None = None) -> None:
        # a read-back finding is one whatever rule came before it (the finding's rule says which)
        where = "read back" if self.rule.startswith("after ") else self.rule
        sig = what if what.startswith(("5xx", "no answer")) else f"{where}: {what}"
        self.rec.add(sig, self.rule, getattr(self, "desc", ""), expected, actual, list(self.recent)[:-1])
        if study is not None:
            self.dirty.add(study)

    def expect(self, r: httpx.Response | None, want: int | tuple[int, ...], what: str, study: int | None = None,
               code: str | None = None, field: str | None = None, field_prefix: str | None = None) -> bool:
        """``r`` answers ``want`` (one of them; and an error body with ``code``/``field``); a finding
        otherwise."""
        if r is None or r.status_code >= 500:
            if study is not None:
                self.dirty.add(study)
            return False
        wants = want if isinstance(want, tuple) else (want,)
        if r.status_code not in wants:
            self.finding(f"{what}: expected {'/'.join(map(str, wants))}, got {r.status_code}", str(want),
                         f"{r.status_code} {r.text[:600]}", study)
            return False
        if r.status_code == 422 and isinstance(want, tuple):
            return True  # either error will do (two things wrong: which is reported first is the server's choice)
        if r.status_code >= 400 and (code or field or field_prefix):
            try:
                err = r.json()["error"]
            except Exception:  # noqa: BLE001 - an error body that is not the contract's is the finding
                self.finding(f"{what}: error body not the contract's", "{error: {code, message, field}}",
                             r.text[:600], study)
                return True
            if (code and err.get("code") != code) or (field and err.get("field") != field) or \
                    (field_prefix and not str(err.get("field")).startswith(field_prefix)):
                self.finding(f"{what}: error code/field", f"code={code} field={field or field_prefix + '...'}",
                             f"code={err.get('code')} field={err.get('field')} ({err.get('message')})", study)
        return True

    def compare(self, exp: Any, act: Any, where: str, study: M.Study, label: str = "") -> bool:
        """``act`` as the model says; content and key-order differences are findings apart, by field."""
        notes: list[str] = []
        content, order = M.json_diff(exp, act, label, notes)
        for n in notes:
            self.rec.notes[f"{where}: {fields_of([n], label)[0]} {n.split(': ', 1)[1]}"] += 1
        if content:
            self.finding(f"{where} [{study.kind}]: {', '.join(fields_of(content, label))} differ",
                         json.dumps(exp, default=str)[:1200], "; ".join(content)[:1200], study.id)
        if order:
            self.finding(f"{where} [{study.kind}]: key order of {', '.join(fields_of(order, label))}",
                         "keys in the order written", "; ".join(order)[:1200], study.id)
        return not content and not order

    def target(self, s: M.Study, by_name: bool) -> tuple[str, dict[str, str], M.Study | None]:
        """The path prefix, query and the study (in the model) a request for ``s`` reaches."""
        if by_name:
            params = {"by": "name"} if s.name.isdigit() else {}
            sid = self.names.get(s.name)
            return path_of(s.name), params, (self.model[sid] if sid is not None else None)
        return f"/v1/studies/{s.id}", {}, (None if s.deleted else s)

    def trial_of(self, sid: int, tid: int) -> tuple[M.Study, M.Trial | None]:
        s = self.model[sid]
        return s, s.trials.get(tid)

    def touch(self, s: M.Study | None, tid: int | None = None) -> None:
        if s is not None:
            self.touched.add(s.id)
            if tid is not None:
                self.last_trial[s.id] = tid

    def event(self, what: str) -> None:
        self.rec.events[what] += 1

    def begin(self, name: str) -> None:
        self.rule = name
        self.rec.rules[name] += 1
        self.rec.steps += 1
        self.rec.per_example[-1] += 1

    # -------------------------------------------------------------- resync after a disagreement
    def resync_all(self) -> None:
        r = self.call("GET", "/v1/studies", "GET /v1/studies", params={"limit": 1000})
        if r is None or r.status_code != 200:
            return
        live = {s["id"]: s for s in r.json()["studies"]}
        for s in self.model.values():
            if not s.deleted and s.id not in live:
                self.forget(s)
        for sid in live:
            if sid not in self.model or self.model[sid].deleted:
                self.dirty.add(sid)
            elif self.model[sid].name != live[sid]["name"]:
                self.dirty.add(sid)
        self.dirty_all = False

    def forget(self, s: M.Study) -> None:
        s.deleted = True
        if self.names.get(s.name) == s.id:
            del self.names[s.name]

    def resync(self, sid: int) -> None:
        """The model of study ``sid`` re-read from the server (after a disagreement about it)."""
        r = self.call("GET", f"/v1/studies/{sid}", "GET /v1/studies/{s}")
        if r is None or r.status_code >= 500:
            return
        if r.status_code == 404:
            if sid in self.model:
                self.forget(self.model[sid])
            return
        view = r.json()
        s = self.model.get(sid)
        if s is None:
            kind = next((k for k in M.KINDS if M.create_body(view["name"], k)["space"] == view["space"]
                         and view.get("directions") == M.KINDS[k].get("directions")
                         and view.get("constraints", []) == M.KINDS[k].get("constraints", [])
                         and view["settings"].get("heartbeat_timeout_seconds")
                         == M.KINDS[k].get("settings", {}).get("heartbeat_timeout_seconds")), None)
            if kind is None:
                return
            s = self.model[sid] = M.Study(sid, view["name"], kind)
        s.deleted = False
        if self.names.get(s.name) == sid and s.name != view["name"]:
            del self.names[s.name]
        s.name = view["name"]
        self.names[s.name] = sid
        s.user_attrs = view["user_attrs"]
        s.best_id = (view["best_trial"] or {}).get("id")
        r = self.call("GET", f"/v1/studies/{sid}/trials", "GET /v1/studies/{s}/trials", params={"limit": 1000})
        if r is None or r.status_code != 200:
            return
        trials: dict[int, M.Trial] = {}
        for tv in r.json()["trials"]:
            t = s.trials.get(tv["id"]) or M.Trial(tv["id"], tv["number"], tv["state"], tv["params"], tv["origin"])
            if tv["id"] not in s.trials and tv["state"] in M.FINISHED:
                s.finish_seq += 1
                t.finish_seq = s.finish_seq
            t.number, t.state, t.params, t.origin = tv["number"], tv["state"], tv["params"], tv["origin"]
            t.values, t.constraints, t.user_attrs = tv["values"], tv["constraints"], tv["user_attrs"]
            t.value = tv["values"][0] if tv["values"] else tv["value"]
            t.expired = t.expired and t.state == "failed"
            if t.state == "running":
                hb = datetime.fromisoformat(tv["heartbeat_at"] or tv["asked_at"]).timestamp()
                t.alive = (hb, hb)
            else:
                t.alive = None
            trials[t.id] = t
        s.trials = dict(sorted(trials.items(), key=lambda kv: kv[1].number))
        s.next_number = max([s.next_number] + [t.number + 1 for t in s.trials.values()])

    # -------------------------------------------------------------- expiry of running trials
    def expire(self, s: M.Study, t: M.Trial) -> None:
        s.finish(t, "failed")
        t.expired = True

    def reaped(self, s: M.Study, trials: list[M.Trial], window: tuple[float, float]) -> None:
        """``trials`` (running) were looked at by an event that fails the stale ones (an ask of the
        study): stale ones expired, ones too close to call read back from the server."""
        timeout = M.heartbeat_timeout(s.kind)
        for t in trials:
            if t.state != "running" or t.alive is None:
                continue
            verdict = M.staleness(t.alive, window, timeout)
            if verdict == "stale":
                self.event("ask: expires a silent trial")
                self.expire(s, t)
            elif verdict == "maybe":
                self.event("ask: a trial near its timeout (read back)")
                r = self.call("GET", f"/v1/studies/{s.id}/trials/{t.id}", "GET /v1/studies/{s}/trials/{t}")
                if r is not None and r.status_code == 200 and r.json()["state"] == "failed":
                    self.expire(s, t)

    # -------------------------------------------------------------- rules
    @initialize(target=studies, name=NAME, kind=KIND)
    def start_empty(self, name: str, kind: str) -> Any:
        """Every example starts on an empty server (the server lives for the module), then creates a
        first study (the rules that need one can run even where hypothesis leaves create out)."""
        self.begin("init")
        r = self.call("GET", "/v1/studies", "GET /v1/studies", params={"limit": 1000})
        assert r is not None and r.status_code == 200, r and r.text
        for s in r.json()["studies"]:
            d = self.call("DELETE", f"/v1/studies/{s['id']}", "DELETE /v1/studies/{s}")
            assert d is not None and d.status_code == 204, d and d.text
        r = self.call("GET", "/v1/studies", "GET /v1/studies", params={"limit": 1000})
        assert r is not None and r.json()["studies"] == [], r.text
        r = self.call("GET", "/dashboard", "GET /dashboard")
        self.expect(r, 200, "dashboard page")
        return self.create_study(name, kind, None)

    @rule(target=studies, name=NAME, kind=KIND, attrs=MAYBE_ATTRS)
    def create_study(self, name: str, kind: str, attrs: dict[str, Any] | None) -> Any:
        self.begin("create")
        r = self.call("POST", "/v1/studies", "POST /v1/studies", body=M.create_body(name, kind, attrs))
        if r is None or r.status_code >= 500:
            return multiple()
        sid = self.names.get(name)
        if sid is not None:
            s = self.model[sid]
            self.touch(s)
            if s.kind == kind:
                self.event("create: same name and definition (200)")
                if self.expect(r, 200, "same name and definition (idempotent)", sid):
                    s.user_attrs = {**s.user_attrs, **(attrs or {})}
                    self.check_view(r.json(), s, "idempotent create's answer")
            else:
                self.event("create: same name, another definition (409)")
                self.expect(r, 409, "same name, another definition", sid, code="name_conflict", field="name")
            return multiple()
        if name in self.refused:
            self.event("create: a refused name (422)")
            self.expect(r, 422, "a name refused before", field="name")
            return multiple()
        if r.status_code == 422 and r.json().get("error", {}).get("field") == "name":
            if name in self.accepted:
                self.finding("a name accepted before is refused now", "201", r.text[:400])
            self.refused.add(name)
            self.rec.notes[f"name refused: {name[:12]!r} ({len(name)} chars)"] += 1
            return multiple()
        self.event("create: a new name (201)")
        if not self.expect(r, 201, "a new name"):
            self.dirty_all = True
            return multiple()
        view = r.json()
        self.event(f"create: accepted name {name if len(name) < 20 else name[0] + ' x' + str(len(name))!r}")
        s = self.model[view["id"]] = M.Study(view["id"], name, kind, user_attrs=dict(attrs or {}))
        self.names[name] = s.id
        self.accepted.add(name)
        self.touch(s)
        self.check_view(view, s, "create's answer")
        return s.id

    @rule(target=studies, src=studies, name=NAME, attrs=MAYBE_ATTRS, by_name=st.booleans())
    def copy_study(self, src: int, name: str, attrs: dict[str, Any] | None, by_name: bool) -> Any:
        self.begin("copy")
        prefix, params, tgt = self.target(self.model[src], by_name)
        body = {"name": name, **({"user_attrs": attrs} if attrs is not None else {})}
        r = self.call("POST", f"{prefix}/copy", "POST /v1/studies/{s}/copy", params=params, body=body)
        self.touch(tgt)
        if tgt is None:
            self.expect(r, 404, "copy of an unknown study", code="not_found")
            return multiple()
        if r is None or r.status_code >= 500:
            return multiple()
        if name in self.names:
            self.event("copy: to an existing name (409)")
            self.expect(r, 409, "copy to an existing name", tgt.id, code="name_conflict", field="name")
            return multiple()
        if name in self.refused:
            self.expect(r, 422, "copy to a name create refuses", field="name")
            return multiple()
        if r.status_code == 422 and r.json().get("error", {}).get("field") == "name":
            if name in self.accepted:
                self.finding("copy refuses a name create accepted", "201", r.text[:400])
            self.refused.add(name)
            return multiple()
        self.event("copy: to a new name (201)")
        if not self.expect(r, 201, "copy to a new name", tgt.id):
            self.dirty_all = True
            return multiple()
        view = r.json()
        c = self.model[view["id"]] = M.Study(view["id"], name, tgt.kind, user_attrs=dict(attrs or {}))
        self.names[name] = c.id
        self.accepted.add(name)
        self.touch(c)
        # the copy's trials: the source's finished ones, by number, renumbered from 0
        r = self.call("GET", f"/v1/studies/{c.id}/trials", "GET /v1/studies/{s}/trials", params={"limit": 1000})
        if not self.expect(r, 200, "the copy's trials", c.id):
            return c.id
        got = r.json()["trials"]
        source = [t for t in tgt.trials.values() if t.state in M.FINISHED]
        if source:
            self.event("copy: with finished trials")
        if len(got) != len(source):
            self.finding(f"copy holds {'more' if len(got) > len(source) else 'fewer'} trials than the source "
                         "has finished", f"{len(source)} trials", f"{len(got)}: {[g['number'] for g in got]}", c.id)
            return c.id
        for t, g in zip(source, got, strict=True):
            n = c.new_trial(g["id"], "running", {}, "copied", user_attrs={})
            n.params = t.params
            c.finish(n, t.state, None if t.values else t.value, t.values, t.constraints, t.user_attrs)
        self.check_trials(got, c, "the copy's trials")
        self.check_view(view, c, "copy's answer")
        return c.id

    @rule(target=trials, study=studies, count=st.integers(1, 3), attrs=MAYBE_ATTRS, by_name=st.booleans())
    def ask(self, study: int, count: int, attrs: dict[str, Any] | None, by_name: bool) -> Any:
        self.begin("ask")
        return multiple(*self.do_ask(self.model[study], count, attrs, by_name))

    def do_ask(self, s0: M.Study, count: int, attrs: dict[str, Any] | None, by_name: bool) -> list[tuple[int, int]]:
        """An ask checked against the model; the (study, trial) it handed out."""
        prefix, params, s = self.target(s0, by_name)
        body: dict[str, Any] = {"count": count, **({"user_attrs": attrs} if attrs is not None else {})}
        sent = time.time()
        r = self.call("POST", f"{prefix}/ask", "POST /v1/studies/{s}/ask", params=params, body=body)
        window = (sent, time.time())
        self.touch(s)
        if s is None:
            self.expect(r, 404, "ask of an unknown study", code="not_found")
            return []
        if not self.expect(r, 200, "ask", s.id):
            return []
        got = r.json()["trials"]
        for w in s.evaluated_since():  # before the reaping: the ask looks at its queue first
            self.event("ask: drops a waiting trial whose params finished since")
            del s.trials[w.id]
        self.reaped(s, [t for t in s.trials.values() if t.state == "running"], window)
        queued = s.waiting()[:count]
        if len(got) != count:
            self.finding("ask answers another number of trials", f"{count}", f"{len(got)}", s.id)
            return []
        out = []
        for i, a in enumerate(got):
            exp_attrs: dict[str, Any]
            if i < len(queued):
                w = queued[i]
                self.event("ask: hands out an enqueued trial" + ("" if M.full_params_problems(s.space, w.params)
                                                                 else " (whole params)"))
                if a.get("id") != w.id or a.get("origin") != "enqueued":
                    self.finding("ask does not hand out the oldest enqueued trial first",
                                 f"trial {w.id} (number {w.number}, origin enqueued)",
                                 f"trial {a.get('id')} (number {a.get('number')}, origin {a.get('origin')})", s.id)
                    return []
                fixed = w.params
                missing = {k: v for k, v in fixed.items() if a["params"].get(k) != v}
                if missing:
                    self.finding("an enqueued trial is handed out with other parameters", json.dumps(fixed),
                                 json.dumps(a["params"]), s.id)
                w.state, w.params, w.alive = "running", a["params"], window
                w.user_attrs = {**w.user_attrs, **(attrs or {})}
                t, exp_attrs = w, w.user_attrs
            else:
                if a.get("id") in s.trials or a.get("number") != s.next_number or "origin" in a:
                    self.finding("a new asked trial: id, number or origin", f"a new id, number {s.next_number}",
                                 f"id {a.get('id')}, number {a.get('number')}, origin {a.get('origin')}", s.id)
                    return []
                self.event("ask: a new trial")
                t = s.new_trial(a["id"], "running", a["params"], "asked", user_attrs=dict(attrs or {}),
                                alive=window)
                exp_attrs = t.user_attrs
            problems = M.full_params_problems(s.space, a["params"])
            if problems:
                self.finding("ask answers params outside the space", "the active parameters, in range",
                             "; ".join(problems), s.id)
            order = M.order_problem(s.space, a["params"])
            if order:
                self.finding(f"ask's params key order [{s.kind}]", "the space's order", order, s.id)
            if a.get("study_id") != s.id or (a.get("user_attrs") or {}) != exp_attrs:
                self.finding("ask's trial: study_id or user_attrs", json.dumps({"study_id": s.id,
                             "user_attrs": exp_attrs}), json.dumps({k: a.get(k) for k in ("study_id", "user_attrs")}),
                             s.id)
            out.append((s.id, t.id))
            self.touch(s, t.id)
        return out

    def tell_body(self, s: M.Study, outcome: str, v: float, v2: float, c: float,
                  attrs: dict[str, Any] | None) -> dict[str, Any]:
        """A tell's body (``bad``: one the study refuses)."""
        if outcome == "failed":
            body: dict[str, Any] = {"state": "failed"}
        elif outcome == "pruned" or (outcome == "pruned_value" and s.multi):
            body = {"state": "pruned"}
        elif outcome == "pruned_value":
            body = {"state": "pruned", "value": v}
        elif outcome == "bad":
            body = {"value": v} if s.multi else {"values": [v, v2]}
        else:
            body = {"values": [v, v2]} if s.multi else {"value": v}
            if s.constrained:
                body["constraints"] = [c]
        if attrs is not None:
            body["user_attrs"] = attrs
        return body

    def told(self, s: M.Study, t: M.Trial) -> dict[str, Any]:
        """The body of the tell that finished ``t`` as it stands (a repeat of it changes nothing)."""
        body: dict[str, Any] = {"state": t.state}
        if t.values is not None:
            body["values"] = t.values
        elif t.value is not None:
            body["value"] = t.value
        if t.constraints is not None:
            body["constraints"] = t.constraints
        return body

    def do_tell(self, s0: M.Study, tid: int, body: dict[str, Any], by_name: bool,
                what: str) -> None:
        prefix, params, s = self.target(s0, by_name)
        r = self.call("POST", f"{prefix}/trials/{tid}/tell", "POST /v1/studies/{s}/trials/{t}/tell",
                      params=params, body=body)
        self.touch(s, tid)
        if s is None:
            self.expect(r, 404, f"{what}: unknown study", code="not_found")
            return
        bad = M.tell_problem(s, body)  # of the study the request reaches (by name: maybe another)
        if bad is not None:
            self.event(f"tell: an invalid body ({bad}) (422)")
            self.expect(r, 422, f"{what}: invalid body", s.id, field=bad)
            return
        t = s.trials.get(tid)
        if t is None:
            self.expect(r, 404, f"{what}: trial of another study", s.id, code="not_found", field="trial_id")
            return
        state = body.get("state", "complete")
        value = body["values"][0] if "values" in body else body.get("value")
        attrs = body.get("user_attrs")
        if t.state == "waiting":
            self.event("tell: an enqueued trial (409)")
            self.expect(r, 409, f"{what}: an enqueued trial", s.id, code="trial_waiting")
            return
        if t.state == "running" or (t.expired and state != "failed"):
            self.event(f"tell: {'late, of an expired trial' if t.expired else 'a running trial'} ({state})")
            if value is not None and (abs(value) > 1e300 or 0 < abs(value) < 1e-300 or
                                      math.copysign(1, value) < 0 and value == 0):
                self.event(f"tell: an extreme value [{s.kind}]")
            if self.expect(r, 200, f"{what}: a {'late tell of an expired' if t.expired else 'running'} trial",
                           s.id):
                s.finish(t, state, None if "values" in body else body.get("value"), body.get("values"),
                         body.get("constraints"), attrs)
                self.check_trial(r.json(), t, s, f"{what}'s answer")
            return
        if t.expired:  # told failed after it expired: recorded already, changes nothing
            self.event("tell: failed, of an expired trial")
            if self.expect(r, 200, f"{what}: failed, of an expired trial", s.id):
                self.check_trial(r.json(), t, s, f"{what}'s answer")
            return
        same = t.state == state and ((t.value is None and value is None) or (
            t.value is not None and value is not None and t.value == value)) and \
            ("constraints" not in body or body["constraints"] == t.constraints) and \
            ("values" not in body or body["values"] == t.values)
        if not same:
            self.event("tell: a different tell of a finished trial (409)")
            self.expect(r, 409, f"{what}: a different tell of a finished trial", s.id, code="trial_finished")
        elif attrs and {**t.user_attrs, **attrs} != t.user_attrs:
            self.event("tell: the same tell with other user_attrs (409)")
            self.expect(r, 409, f"{what}: the same tell with other user_attrs", s.id, field="user_attrs")
        else:
            self.event("tell: the same tell again (200)")
            if self.expect(r, 200, f"{what}: the same tell again", s.id):
                self.check_trial(r.json(), t, s, f"{what}'s answer (unchanged)")

    @rule(trial=trials, outcome=OUTCOME, v=VALUE, v2=VALUE, c=st.sampled_from(M.CONSTRAINT_VALUES),
          attrs=MAYBE_ATTRS, by_name=st.booleans())
    def tell(self, trial: tuple[int, int], outcome: str, v: float, v2: float, c: float,
             attrs: dict[str, Any] | None, by_name: bool) -> None:
        """A tell of any trial the run made (waiting, running, finished, of a deleted study...)."""
        self.begin("tell")
        s = self.model[trial[0]]
        body = self.tell_body(s, outcome, v, v2, c, attrs)
        self.do_tell(s, trial[1], body, by_name, "tell")

    def live(self, pick: Any) -> list[tuple[int, int]]:
        """(study, trial) of the live studies' trials ``pick(trial)`` holds for."""
        return [(s.id, t.id) for s in self.model.values() if not s.deleted for t in s.trials.values() if pick(t)]

    # Rules that pick from the model's state draw an index (PICK) rather than sampling the list, and
    # have no precondition on it: what hypothesis draws must not depend on the server's answers
    # (ids, timing), or replaying a prefix draws differently (FlakyStrategyDefinition).
    @rule(pick=PICK, outcome=OUTCOME, v=VALUE, v2=VALUE, c=st.sampled_from(M.CONSTRAINT_VALUES),
          attrs=MAYBE_ATTRS, by_name=st.booleans())
    def tell_running(self, pick: int, outcome: str, v: float, v2: float, c: float,
                     attrs: dict[str, Any] | None, by_name: bool) -> None:
        """A tell of a running (or expired) trial: the usual case, picked from the model's state."""
        self.begin("tell running")
        live = self.live(lambda t: t.state == "running" or t.expired)
        if not live:
            return
        sid, tid = live[pick % len(live)]
        body = self.tell_body(self.model[sid], outcome, v, v2, c, attrs)
        self.do_tell(self.model[sid], tid, body, by_name, "tell running")

    @rule(study=studies, vs=st.lists(VALUE, min_size=1, max_size=6), c=st.sampled_from(M.CONSTRAINT_VALUES),
          by_name=st.booleans())
    def tell_all_running(self, study: int, vs: list[float], c: float, by_name: bool) -> None:
        """Every running trial of a study completed (a pool of workers finishing): values pile up, so
        fits run and extreme values reach them, in every kind of space."""
        self.begin("tell all running")
        s = self.model[study]
        running = [t for t in s.trials.values() if t.state == "running"] if not s.deleted else []
        for i, t in enumerate(running):
            v, v2 = vs[i % len(vs)], vs[(i + 1) % len(vs)]
            body: dict[str, Any] = {"values": [v, v2]} if s.multi else {"value": v}
            if s.constrained:
                body["constraints"] = [c]
            self.do_tell(s, t.id, body, by_name, "tell all running")

    @rule(pick=PICK, mode=st.sampled_from(["same", "same", "other_attrs", "other_value", "other_state"]),
          by_name=st.booleans())
    def tell_again(self, pick: int, mode: str, by_name: bool) -> None:
        """A finished trial told again: the same tell (200, nothing changes), the same with user_attrs
        it does not have (409 naming user_attrs), another value or state (409)."""
        self.begin("tell again")
        live = self.live(lambda t: t.state in M.FINISHED and not t.expired)
        if not live:
            return
        s, t = self.trial_of(*live[pick % len(live)])
        body = self.told(s, t)
        if mode == "other_attrs":
            body["user_attrs"] = {"run": f"other-{t.number}-{len(t.user_attrs)}", "zz": [len(t.user_attrs)]}
        elif mode == "other_value" and t.state == "complete":
            if "values" in body:
                body["values"] = [body["values"][0] + 1.5 if abs(body["values"][0]) < 1e300 else 0.5,
                                  body["values"][1]]
            else:
                body["value"] = body["value"] + 1.5 if abs(body["value"]) < 1e300 else 0.5
        elif mode == "other_state":
            body = {"state": "pruned"} if t.state == "failed" else {"state": "failed"}
        self.do_tell(s, t.id, body, by_name, f"tell again ({mode})")

    @rule(trial=trials, by_name=st.booleans())
    def heartbeat(self, trial: tuple[int, int], by_name: bool) -> None:
        self.begin("heartbeat")
        prefix, params, s = self.target(self.model[trial[0]], by_name)
        sent = time.time()
        r = self.call("POST", f"{prefix}/trials/{trial[1]}/heartbeat", "POST /v1/studies/{s}/trials/{t}/heartbeat",
                      params=params)
        window = (sent, time.time())
        self.touch(s, trial[1])
        if s is None:
            self.expect(r, 404, "heartbeat: unknown study", code="not_found")
            return
        t = s.trials.get(trial[1])
        if t is None:
            self.expect(r, 404, "heartbeat: trial of another study", s.id, code="not_found")
        elif t.state == "waiting":
            self.expect(r, 409, "heartbeat: an enqueued trial", s.id)
        elif t.expired:
            self.event("heartbeat: an expired trial (409)")
            self.expect(r, 409, "heartbeat: an expired trial", s.id, code="trial_expired")
        elif t.state != "running":
            self.event("heartbeat: a finished trial (409)")
            self.expect(r, 409, "heartbeat: a finished trial", s.id, code="trial_finished")
        else:
            verdict = M.staleness(t.alive, window, M.heartbeat_timeout(s.kind)) if t.alive else "alive"
            if verdict == "maybe" and r is not None:
                verdict = "stale" if r.status_code == 409 else "alive"
            self.event(f"heartbeat: running, {verdict}")
            if verdict == "stale":
                if self.expect(r, 409, "heartbeat: past the timeout", s.id, code="trial_expired"):
                    self.expire(s, t)
            elif self.expect(r, 204, "heartbeat: a running trial", s.id):
                t.alive = window

    @rule(via=st.sampled_from(["heartbeat", "ask"]))
    def outlive_the_heartbeat(self, via: str) -> None:
        """Rarely (once an example, a few times a run): a running trial of a study with a 1 s heartbeat
        timeout stays silent past it. The next heartbeat or ask of the study expires it (the heartbeat
        answers 409 trial_expired), it reads back failed, and a late tell is still recorded (200,
        complete); the invariant then reads calibration and /metrics."""
        if self.slept or self.rec.sleeps >= MAX_SLEEPS or \
                not any(not s.deleted and s.kind == "hb" for s in self.model.values()):
            return
        self.begin("outlive the heartbeat")
        self.slept = True
        self.rec.sleeps += 1
        s = next(s for s in self.model.values() if not s.deleted and s.kind == "hb")
        self.touch(s)
        running = [t for t in s.trials.values() if t.state == "running"]
        if not running:
            handed = self.do_ask(s, 1, None, False)
            running = [s.trials[tid] for _, tid in handed if tid in s.trials and s.trials[tid].state == "running"]
            if not running:
                return
        t = running[0]
        self.event(f"outlive the heartbeat: slept past it, then {via}")
        time.sleep(max(0.0, t.alive[1] + M.HEARTBEAT_S + 0.2 - time.time()))
        self.touch(s, t.id)
        if via == "ask":
            self.do_ask(s, 1, None, False)  # fails the silent trials (the model: expired)
        r = self.call("POST", f"/v1/studies/{s.id}/trials/{t.id}/heartbeat",
                      "POST /v1/studies/{s}/trials/{t}/heartbeat")
        if not self.expect(r, 409, "heartbeat past the timeout", s.id, code="trial_expired"):
            return
        self.expire(s, t)
        r = self.call("GET", f"/v1/studies/{s.id}/trials/{t.id}", "GET /v1/studies/{s}/trials/{t}")
        if self.expect(r, 200, "an expired trial", s.id):
            self.check_trial(r.json(), t, s, "an expired trial")
        self.do_tell(s, t.id, {"value": 0.25}, False, "late tell")
        self.do_tell(s, t.id, {"value": 0.25}, False, "late tell repeated")

    @rule(target=trials, study=studies, data=st.data(), skip=st.booleans(), attrs=MAYBE_ATTRS,
          by_name=st.booleans())
    def enqueue(self, study: int, data: st.DataObject, skip: bool, attrs: dict[str, Any] | None,
                by_name: bool) -> Any:
        self.begin("enqueue")
        s0 = self.model[study]
        space = s0.space
        modes = ["full", "full", "partial", "partial", "reversed", "bad_value", "unknown"]
        if s0.kind == "cond":  # a conditional child alone, with its parent, with a parent that leaves it inactive
            modes += ["child_alone", "child_alone", "child_with_parent", "child_with_parent", "child_inactive"]
        mode = data.draw(st.sampled_from(modes), label="mode")
        params = self.draw_params(data, space)
        if mode == "partial" and len(params) > 1:
            keys = data.draw(st.lists(st.sampled_from(list(params)), min_size=1, max_size=len(params) - 1,
                                      unique=True), label="kept")
            params = {k: params[k] for k in params if k in keys}
        elif mode == "reversed":
            params = dict(reversed(list(params.items())))
        elif mode == "bad_value":
            k = data.draw(st.sampled_from(list(params)), label="bad key")
            params[k] = M.BAD_VALUE[k]
        elif mode == "unknown":
            params["nope"] = 1.0
        elif mode == "child_alone":
            params = {"z": 0.5}
        elif mode == "child_with_parent":
            params = {"kind": "b", "z": 0.5}
        elif mode == "child_inactive":
            params = {"kind": "a", "z": 0.5}
        out = self.do_enqueue(s0, params, skip, attrs, by_name, mode)
        return multiple() if out is None else out

    def do_enqueue(self, s0: M.Study, params: dict[str, Any], skip: bool, attrs: dict[str, Any] | None,
                   by_name: bool, mode: str) -> tuple[int, int] | None:
        """An enqueue checked against the model; the (study, trial) it answered."""
        body: dict[str, Any] = {"params": params, "skip_if_exists": skip}
        if attrs is not None:
            body["user_attrs"] = attrs
        prefix, qp, s = self.target(s0, by_name)
        r = self.call("POST", f"{prefix}/enqueue", "POST /v1/studies/{s}/enqueue", params=qp, body=body)
        self.touch(s)
        if s is None:
            self.expect(r, 404, "enqueue: unknown study", code="not_found")
            return None
        bad = M.partial_problem(s.space, params)  # of the study the request reaches (by name: maybe another)
        self.event(f"enqueue: {mode}{' refused' if bad else ''}{' [cond]' if s.kind == 'cond' else ''}")
        if bad is not None:
            self.expect(r, 422, f"enqueue ({mode}) refused", s.id, field=bad)
            return None
        match = s.skip_match(params) if skip else None
        if match is not None:
            self.event(f"enqueue: skipped, an existing {match.state} trial (200)")
            if self.expect(r, 200, f"enqueue ({mode}) with skip_if_exists of existing params", s.id):
                a = r.json()
                self.touch(s, match.id)
                self.compare({"id": match.id, "number": match.number, "params": match.params, "state": match.state,
                              "origin": match.origin, "user_attrs": match.user_attrs},
                             {k: a.get(k) for k in ("id", "number", "params", "state", "origin", "user_attrs")},
                             "enqueue's answer (skipped)", s)
            return (s.id, match.id)
        if not self.expect(r, 201, f"enqueue ({mode})", s.id):
            return None
        a = r.json()
        if a.get("id") in s.trials:
            self.finding("enqueue answers an existing trial with 201", "a new trial", json.dumps(a), s.id)
            return None
        t = s.new_trial(a["id"], "waiting", M.in_space_order(s.space, params), "enqueued",
                        user_attrs=dict(attrs or {}), skip=skip and not M.full_params_problems(s.space, params))
        self.touch(s, t.id)
        self.compare({"id": t.id, "number": t.number, "params": t.params, "state": "waiting", "origin": "enqueued",
                      "user_attrs": t.user_attrs},
                     {k: a.get(k) for k in ("id", "number", "params", "state", "origin", "user_attrs")},
                     "enqueue's answer", s)
        return (s.id, t.id)

    @rule(mode=st.sampled_from(["child_alone", "child_with_parent", "child_inactive", "parent_only"]),
          skip=st.booleans())
    def enqueue_conditional(self, mode: str, skip: bool) -> None:
        """In the conditional space: a child without its parent (422 naming params.z), with a parent
        value that leaves it inactive (422), with its parent (201); then an ask, which a queued
        configuration must not block."""
        self.begin("enqueue conditional")
        s = next((s for s in self.model.values() if not s.deleted and s.kind == "cond"), None)
        if s is None:
            r = self.call("POST", "/v1/studies", "POST /v1/studies", body=M.create_body("cond-study", "cond"))
            if not self.expect(r, 201, "create a conditional study"):
                return
            s = self.model[r.json()["id"]] = M.Study(r.json()["id"], "cond-study", "cond")
            self.names[s.name] = s.id
        params = {"child_alone": {"z": 0.5}, "child_with_parent": {"kind": "b", "z": 0.5},
                  "child_inactive": {"kind": "a", "z": 0.5}, "parent_only": {"kind": "b"}}[mode]
        self.do_enqueue(s, params, skip, None, False, mode)
        self.do_ask(s, 1, None, False)

    def draw_params(self, data: st.DataObject, space: dict[str, Any]) -> dict[str, Any]:
        """A whole configuration (the active parameters, in the space's order) from the value pools."""
        out: dict[str, Any] = {}
        for k in space:  # parents come before their children
            if k in M.active_keys(space, out):
                out[k] = data.draw(st.sampled_from(M.PARAM_POOL[k]), label=k)
        return out

    @rule(trial=trials, unknown=st.booleans(), by_name=st.booleans())
    def cancel(self, trial: tuple[int, int], unknown: bool, by_name: bool) -> None:
        """DELETE a trial: a waiting (enqueued) one is removed (204); one handed out answers 409, an
        unknown one 404."""
        self.begin("cancel")
        tid = UNKNOWN_TRIAL if unknown else trial[1]
        prefix, params, s = self.target(self.model[trial[0]], by_name)
        r = self.call("DELETE", f"{prefix}/trials/{tid}", "DELETE /v1/studies/{s}/trials/{t}", params=params)
        self.touch(s, None if unknown else tid)
        if s is None:
            self.expect(r, 404, "cancel: unknown study", code="not_found")
            return
        t = s.trials.get(tid)
        if t is None:
            self.expect(r, 404, "cancel: unknown trial", s.id, code="not_found")
        elif t.state == "waiting":
            self.event("cancel: a waiting trial (204)")
            if self.expect(r, 204, "cancel: a waiting trial", s.id):
                del s.trials[tid]
                self.last_trial.pop(s.id, None)
        else:
            self.event("cancel: a trial handed out (409)")
            self.expect(r, 409, "cancel: a trial handed out", s.id)

    @rule(pick=PICK, by_name=st.booleans())
    def cancel_waiting(self, pick: int, by_name: bool) -> None:
        """Cancel a waiting trial the model knows of (204, and it is gone)."""
        live = self.live(lambda t: t.state == "waiting")
        if live:
            self.cancel(live[pick % len(live)], False, by_name)

    @rule(target=trials, study=studies, data=st.data(), n=st.integers(1, 5), by_name=st.booleans(),
          bad=st.sampled_from([None, None, None, None, "value", "param", "missing", "extra", "constraints"]))
    def add_trials(self, study: int, data: st.DataObject, n: int, by_name: bool, bad: str | None) -> Any:
        self.begin("add trials")
        s0 = self.model[study]
        rows = []
        for i in range(n):
            params = self.draw_params(data, s0.space)
            outcome = data.draw(st.sampled_from(["value", "value", "failed", "pruned", "pruned_value"]),
                                label=f"row {i}")
            row = self.tell_body(s0, outcome, data.draw(VALUE), data.draw(VALUE),
                                    data.draw(st.sampled_from(M.CONSTRAINT_VALUES)), data.draw(MAYBE_ATTRS))
            rows.append({"params": params, **row})
        if bad is not None:  # one row the study refuses
            row = rows[data.draw(st.integers(0, n - 1), label="bad row")]
            key = data.draw(st.sampled_from(list(row["params"])), label="bad key")
            if bad == "value":
                row["params"][key] = M.BAD_VALUE[key]
            elif bad == "param" or (bad == "extra" and s0.kind != "cond"):
                row["params"]["nope"] = 1.0
            elif bad == "missing":
                del row["params"][key]
            elif bad == "extra":
                row["params"] = {"kind": "a", "z": 0.5}
            elif s0.constrained and row.get("state", "complete") == "complete":
                row.pop("constraints", None)  # a completed trial of a constrained study without them
            else:
                row["constraints"] = [1.0, 2.0]  # constraints the study does not have
        return multiple(*self.do_add(s0, rows, by_name))

    def do_add(self, s0: M.Study, rows: list[dict[str, Any]], by_name: bool) -> list[tuple[int, int]]:
        """POST rows to .../trials, checked against the model; the (study, trial) added."""
        n = len(rows)
        prefix, qp, s = self.target(s0, by_name)
        r = self.call("POST", f"{prefix}/trials", "POST /v1/studies/{s}/trials", params=qp, body={"trials": rows})
        self.touch(s)
        if s is None:
            self.expect(r, 404, "add: unknown study", code="not_found")
            return []
        # the first row the study (the one the request reaches) refuses is named: trials.<i>.<field>
        problems = [(i, p) for i, row in enumerate(rows) if (p := self.row_problem(s, row))]
        if problems:
            i, p = problems[0]
            self.event(f"add: row {i} of {n} refused ({p}) (422)")
            self.expect(r, 422, f"add: a bad row ({p}) stores nothing", s.id, field_prefix=f"trials.{i}.{p}")
            return []
        self.event("add: rows (201)")
        if not self.expect(r, 201, "add", s.id):
            return []
        got = r.json()["trials"]
        if len(got) != n or any(g.get("id") in s.trials for g in got):
            self.finding("add answers other trials", f"{n} new trials", json.dumps(got)[:600], s.id)
            return []
        out = []
        for row, g in zip(rows, got, strict=True):
            t = s.new_trial(g["id"], "running", M.in_space_order(s.space, row["params"]), "added")
            state = row.get("state", "complete")
            s.finish(t, state, row.get("value"), row.get("values"), row.get("constraints"), row.get("user_attrs"))
            self.check_trial(g, t, s, "add's answer")
            out.append((s.id, t.id))
            self.touch(s, t.id)
        return out

    @rule(vs=st.lists(VALUE, min_size=6, max_size=8), c=st.sampled_from(M.CONSTRAINT_VALUES),
          mostly=st.booleans())
    def fit_on_extremes(self, vs: list[float], c: float, mostly: bool) -> None:
        """A few times a run: a study (of several parameters, or objectives, or a constraint) gets
        enough completed trials for a fit, their values drawn with the extreme finite ones; once the
        fit has landed (or failed: a finding), asks are served from it and the invariant reads its
        calibration and importance."""
        if self.fitted or self.rec.fit_waits >= MAX_FIT_WAITS:
            return
        self.begin("fit on extremes")
        self.fitted = True
        kind = FIT_KINDS[self.rec.fit_waits % len(FIT_KINDS)]  # each kind in turn (not drawn: see PICK)
        self.rec.fit_waits += 1
        s = next((s for s in self.model.values() if not s.deleted and s.kind == kind), None)
        if s is None:
            r = self.call("POST", "/v1/studies", "POST /v1/studies", body=M.create_body(f"fit-{kind}", kind))
            if not self.expect(r, 201, "create a study to fit"):
                return
            s = self.model[r.json()["id"]] = M.Study(r.json()["id"], f"fit-{kind}", kind)
            self.names[s.name] = s.id
        # both signs near the largest float, always; ``mostly``: 16 values, 3 in 4 of them alternating
        # between -1e308 and the largest float, the drawn ones between
        big = [1.7976931348623157e308, -1e308]
        vs = [vs[i // 4 % len(vs)] if i % 4 == 0 else big[i % 2] for i in range(16)] if mostly else [*vs, *big]
        rows = []
        for i, v in enumerate(vs):
            params: dict[str, Any] = {}  # distinct configurations spread over the space
            for j, k in enumerate(s.space):
                if k in M.active_keys(s.space, params):
                    spec, pool = s.space[k], M.PARAM_POOL[k]
                    params[k] = (spec["low"] + (spec["high"] - spec["low"]) * ((i * 7 + j * 3) % 16) / 16
                                 if spec["type"] == "float" else pool[(i + j) % len(pool)])
            row: dict[str, Any] = {"params": params}
            row |= {"values": [v, vs[(i + 1) % len(vs)]]} if s.multi else {"value": v}
            if s.constrained:
                row["constraints"] = [c]
            rows.append(row)
        self.event(f"fit on extremes [{kind}]: {sum(1 for v in vs if abs(v) > 1e300)} of {len(vs)} values "
                   "near the largest float")
        self.do_add(s, rows, False)
        n = s.counts()["complete"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = self.call("GET", f"/v1/studies/{s.id}", "GET /v1/studies/{s}")
            if r is None or r.status_code != 200:
                break
            st_ = r.json()["surrogate_status"]
            if st_["last_error"]:
                self.finding(f"a fit on finite values failed [{kind}]", "a snapshot", st_["last_error"][:600], s.id)
                break
            if st_["fitted_on"] >= n:
                self.event(f"fit on extremes [{kind}]: the fit landed")
                break
            time.sleep(0.1)
        else:
            self.finding(f"no fit within 30 s [{kind}]", f"fitted_on >= {n}", json.dumps(st_), s.id)
        self.do_ask(s, 2, None, False)

    def row_problem(self, s: M.Study, row: dict[str, Any]) -> str | None:
        if M.full_params_problems(s.space, row["params"]):
            return "params"
        return M.tell_problem(s, {k: v for k, v in row.items() if k not in ("params", "user_attrs")})

    @rule(study=studies, put=st.dictionaries(st.sampled_from(M.ATTR_KEYS), st.sampled_from(M.ATTR_VALUES),
                                             max_size=3),
          drop=st.lists(st.sampled_from(M.ATTR_KEYS), max_size=2, unique=True), clash=st.integers(0, 9),
          by_name=st.booleans())
    def study_attrs(self, study: int, put: dict[str, Any], drop: list[str], clash: int, by_name: bool) -> None:
        self.begin("study attrs")
        drop = [k for k in drop if k not in put]
        if clash == 0 and put:
            drop.append(next(iter(put)))  # a key both set and deleted: 422 naming delete
        prefix, qp, s = self.target(self.model[study], by_name)
        r = self.call("PATCH", f"{prefix}/user_attrs", "PATCH /v1/studies/{s}/user_attrs", params=qp,
                      body={"set": put, "delete": drop})
        self.touch(s)
        if s is None:
            self.expect(r, (404, 422) if set(put) & set(drop) else 404, "patch attrs: unknown study")
        elif set(put) & set(drop):
            self.expect(r, 422, "patch attrs: a key both set and deleted", s.id, field="delete")
        elif self.expect(r, 200, "patch attrs", s.id):
            s.user_attrs = {k: v for k, v in s.user_attrs.items() if k not in drop} | put
            self.compare(s.user_attrs, r.json().get("user_attrs"), "patch attrs' answer", s)

    @rule(study=consumes(studies), by_name=st.booleans())
    def delete_study(self, study: int, by_name: bool) -> None:
        self.begin("delete")
        prefix, qp, s = self.target(self.model[study], by_name)
        r = self.call("DELETE", prefix, "DELETE /v1/studies/{s}", params=qp)
        if s is None:
            self.expect(r, 404, "delete: unknown study", code="not_found")
            return
        self.event("delete: a study (204)")
        if self.expect(r, 204, "delete", s.id):
            self.forget(s)
            self.dirty.discard(s.id)
            r = self.call("GET", f"/v1/studies/{s.id}", "GET /v1/studies/{s}")
            self.expect(r, 404, "a deleted study", code="not_found")

    # -------------------------------------------------------------- read-back checks
    def check_view(self, view: dict[str, Any], s: M.Study, where: str) -> None:
        kind = k = M.KINDS[s.kind]
        exp = {"id": s.id, "name": s.name, "space": kind["space"], "directions": k.get("directions"),
               "constraints": k.get("constraints", []), "user_attrs": s.user_attrs, "trials": s.counts(),
               "best_trial": s.best_view()}
        if "direction" in k:
            exp["direction"] = k["direction"]
        act = {key: view.get(key) for key in exp}
        # the space: its parameters in the order written; each one's settings with their defaults, in any order
        exp["space"] = {k: dict(sorted((({"log": False} if v["type"] in ("float", "int") else {}) | v).items()))
                        for k, v in kind["space"].items()}
        if isinstance(act["space"], dict):
            act["space"] = {n: dict(sorted(v.items())) if isinstance(v, dict) else v for n, v in act["space"].items()}
        self.compare(exp, act, where, s)
        if s.multi and (view.get("pareto") or {}).get("size") != len(s.front()):
            self.finding(f"{where}: pareto size", str(len(s.front())), json.dumps(view.get("pareto")), s.id)
        hb = k.get("settings", {}).get("heartbeat_timeout_seconds")
        if hb is not None and view.get("settings", {}).get("heartbeat_timeout_seconds") != hb:
            self.finding(f"{where}: settings.heartbeat_timeout_seconds", str(hb), json.dumps(view.get("settings")),
                         s.id)

    def check_trial(self, tv: dict[str, Any], t: M.Trial, s: M.Study, where: str) -> None:
        exp = t.view()
        self.compare(exp, {k: tv.get(k) for k in exp}, where, s)

    def check_trials(self, got: list[dict[str, Any]], s: M.Study, where: str) -> None:
        ids = [g.get("id") for g in got]
        if ids != list(s.trials):
            self.finding(f"{where} [{s.kind}]: trial ids", json.dumps(list(s.trials)), json.dumps(ids), s.id)
            return
        exp = [t.view() for t in s.trials.values()]
        self.compare(exp, [{k: g.get(k) for k in e} for e, g in zip(exp, got, strict=True)], where, s, label="trials")

    def check_study(self, s: M.Study) -> None:
        """Everything the dashboard and a client read of one study, against the model."""
        base = f"/v1/studies/{s.id}"
        r = self.call("GET", base, "GET /v1/studies/{s}")
        if not self.expect(r, 200, "read back: study view", s.id):
            return
        self.check_view(r.json(), s, "study view")
        r = self.call("GET", path_of(s.name), "GET /v1/studies/{name}",
                      params={"by": "name"} if s.name.isdigit() else None)
        if self.expect(r, 200, "read back: the study by its name (URL-encoded)", s.id) and r.json().get("id") != s.id:
            self.finding("the study by its name is another study", str(s.id), str(r.json().get("id")), s.id)
        r = self.call("GET", f"{base}/trials", "GET /v1/studies/{s}/trials", params={"limit": 1000, "offset": 0})
        if self.expect(r, 200, "read back: trials", s.id):
            page = r.json()
            if page.get("total") != len(s.trials):
                self.finding(f"trials page [{s.kind}]: total", str(len(s.trials)), str(page.get("total")), s.id)
            self.check_trials(page["trials"], s, "trials page")
        tid = self.last_trial.get(s.id)
        if tid is not None and tid in s.trials:
            r = self.call("GET", f"{base}/trials/{tid}", "GET /v1/studies/{s}/trials/{t}")
            if self.expect(r, 200, "read back: one trial", s.id):
                self.check_trial(r.json(), s.trials[tid], s, "one trial")
        r = self.call("GET", f"{base}/calibration", "GET /v1/studies/{s}/calibration")
        self.expect(r, 200, "read back: calibration", s.id)
        r = self.call("GET", f"{base}/pareto", "GET /v1/studies/{s}/pareto")
        if s.multi:
            if self.expect(r, 200, "read back: pareto", s.id):
                ids = [t.get("id") for t in r.json().get("trials", [])]
                if len(ids) > 1:
                    self.event("pareto: a front of several trials")
                if ids != s.front():
                    self.finding("pareto front", json.dumps(s.front()), json.dumps(ids), s.id)
        else:
            self.expect(r, 409, "read back: pareto of a single-objective study", s.id, code="not_multi_objective")
        r = self.call("GET", f"{base}/importance", "GET /v1/studies/{s}/importance")
        self.expect(r, 200, "read back: importance", s.id)
        r = self.call("GET", f"{base}/curves", "GET /v1/studies/{s}/curves", params={"limit": 1000, "offset": 0})
        self.expect(r, 200, "read back: curves", s.id)
        # user_attr filters: each string attribute the model knows of, and one no trial has
        pairs = list(dict.fromkeys((k, v) for t in s.trials.values() for k, v in t.user_attrs.items()
                                   if isinstance(v, str)))[:3] + [("run", "no such run")]
        for k, v in pairs:
            r = self.call("GET", f"{base}/trials", "GET /v1/studies/{s}/trials?user_attr",
                          params={"user_attr": f"{k}:{v}", "limit": 1000})
            if self.expect(r, 200, "read back: trials by user_attr", s.id):
                got = [t.get("id") for t in r.json()["trials"]]
                if got:
                    self.event("user_attr filter: finds trials")
                if got != s.with_attr(k, v):
                    self.finding(f"user_attr filter [key {k!r}]", json.dumps(s.with_attr(k, v)),
                                 json.dumps(got), s.id)

    def check_list(self) -> None:
        r = self.call("GET", "/v1/studies", "GET /v1/studies", params={"limit": 1000, "offset": 0})
        if not self.expect(r, 200, "read back: study list"):
            return
        listed = {s["id"]: s for s in r.json()["studies"]}
        live = {s.id: s for s in self.model.values() if not s.deleted}
        if set(listed) != set(live):
            self.finding("study list: ids", json.dumps(sorted(live)), json.dumps(sorted(listed)))
            self.dirty_all = True
            return
        for sid, s in live.items():
            got = listed[sid]
            self.compare({"name": s.name, "trials": s.counts(), "best_trial": s.best_view(),
                          "user_attrs": s.user_attrs},
                         {k: got.get(k) for k in ("name", "trials", "best_trial", "user_attrs")}, "study list", s)

    @invariant()
    def reads_agree_with_the_model(self) -> None:
        rule_was = self.rule
        self.rule = f"after {rule_was}"
        if self.dirty_all:
            self.resync_all()
        for sid in sorted(self.dirty):
            self.resync(sid)
        self.dirty.clear()
        self.check_list()
        r = self.call("GET", "/metrics", "GET /metrics")
        self.expect(r, 200, "read back: /metrics")
        for sid in sorted(self.touched):
            s = self.model.get(sid)
            if s is None:
                continue
            if s.deleted:
                r = self.call("GET", f"/v1/studies/{sid}", "GET /v1/studies/{s}")
                self.expect(r, 404, "read back: a deleted study", code="not_found")
            else:
                self.check_study(s)
        self.touched.clear()
        for sid in sorted(self.dirty):  # what the reads found out of step: read it again for the next rule
            self.resync(sid)
        self.dirty.clear()
        self.rule = rule_was


# ------------------------------------------------------------------ the server and the tests
@pytest.fixture(scope="module", params=BACKENDS)
def api_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server per backend for the module: one fit worker (fits run, asks use their snapshots),
    asks wait briefly for a fit, and no background reaper (expiry happens at asks and heartbeats,
    which the model can time)."""
    with backend_server(request, tmp_path_factory, "stateful", workers=1, ask_wait_seconds=0.3,
                        settings={"reaper_interval_seconds": 3600}) as srv:
        yield srv


def test_the_api_agrees_with_the_model(api_server: LiveServer, request: pytest.FixtureRequest) -> None:
    rec = Recorder(request.node.callspec.params["api_server"])

    class Machine(ApiMachine):
        server = api_server

    Machine.rec = rec
    if SEED is not None:
        Machine._hypothesis_internal_use_seed = int(SEED)  # what @seed sets
    try:
        run_state_machine_as_test(Machine, settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=SEED is None, database=None,
            suppress_health_check=list(HealthCheck), report_multiple_bugs=False))
    except FlakyStrategyDefinition as e:
        # the server answered a replayed prefix differently (a trial's expiry is a matter of timing):
        # hypothesis stops generating; what ran so far is still checked below
        rec.notes[f"hypothesis stopped early: {str(e).splitlines()[0][:120]}"] += 1
    print(rec.summary())
    request.node.user_properties.append(("stateful", rec.summary()))
    assert not rec.findings, rec.report()


# ------------------------------------------------------------------ races
THREADS = 8
ROUNDS = 4


def race(server: LiveServer, calls: list[Any]) -> list[httpx.Response | Exception]:
    """Each of ``calls`` (a function of a client) in its own thread, released together."""
    barrier = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        with server.client() as c:
            barrier.wait()
            try:
                out[i] = calls[i](c)
            except Exception as e:  # noqa: BLE001 - reported with the round
                out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def statuses(rs: list[Any]) -> list[Any]:
    return [r.status_code if isinstance(r, httpx.Response) else repr(r) for r in rs]


def source_study(c: httpx.Client, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A study with 5 finished trials (3 complete, a failed, a pruned), one running and one waiting."""
    s = c.post("/v1/studies", json=M.create_body(name, "f1"))
    assert s.status_code == 201, s.text
    sid = s.json()["id"]
    rows = [{"params": {"x": -5.0}, "value": 1.0, "user_attrs": {"é": "1"}}, {"params": {"x": 0.0}, "value": -0.5},
            {"params": {"x": 2.5}, "state": "failed"}, {"params": {"x": 5.0}, "state": "pruned", "value": 3.0},
            {"params": {"x": -0.5}, "value": 1e308}]
    r = c.post(f"/v1/studies/{sid}/trials", json={"trials": rows})
    assert r.status_code == 201, r.text
    assert c.post(f"/v1/studies/{sid}/ask", json={"count": 1}).status_code == 200
    assert c.post(f"/v1/studies/{sid}/enqueue", json={"params": {"x": 4.0}}).status_code == 201
    return s.json(), r.json()["trials"]


def same_trials(copied: list[dict[str, Any]], finished: list[dict[str, Any]]) -> str | None:
    """None when ``copied`` holds each of ``finished`` exactly once (params, state, value, attrs)."""
    def key(t: dict[str, Any]) -> str:
        return json.dumps([t["params"], t["state"], t["value"], t["user_attrs"]], sort_keys=True)
    if sorted(map(key, copied)) != sorted(map(key, finished)):
        times = Counter(map(key, copied))
        return (f"the copy holds {len(copied)} trials, the source has {len(finished)} finished (each copied "
                f"{sorted(set(times.values()))} times; first: {next(iter(times), None)})")
    return None


def test_concurrent_copies_to_one_name_make_one_whole_copy(api_server: LiveServer) -> None:
    failures: list[str] = []
    with api_server.client() as c:
        src, finished = source_study(c, f"race-copy-src-{time.time_ns()}")
        for rnd in range(ROUNDS):
            name = f"race-copy-{rnd}-{time.time_ns()}"
            rs = race(api_server,
                      [lambda h, name=name: h.post(f"/v1/studies/{src['id']}/copy", json={"name": name})] * THREADS)
            codes = statuses(rs)
            if sorted(codes) != [201] + [409] * (THREADS - 1):
                failures.append(f"round {rnd}: {THREADS} copies to {name!r} answered {codes} (one 201, the rest 409)")
            conflicts = [r.json()["error"]["code"] for r in rs
                         if isinstance(r, httpx.Response) and r.status_code == 409]
            if any(code != "name_conflict" for code in conflicts):
                failures.append(f"round {rnd}: 409 codes {conflicts} (name_conflict)")
            listed = c.get("/v1/studies", params={"name": name}).json()
            if listed["total"] != 1:
                failures.append(f"round {rnd}: {listed['total']} studies named {name!r}")
            got = c.get(f"{path_of(name)}/trials", params={"limit": 1000}).json()["trials"]
            why = same_trials(got, finished)
            if why:
                failures.append(f"round {rnd}: {why}")
    assert not failures, "\n".join(failures)


def test_a_create_and_copies_racing_on_one_name_leave_one_whole_study(api_server: LiveServer) -> None:
    failures: list[str] = []
    with api_server.client() as c:
        src, finished = source_study(c, f"race-cc-src-{time.time_ns()}")
        for rnd in range(ROUNDS):
            name = f"race-cc-{rnd}-{time.time_ns()}"
            create = [lambda h, name=name: h.post("/v1/studies", json=M.create_body(name, "f1"))] * (THREADS // 2)
            copy = [lambda h, name=name: h.post(f"/v1/studies/{src['id']}/copy", json={"name": name})] * (THREADS // 2)
            rs = race(api_server, [f for pair in zip(create, copy, strict=True) for f in pair])
            codes = statuses(rs)
            creates, copies = codes[0::2], codes[1::2]
            got = c.get(f"{path_of(name)}/trials", params={"limit": 1000}).json()["trials"]
            if codes.count(201) != 1:
                failures.append(f"round {rnd}: creates {creates}, copies {copies}: not exactly one 201")
            elif 201 in creates:  # the create won: an empty study; the copies conflict
                if got or any(x != 409 for x in copies) or any(x not in (200, 201) for x in creates):
                    failures.append(f"round {rnd}: the create won (creates {creates}, copies {copies}) "
                                    f"but the study holds {len(got)} trials")
            else:  # a copy won: the creates see the same definition (200), the other copies 409
                why = same_trials(got, finished)
                if why or any(x != 200 for x in creates) or sorted(copies) != [201] + [409] * (len(copies) - 1):
                    failures.append(f"round {rnd}: a copy won (creates {creates}, copies {copies}): {why}")
            if c.get("/v1/studies", params={"name": name}).json()["total"] != 1:
                failures.append(f"round {rnd}: not exactly one study named {name!r}")
    assert not failures, "\n".join(failures)


def test_concurrent_enqueues_of_the_same_params_with_skip_if_exists_make_one_trial(api_server: LiveServer) -> None:
    failures: list[str] = []
    with api_server.client() as c:
        sid = c.post("/v1/studies", json=M.create_body(f"race-enqueue-{time.time_ns()}", "mixed")).json()["id"]
        for rnd in range(ROUNDS):
            params = {"zeta": 0.01 * (rnd + 1), "alpha": rnd + 1, "mid": "a"}
            rs = race(api_server, [lambda h, params=params: h.post(f"/v1/studies/{sid}/enqueue",
                                                     json={"params": params, "skip_if_exists": True})] * THREADS)
            codes = statuses(rs)
            ids = {r.json()["id"] for r in rs if isinstance(r, httpx.Response) and r.status_code in (200, 201)}
            if sorted(codes) != [200] * (THREADS - 1) + [201] or len(ids) != 1:
                failures.append(f"round {rnd}: answered {codes} with trials {sorted(ids)} (one 201, the rest 200, "
                                "one trial)")
            same = [t for t in c.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["trials"]
                    if t["params"] == params]
            if len(same) != 1:
                failures.append(f"round {rnd}: {len(same)} trials with params {params}")
    assert not failures, "\n".join(failures)


def test_concurrent_tells_of_one_trial_one_wins(api_server: LiveServer) -> None:
    failures: list[str] = []
    with api_server.client() as c:
        sid = c.post("/v1/studies", json=M.create_body(f"race-tell-{time.time_ns()}", "f2")).json()["id"]
        for rnd in range(ROUNDS):
            (t,) = c.post(f"/v1/studies/{sid}/ask", json={"count": 1}).json()["trials"]
            values = [rnd + i / 8 for i in range(THREADS)]
            rs = race(api_server, [lambda h, v=v, tid=t['id']: h.post(f"/v1/studies/{sid}/trials/{tid}/tell",
                                                          json={"value": v}) for v in values])
            codes = statuses(rs)
            won = [v for v, r in zip(values, rs, strict=True) if isinstance(r, httpx.Response) and r.status_code == 200]
            if sorted(codes) != [200] + [409] * (THREADS - 1):
                failures.append(f"round {rnd}: tells of values {values} answered {codes} (one 200, the rest 409)")
            stored = c.get(f"/v1/studies/{sid}/trials/{t['id']}").json()
            if len(won) == 1 and (stored["value"] != won[0] or stored["state"] != "complete"):
                failures.append(f"round {rnd}: the winner told {won[0]}, the trial holds {stored['value']} "
                                f"({stored['state']})")
            for r, v in zip(rs, values, strict=True):
                if isinstance(r, httpx.Response) and r.status_code == 200 and r.json()["value"] != v:
                    failures.append(f"round {rnd}: a tell of {v} answered 200 with value {r.json()['value']}")
    assert not failures, "\n".join(failures)


