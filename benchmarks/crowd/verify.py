"""Reading a study back through the API after a crowd, and the invariants that must hold.

:func:`verify` checks: no acknowledged tell lost or changed, no tell rejected as a
duplicate (409), no ask returning the params of another trial still in flight, all
params distinct, numbers gapless from 0, the study's complete count equal to the
acknowledged tells, and one adaptive step per predicted tell. :func:`_get` retries
on 503 and transport errors, so a study can be read right after a fault.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import httpx

from benchmarks.crowd.clients import Crowd, params_key


def _get(http: httpx.Client, path: str, deadline: float = 60.0, **params: Any) -> dict[str, Any]:
    """GET with retries on 503 and transport errors (for reading a study back after a fault)."""
    end = time.monotonic() + deadline
    while True:
        try:
            r = http.get(path, params=params or None)
            if r.status_code != 503:
                r.raise_for_status()
                return r.json()
            why = f"503: {r.text[:200]}"
        except httpx.TransportError as e:
            why = f"{type(e).__name__}: {e}"
        if time.monotonic() > end:
            raise RuntimeError(f"GET {path}: still failing after {deadline:.0f} s: {why}")
        time.sleep(0.2)


def read_trials(http: httpx.Client, study_id: int, page: int = 1000) -> list[dict[str, Any]]:
    """Every trial of the study, through the paginated listing."""
    out: list[dict[str, Any]] = []
    total = None
    for _ in range(10_000):  # bounded: 10M trials at most
        body = _get(http, f"/v1/studies/{study_id}/trials", limit=page, offset=len(out))
        total = body["total"]
        out.extend(body["trials"])
        if not body["trials"] or len(out) >= total:
            break
    if total is not None and len(out) != total:
        raise RuntimeError(f"listing gave {len(out)} trials, total says {total}")
    return out


def verify(base_url: str, study_id: int, crowds: list[Crowd], expected_total: int | None = None
           ) -> dict[str, Any]:
    """Read the study back and check every invariant; ``problems`` lists each one broken.

    ``crowds``: every crowd that ran on the study (a warm-up one and the main one), so
    their acknowledged tells together are the study's trials.
    """
    with httpx.Client(base_url=base_url, timeout=60.0, trust_env=False) as http:
        view = _get(http, f"/v1/studies/{study_id}")
        trials = read_trials(http, study_id)
    acked: dict[int, float] = {}
    for c in crowds:
        acked.update(c.acked)
    sums = [c.summary() for c in crowds]

    def total(key: str) -> int:
        return sum(s[key] for s in sums)

    failed = [f for c in crowds for f in c.failed]
    by_id = {int(t["id"]): t for t in trials}
    numbers = sorted(int(t["number"]) for t in trials)
    missing = sorted(set(range(len(trials))) - set(numbers))
    lost = [tid for tid in acked if tid not in by_id or by_id[tid]["state"] != "complete"]
    changed = [tid for tid, v in acked.items()
               if tid in by_id and by_id[tid]["state"] == "complete" and by_id[tid]["value"] != v]
    keys = [params_key(t["params"]) for t in trials]
    running = [int(t["id"]) for t in trials if t["state"] == "running"]
    states = Counter(t["state"] for t in trials)
    predicted = sum(t["state"] == "complete" and t["prediction"] is not None
                    and t["prediction"].get("method") != "raw" for t in trials)
    steps = sorted({int(p["steps"]) for p in view["adaptive"]["pairs"]})
    out: dict[str, Any] = {
        "trials_total": len(trials), "states": dict(states), "complete_in_view": view["trials"]["complete"],
        "acked": len(acked), "lost": len(lost), "lost_examples": lost[:5],
        "value_changed": len(changed), "duplicated_409": total("conflicts_409"),
        "dup_running": total("dup_running"), "dup_params": len(keys) - len(set(keys)), "gaps": len(missing),
        "dup_numbers": len(numbers) - len(set(numbers)), "running_left": len(running),
        "failed_permanently": len(failed), "adaptive_steps": steps, "predicted_tells": predicted,
        "predictions": dict(Counter(str((t["prediction"] or {}).get("method")) for t in trials)),
    }
    problems = []
    if expected_total is not None and len(trials) != expected_total:
        problems.append(f"the study holds {len(trials)} trials, the crowd asked for {expected_total}")
    if numbers != list(range(len(trials))):
        problems.append(f"numbers are not 0..{len(trials) - 1}: {len(missing)} missing (first {missing[:5]}), "
                        f"{out['dup_numbers']} repeated")
    if lost:
        problems.append(f"{len(lost)} acknowledged tells lost (trials {lost[:5]})")
    if changed:
        problems.append(f"{len(changed)} acknowledged tells stored with another value (trials {changed[:5]})")
    if out["duplicated_409"]:
        problems.append(f"{out['duplicated_409']} tells answered 409 (told twice, differently)")
    if out["dup_running"]:
        problems.append(f"{out['dup_running']} asks returned params of a trial still running: "
                        f"{[x for s in sums for x in s['dup_running_examples']][:2]}")
    if out["dup_params"]:
        problems.append(f"{out['dup_params']} trials repeat another trial's params")
    if running:
        problems.append(f"{len(running)} trials still running after the crowd ended (trials {running[:5]})")
    if view["trials"]["complete"] != len(acked):
        problems.append(f"the study counts {view['trials']['complete']} complete trials, "
                        f"{len(acked)} tells were acknowledged")
    if steps != [predicted]:
        problems.append(f"adaptive steps {steps} != {predicted} predicted tells (one adapt per tell)")
    if failed:
        problems.append(f"{len(failed)} requests failed permanently: {failed[:3]}")
    if total("asks_reused_across_keys") or total("double_acked"):
        problems.append(f"a trial was handed to two asks ({total('asks_reused_across_keys')}) or "
                        f"acknowledged twice ({total('double_acked')})")
    crashed = [x for s in sums for x in s["crashed"]]
    if crashed:
        problems.append(f"client threads crashed: {crashed}")
    out["problems"] = problems
    return out
