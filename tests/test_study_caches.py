"""The API process's per-study caches (``studies.caches.StudyCaches``): bounded, most recently used
kept, a newer revision of a study's definition replacing what was cached for the older space."""

from __future__ import annotations

import numpy as np
import pytest

from calibo.engine import EngineConfig, SearchSpace
from calibo.engine.fit import fit
from calibo.server.studies.caches import StudyCaches
from calibo.server.studies.definitions import StudyDef, build_definition

SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}


def _def(study_id: int, revision: int = 0) -> StudyDef:
    return StudyDef.parse(study_id, build_definition(f"s{study_id}", SPACE, "minimize", None, None, 0, None,
                                                     None, None, None, True), revision)


def test_each_part_keeps_its_most_recently_used_entries() -> None:
    c = StudyCaches(studies=2, snapshots=1)
    for sid in (1, 2):
        c.keep(_def(sid))
        c.set_finished(sid, 5, {b"k"})
    assert c.definition(1) is not None  # 1 is now the most recent: 3 pushes 2 out
    c.keep(_def(3))
    assert c.definition(2) is None and c.definition(1) is not None and c.definition(3) is not None
    c.set_finished(3, 1, set())
    assert c.finished(1) == (0, set())  # finished keys of 1 pushed out (2 and 3 set later): read again from 0
    assert c.finished(3) == (1, set())

    space = SearchSpace.from_dict(SPACE)
    rng = np.random.default_rng(0)
    obs = [({"x": float(x)}, float((x - 0.3) ** 2)) for x in rng.random(6)]
    snap = fit(obs, space, EngineConfig(n_candidates=50), seed=0)
    c.put_snapshot(1, 1, snap)
    c.put_snapshot(1, 2, snap)
    assert c.snapshot(1, 1) is None and c.snapshot(1, 2) is snap


def test_a_newer_revision_drops_the_older_spaces_entries_and_an_older_one_changes_nothing() -> None:
    c = StudyCaches(studies=8, snapshots=8)
    old = c.keep(_def(1, revision=0))
    c.set_finished(1, 3, {b"a"})
    new = _def(1, revision=1)
    assert c.keep(new) is new
    assert c.finished(1) == (0, set())
    assert c.keep(_def(1, revision=0)) is new and c.definition(1) is new and old is not new
    c.forget(1)
    assert c.definition(1) is None


@pytest.mark.live
def test_a_server_whose_caches_hold_fewer_studies_than_it_serves_answers_as_any(database_url: str) -> None:
    """Four studies asked and told in turn through a server that keeps two studies' definitions and
    finished keys and one snapshot: every ask distinct from the study's earlier trials, predictions
    once warmed up, every tell stored."""
    import httpx
    from conftest import LiveServer

    srv = LiveServer(database_url, settings={"study_cache": 2, "snapshot_cache": 1}).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            sids = [c.post("/v1/studies", json={"name": f"cache-{i}", "space": SPACE, "seed": i,
                                               "settings": {"n_warmup": 4}}).json()["id"] for i in range(4)]
            seen: dict[int, list[float]] = {sid: [] for sid in sids}
            predicted = 0
            for _ in range(8):
                for sid in sids:
                    t = c.post(f"/v1/studies/{sid}/ask", json={}).json()["trials"][0]
                    assert t["params"]["x"] not in seen[sid]
                    seen[sid].append(t["params"]["x"])
                    predicted += t["prediction"] is not None
                    r = c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell",
                               json={"value": (t["params"]["x"] - 0.3) ** 2})
                    assert r.status_code == 200, r.text
            assert predicted > 0
            for sid in sids:
                assert c.get(f"/v1/studies/{sid}").json()["trials"]["complete"] == 8
    finally:
        srv.stop()
