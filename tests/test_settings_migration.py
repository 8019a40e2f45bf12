"""Settings that are no longer settings (``engine.config.REMOVED``), and the one-column study state.

* A study stored before the removal, its definition naming every removed setting, loads and runs
  over HTTP (SQLite and PostgreSQL): its view says which it named with another value than the
  constant it now runs with, and re-creating it without them is the same study (200, not 409).
* A create request naming one is refused (422 naming ``settings.<name>``); so are ``EngineConfig``
  and ``Optimizer`` given one.
* An ``Optimizer.state_dict`` of version 3 (adaptive states under their own keys, the removed
  settings in its config) resumes with the same next ask.
* Migration 0007 carries ``adaptive`` and ``head_adaptive`` into ``state`` and back, keeping every
  study's trials, snapshots and reports.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from conftest import LiveServer, migrate_to, unique

from calibo.engine import ConfigError, EngineConfig, Optimizer, StudyState
from calibo.engine.config import REMOVED, migrate
from calibo.engine.study import StudySpec

BRANIN = {"x1": {"type": "float", "low": -5, "high": 10}, "x2": {"type": "float", "low": 0, "high": 15}}
FAST = {"n_warmup": 5, "conformalize_from": 8, "split_from": 14, "n_candidates": 300}
# what a study created before the removal could have named with another value than today's constant
NON_DEFAULT = {"incumbent": "model", "local_search": 5, "crowd": "radius", "levels": [0.05, 0.25, 0.75, 0.95],
               "split_refit": False, "warmup_observed": 0.5}


def branin(p: dict) -> float:
    x1, x2 = p["x1"], p["x2"]
    return ((x2 - 5.1 / (4 * math.pi**2) * x1**2 + 5 / math.pi * x1 - 6) ** 2
            + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x1) + 10)


def old_config(settings: dict[str, Any]) -> dict[str, Any]:
    """A stored config from before the removal: today's settings, and every removed one (the
    constant, or NON_DEFAULT's value)."""
    assert set(NON_DEFAULT) <= set(REMOVED)
    return {**EngineConfig(**settings).to_dict(), **REMOVED, **NON_DEFAULT}


# ------------------------------------------------------------------ engine
def test_removed_settings_are_refused_by_the_engine_and_migrated_from_storage() -> None:
    for name, value in REMOVED.items():
        with pytest.raises(TypeError):
            EngineConfig(**{name: value})
        with pytest.raises(ConfigError) as e:
            EngineConfig.from_dict({name: value})
        assert e.value.field == name and "no longer a setting" in e.value.message
        with pytest.raises(ConfigError) as e:
            Optimizer(BRANIN, config={name: value})
        assert e.value.field == name
    stored = old_config(FAST)
    settings, removed = migrate(stored)
    assert removed == NON_DEFAULT and not set(settings) & set(REMOVED)
    assert EngineConfig.from_stored(stored) == EngineConfig(**FAST)
    spec = StudySpec.from_definition({"space": BRANIN, "direction": "minimize", "seed": 4, "config": stored})
    assert spec.config == EngineConfig(**FAST) and spec.removed == NON_DEFAULT


# ------------------------------------------------------------------ HTTP
def _stored_before_the_removal(server: LiveServer, name: str, seed: int) -> int:
    """A study as the code before the removal stored it: its config names every removed setting."""
    from calibo.server.storage import Storage
    from calibo.server.studies import build_definition

    definition = build_definition(name, BRANIN, "minimize", None, None, seed, FAST)
    definition["config"] = old_config(FAST)
    state = StudySpec.from_definition(definition).initial_state().to_dict()
    st = Storage(server.database_url)
    try:
        info, created = st.create_study(name, definition, state)
    finally:
        st.close()
    assert created
    return info.id


def test_a_study_stored_with_removed_settings_loads_runs_and_is_the_same_study(http: httpx.Client,
                                                                              server: LiveServer) -> None:
    name = unique("removed")
    sid = _stored_before_the_removal(server, name, seed=5)
    r = http.get(f"/v1/studies/{sid}")
    assert r.status_code == 200, r.text
    view = r.json()
    assert view["removed_settings"] == NON_DEFAULT
    assert not set(view["settings"]) & set(REMOVED)
    assert {k: view["settings"][k] for k in FAST} == FAST
    assert [p["coverage"] for p in view["adaptive"]["pairs"]] == [0.9, 0.7, 0.5, 0.3, 0.1]
    assert http.get(f"/v1/studies/{name}").json()["id"] == sid  # by name too
    assert sid in {s["id"] for s in http.get("/v1/studies", params={"limit": 1000}).json()["studies"]}

    # it runs, with the constants: past the warm-up, a fitted model predicts, and tells adapt it
    predicted = 0
    for _ in range(10):
        r = http.post(f"/v1/studies/{sid}/ask", json={})
        assert r.status_code == 200, r.text
        (t,) = r.json()["trials"]
        predicted += t["prediction"] is not None
        r = http.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": branin(t["params"])})
        assert r.status_code == 200 and r.json()["state"] == "complete", r.text
    assert predicted >= 1
    view = http.get(f"/v1/studies/{sid}").json()
    assert view["trials"]["complete"] == 10 and view["surrogate_status"]["last_error"] is None
    assert view["removed_settings"] == NON_DEFAULT

    # the same study asked for today, without the removed settings: the existing one (200), not a conflict
    body = {"name": name, "space": BRANIN, "direction": "minimize", "seed": 5, "settings": FAST}
    r = http.post("/v1/studies", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == sid and r.json()["trials"]["complete"] == 10
    assert r.json()["removed_settings"] == NON_DEFAULT
    # and a different one under its name still conflicts
    r = http.post("/v1/studies", json={**body, "seed": 6})
    assert r.status_code == 409 and r.json()["error"]["code"] == "name_conflict", r.text


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_create_request_naming_a_removed_setting_is_refused(http: httpx.Client, name: str) -> None:
    value = NON_DEFAULT.get(name, REMOVED[name])
    for v in {json.dumps(value): value, json.dumps(REMOVED[name]): REMOVED[name]}.values():
        r = http.post("/v1/studies", json={"name": unique(), "space": BRANIN, "settings": {name: v}})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "invalid_request" and err["field"] == f"settings.{name}", err


# ------------------------------------------------------------------ Optimizer state, version 3
def _as_version_3(d: dict[str, Any]) -> dict[str, Any]:
    """A version-4 ``state_dict`` as the code before the typed study state wrote it."""
    old = {k: v for k, v in d.items() if k != "state"}
    old["version"] = 3
    old["config"] = {**d["config"], **REMOVED}  # every removed setting, at the constant it is now
    old["states"] = d["state"]["states"]
    old["objective_states"] = d["state"]["objectives"]
    old["constraint_states"] = d["state"]["constraints"]
    return old


@pytest.mark.parametrize("kind", ["constrained", "two objectives"])
def test_a_version_3_optimizer_state_resumes_with_the_same_next_ask(kind: str) -> None:
    if kind == "constrained":
        opt = Optimizer(BRANIN, seed=2, config=FAST, constraints=["c"])

        def tell(o: Optimizer, p: dict) -> None:
            o.tell(p, branin(p), constraints=[p["x1"] + p["x2"] - 10.0])
    else:
        opt = Optimizer(BRANIN, seed=2, config=FAST, directions=["minimize", "minimize"])

        def tell(o: Optimizer, p: dict) -> None:
            o.tell(p, [branin(p), (p["x1"] - 2) ** 2 + p["x2"]])

    for _ in range(14):  # past the warm-up and conformalize_from: the adaptive states have moved
        tell(opt, opt.ask()[0].params)
    running = opt.ask(2)
    heads = opt.state.constraints if kind == "constrained" else opt.state.objectives
    assert heads and any(s.steps for s in opt.state.states) and any(s.steps for s in heads[0])
    v3 = json.loads(json.dumps(_as_version_3(opt.state_dict())))
    assert v3["version"] == 3 and "state" not in v3 and (v3["constraint_states"] or v3["objective_states"])
    twin = Optimizer.from_state_dict(v3)
    assert twin.config == opt.config and twin.state == opt.state
    assert twin.state_dict()["version"] == 4 and twin.state_dict()["state"] == opt.state_dict()["state"]
    nxt, twin_nxt = opt.ask(3), twin.ask(3)
    assert [s.params for s in nxt] == [s.params for s in twin_nxt]
    assert [s.prediction for s in nxt] == [s.prediction for s in twin_nxt]
    for o, asked in ((opt, running + nxt), (twin, running + twin_nxt)):  # telling them adapts both alike
        for s in asked:
            tell(o, s.params)
    assert twin.state == opt.state and twin.records == opt.records
    assert twin.ask()[0].params == opt.ask()[0].params


def test_a_version_3_state_naming_a_removed_variant_loads_with_the_constant() -> None:
    opt = Optimizer(BRANIN, seed=3, config=FAST)
    for _ in range(6):
        p = opt.ask()[0].params
        opt.tell(p, branin(p))
    v3 = _as_version_3(opt.state_dict())
    v3["config"].update(NON_DEFAULT)
    twin = Optimizer.from_state_dict(v3)
    assert twin.config == opt.config
    assert twin.ask()[0].params == opt.ask()[0].params


# ------------------------------------------------------------------ migration 0007
def _rows(url: str, table: str, *columns: str) -> list[tuple]:
    from calibo.server.storage import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            t = sa.Table(table, sa.MetaData(), autoload_with=conn)
            return [tuple(r) for r in conn.execute(sa.select(*(t.c[c] for c in columns)).order_by(t.c.id))]
    finally:
        engine.dispose()


def test_migration_0007_carries_the_adaptive_states_into_one_column_and_back(database_url: str) -> None:
    from calibo.server.storage import make_engine

    migrate_to(database_url, "0006")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    # the three shapes the service wrote: one objective alone; with a constraint; two objectives with a constraint
    single = StudyState.initial(EngineConfig(), 11)
    constrained = StudyState.initial(EngineConfig(adapter="dtaci"), 12, n_constraints=1)
    several = StudyState.initial(EngineConfig(), 13, n_objectives=2, n_constraints=2)
    for s in (constrained, several):  # moved states, so that the migration carries values, not defaults
        s.states[0] = s.states[0].update(0.9)
        for hs in s.heads:
            hs[-1] = hs[-1].update(0.01)
    studies = []
    for name, st in (("single", single), ("constrained", constrained), ("several", several)):
        d = st.to_dict()
        heads = {k: d[k] for k in ("constraints", "objectives") if d[k]} or None
        definition = {"space": BRANIN, "direction": "minimize", "seed": st.seed, "config": old_config({})}
        if name == "several":
            definition["directions"] = ["minimize", "maximize"]
        studies.append((name, definition, d["states"], heads, d))
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            md = sa.MetaData()
            t_studies = sa.Table("studies", md, autoload_with=conn)
            t_trials = sa.Table("trials", md, autoload_with=conn)
            t_snaps = sa.Table("snapshots", md, autoload_with=conn)
            t_reports = sa.Table("intermediate_values", md, autoload_with=conn)
            assert {"adaptive", "head_adaptive"} <= set(t_studies.c.keys()) and "state" not in t_studies.c
            for i, (name, definition, adaptive, heads, _) in enumerate(studies, start=1):
                conn.execute(t_studies.insert().values(
                    id=i, name=name, definition=definition, created_at=now, next_number=1, n_complete=1,
                    finish_seq=1, adaptive=adaptive, head_adaptive=heads, snapshot_version=1, snapshot_n_obs=1))
                conn.execute(t_trials.insert().values(
                    id=i, study_id=i, number=0, state="complete", params={"x1": 0.0, "x2": 1.0}, ukey=f"{i:02x}",
                    value=float(i), asked_at=now, finished_at=now, finish_seq=1))
                conn.execute(t_snaps.insert().values(study_id=i, version=1, n_obs=1, method="raw", fit_seconds=0.1,
                                                     created_at=now, data=bytes([i])))
                conn.execute(t_reports.insert().values(study_id=i, trial_id=i, step=0, value=1.0,
                                                       should_prune=False, reported_at=now))
    finally:
        engine.dispose()
    kept = {"trials": _rows(database_url, "trials", "id", "study_id", "value"),
            "snapshots": _rows(database_url, "snapshots", "study_id", "version", "data"),
            "intermediate_values": _rows(database_url, "intermediate_values", "study_id", "trial_id", "step")}
    assert [len(v) for v in kept.values()] == [3, 3, 3]

    migrate_to(database_url, "head")
    got = dict(_rows(database_url, "studies", "name", "state"))
    for name, _, _, _, state in studies:
        assert set(got[name]) == {"seed", "states", "objectives", "constraints"}
        assert got[name] == state, name
    assert StudyState.from_dict(got["several"]) == several
    assert len(got["several"]["objectives"]) == 1 and len(got["several"]["constraints"]) == 2
    assert got["single"]["objectives"] == [] and got["single"]["constraints"] == []
    for table, rows in kept.items():  # no study's trials, snapshots or reports lost on the way
        assert _rows(database_url, table, *_KEYS[table]) == rows, table
    ids_after_upgrade = [r[0] for r in _rows(database_url, "studies", "id")]
    assert ids_after_upgrade == [1, 2, 3]

    migrate_to(database_url, "0006", down=True)
    back = {r[0]: (r[1], r[2]) for r in _rows(database_url, "studies", "name", "adaptive", "head_adaptive")}
    for name, _, adaptive, heads, _ in studies:
        assert back[name] == (adaptive, heads), name
    for table, rows in kept.items():
        assert _rows(database_url, table, *_KEYS[table]) == rows, table


_KEYS = {"trials": ("id", "study_id", "value"), "snapshots": ("study_id", "version", "data"),
         "intermediate_values": ("study_id", "trial_id", "step")}


def test_a_migrated_database_serves_its_studies(database_url: str) -> None:
    """After 0007 a study made before it, with removed settings in its definition, asks and tells."""
    import asyncio

    from calibo.server.config import Settings
    from calibo.server.storage import Storage, make_engine
    from calibo.server.studies import StudyService, build_definition

    migrate_to(database_url, "0006")
    definition = build_definition("old", BRANIN, "minimize", None, None, 3, {"n_warmup": 4})
    definition["config"] = old_config({"n_warmup": 4})
    state = StudyState.initial(EngineConfig(n_warmup=4), 3, n_constraints=0).to_dict()
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            t = sa.Table("studies", sa.MetaData(), autoload_with=conn)
            conn.execute(t.insert().values(name="old", definition=definition, created_at=datetime.now(UTC),
                                           next_number=0, n_complete=0, finish_seq=0, adaptive=state["states"],
                                           head_adaptive=None, snapshot_version=0, snapshot_n_obs=0))
    finally:
        engine.dispose()
    st = Storage(database_url)  # upgrade head
    try:
        svc = StudyService(Settings(database_url=database_url), st, None)
        sid = svc.resolve("old")
        assert st.get_study(sid).state == state
        for _ in range(6):
            (t,) = asyncio.run(svc.ask(sid, 1))
            view, _ = asyncio.run(svc.tell(sid, t["id"], branin(t["params"])))
            assert view["state"] == "complete"
        assert st.get_study(sid).n_complete == 6
    finally:
        st.close()
