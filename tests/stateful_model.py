"""The reference model behind tests/test_stateful.py: calibo's studies and trials as plain Python
data, and what each request should answer, written from the wire contract (docs, DESIGN.md) alone.

Nothing here imports calibo: the model must stay independent of the code it checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# ------------------------------------------------------------------ the studies the test creates
FAST = {"n_warmup": 5, "conformalize_from": 8, "split_from": 14, "n_candidates": 300}
SEED = 7  # explicit, so a definition does not depend on the name (a copy has its source's definition)

# key orders deliberately not alphabetical: params and spaces must read back in the order written
F1 = {"x": {"type": "float", "low": -5.0, "high": 5.0}}
F2 = {"x2": {"type": "float", "low": 0.0, "high": 15.0}, "x1": {"type": "float", "low": -5.0, "high": 10.0}}
MIXED = {"zeta": {"type": "float", "low": 0.0001, "high": 1.0, "log": True},
         "alpha": {"type": "int", "low": 1, "high": 8},
         "mid": {"type": "categorical", "choices": ["c", "a", "b"]}}
COND = {"kind": {"type": "categorical", "choices": ["a", "b"]},
        "z": {"type": "float", "low": 0.0, "high": 1.0, "condition": {"parent": "kind", "values": ["b"]}}}

HEARTBEAT_S = 1.0  # the "hb" studies' heartbeat timeout
DEFAULT_HEARTBEAT_S = 1800.0  # the server's default (every other study)

KINDS: dict[str, dict[str, Any]] = {
    "f1": {"space": F1, "direction": "minimize"},
    "f2": {"space": F2, "direction": "maximize"},
    "mixed": {"space": MIXED, "direction": "minimize"},
    "cond": {"space": COND, "direction": "minimize"},
    "multi": {"space": F2, "directions": ["minimize", "maximize"]},
    "constr": {"space": F1, "direction": "minimize", "constraints": ["c1"]},
    "hb": {"space": F1, "direction": "minimize", "settings": {"heartbeat_timeout_seconds": HEARTBEAT_S}},
}

# values enqueues and added trials draw from: few, so that skip_if_exists finds matches
PARAM_POOL: dict[str, list[Any]] = {
    "x": [-5.0, -0.5, 0.0, 2.5, 5.0], "x2": [0.0, 7.5, 15.0], "x1": [-5.0, 3.0, 10.0],
    "zeta": [0.0001, 0.01, 1.0], "alpha": [1, 4, 8], "mid": ["c", "a", "b"],
    "kind": ["a", "b"], "z": [0.0, 0.5, 1.0],
}
BAD_VALUE: dict[str, Any] = {"x": 99.0, "x2": -1.0, "x1": 10.5, "zeta": 2.0, "alpha": 9, "mid": "q",
                             "kind": "c", "z": 1.5}

# objective values: ordinary and extreme finite ones (the largest, the smallest subnormal, -0.0)
VALUES = [0.5, 1.0, -3.25, 2.0, 0.1, 0.0, 123456.789, 1e308, -1e308, 1e-308, -0.0, 5e-324,
          1.7976931348623157e308, -2.2250738585072014e-308]
CONSTRAINT_VALUES = [-1.0, 0.0, 0.5, -0.0, 3.0]

# user attribute keys and values: quotes, backslashes, non-ASCII, emoji, dots; values a filter tells apart
ATTR_KEYS = ['q"uote', "back\\slash", "é", "🔥", "a.b", "run", "zz", "aa"]
ATTR_VALUES: list[Any] = ["x", "y", "1", 1, 1.5, True, None, "é:ü 🔥", "",
                          {"b": 1, "a": [1, {"z": 0, "y": "é"}]}]


def create_body(name: str, kind: str, user_attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    k = KINDS[kind]
    body: dict[str, Any] = {"name": name, "space": k["space"], "seed": SEED,
                            "settings": {**FAST, **k.get("settings", {})}}
    for key in ("direction", "directions", "constraints"):
        if key in k:
            body[key] = k[key]
    if user_attrs is not None:
        body["user_attrs"] = user_attrs
    return body


def heartbeat_timeout(kind: str) -> float:
    return KINDS[kind].get("settings", {}).get("heartbeat_timeout_seconds", DEFAULT_HEARTBEAT_S)


# ------------------------------------------------------------------ spaces
def active_keys(space: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The parameters active under ``params``, in the space's order: a conditional one when its
    parent is active and takes one of its values."""
    out: list[str] = []
    for k, spec in space.items():
        cond = spec.get("condition")
        if cond is None or (cond["parent"] in out and params.get(cond["parent"]) in cond["values"]):
            out.append(k)
    return out


def valid_value(spec: dict[str, Any], v: Any) -> bool:
    if spec["type"] == "categorical":
        return any(type(v) is type(c) and v == c for c in spec["choices"])
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    if spec["type"] == "int" and not (isinstance(v, int) or float(v).is_integer()):
        return False
    return spec["low"] <= v <= spec["high"]


def full_params_problems(space: dict[str, Any], params: Any) -> list[str]:
    """Why ``params`` is not a valid whole configuration of ``space`` (exactly the active parameters,
    each valid); the key order is checked apart (``order_problem``)."""
    if not isinstance(params, dict):
        return [f"params is {params!r}, not an object"]
    want = active_keys(space, params)
    out = []
    if set(params) != set(want):
        out.append(f"params keys {list(params)} but the active ones are {want}")
    out += [f"params.{k}={params[k]!r} outside the space" for k in want
            if k in params and not valid_value(space[k], params[k])]
    return out


def order_problem(space: dict[str, Any], params: dict[str, Any]) -> str | None:
    order = [k for k in space if k in params]
    return None if list(params) == order else f"params keys in order {list(params)}, space order {order}"


def partial_problem(space: dict[str, Any], params: dict[str, Any]) -> str | None:
    """The field an enqueue of these (some) parameters is refused for, or None: an unknown
    parameter, a bad value, a conditional parameter without its parent or whose parent makes it
    inactive."""
    for k, v in params.items():
        if k not in space or not valid_value(space[k], v):
            return f"params.{k}"
    for k in params:
        cond = space[k].get("condition")
        if cond is not None and (cond["parent"] not in params or params[cond["parent"]] not in cond["values"]):
            return f"params.{k}"
    return None


def in_space_order(space: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in space if k in params}


# ------------------------------------------------------------------ JSON comparison
def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def json_diff(exp: Any, act: Any, path: str, notes: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Differences of ``act`` from ``exp`` as JSON: ``(content, order)``. Numbers compare exactly by
    value (1 and 1.0 alike; -0.0 read back as 0.0 is noted in ``notes``, not a difference), bools
    only equal bools, objects compare keys and, apart, their order."""
    content: list[str] = []
    order: list[str] = []
    if is_num(exp) and is_num(act):
        if float(exp) != float(act):
            content.append(f"{path}: expected {exp!r}, got {act!r}")
        elif notes is not None and isinstance(exp, float) and exp == 0 and \
                math.copysign(1.0, exp) != math.copysign(1.0, float(act)):
            notes.append(f"{path}: {exp!r} read back as {act!r}")
    elif isinstance(exp, dict) and isinstance(act, dict):
        if set(exp) != set(act):
            content.append(f"{path}: keys {sorted(act)} (expected {sorted(exp)})")
        for k in exp:
            if k in act:
                c, o = json_diff(exp[k], act[k], f"{path}.{k}" if path else str(k), notes)
                content += c
                order += o
        if set(exp) == set(act) and list(exp) != list(act):
            order.append(f"{path or '.'}: keys in order {list(act)}, written as {list(exp)}")
    elif isinstance(exp, list) and isinstance(act, list):
        if len(exp) != len(act):
            content.append(f"{path}: {len(act)} items, expected {len(exp)}: {act!r} vs {exp!r}"[:400])
        else:
            for i, (e, a) in enumerate(zip(exp, act, strict=True)):
                c, o = json_diff(e, a, f"{path}.{i}", notes)
                content += c
                order += o
    elif type(exp) is not type(act) or exp != act:
        content.append(f"{path}: expected {exp!r}, got {act!r}"[:400])
    return content, order


# ------------------------------------------------------------------ studies and trials
FINISHED = ("complete", "failed", "pruned")
STATES = ("waiting", "running", "complete", "failed", "pruned")


@dataclass
class Trial:
    id: int
    number: int
    state: str  # waiting, running, complete, failed, pruned
    params: dict[str, Any]
    origin: str = "asked"  # asked, enqueued, added, copied
    value: float | None = None
    values: list[float] | None = None
    constraints: list[float] | None = None
    user_attrs: dict[str, Any] = field(default_factory=dict)
    expired: bool = False  # failed by the service after its heartbeat timeout (a late tell is recorded)
    alive: tuple[float, float] | None = None  # (sent, answered) of the request of its last sign of life
    finish_seq: int = 0
    # enqueued whole with skip_if_exists: an ask drops it once a trial finished with its params
    skip: bool = False

    def view(self) -> dict[str, Any]:
        """The fields of the trial view the model predicts."""
        return {"id": self.id, "number": self.number, "state": self.state, "params": self.params,
                "value": None if self.values is not None else self.value, "values": self.values,
                "constraints": self.constraints,
                "feasible": None if self.constraints is None else all(c <= 0 for c in self.constraints),
                "origin": self.origin, "user_attrs": self.user_attrs}


@dataclass
class Study:
    id: int
    name: str
    kind: str
    user_attrs: dict[str, Any] = field(default_factory=dict)
    trials: dict[int, Trial] = field(default_factory=dict)  # by id, in number order
    next_number: int = 0
    finish_seq: int = 0
    best_id: int | None = None
    deleted: bool = False

    @property
    def space(self) -> dict[str, Any]:
        return KINDS[self.kind]["space"]

    @property
    def multi(self) -> bool:
        return "directions" in KINDS[self.kind]

    @property
    def constrained(self) -> bool:
        return "constraints" in KINDS[self.kind]

    def new_trial(self, tid: int, state: str, params: dict[str, Any], origin: str, **kw: Any) -> Trial:
        t = Trial(tid, self.next_number, state, params, origin, **kw)
        self.next_number += 1
        self.trials[tid] = t
        return t

    def finish(self, t: Trial, state: str, value: float | None = None, values: list[float] | None = None,
               constraints: list[float] | None = None, attrs: dict[str, Any] | None = None) -> None:
        """A trial's outcome recorded: finishing order, the best feasible completed trial (strictly
        better replaces it: of equal values the first finished stays best)."""
        self.finish_seq += 1
        t.state, t.finish_seq, t.expired, t.alive = state, self.finish_seq, False, None
        t.value = values[0] if values is not None else value
        t.values = values
        if constraints is not None:
            t.constraints = constraints
        if attrs:
            t.user_attrs = {**t.user_attrs, **attrs}
        if state == "complete" and not self.multi and all(c <= 0 for c in t.constraints or ()):
            best = self.trials.get(self.best_id) if self.best_id is not None else None
            minimize = KINDS[self.kind]["direction"] == "minimize"
            if best is None or (t.value < best.value if minimize else t.value > best.value):
                self.best_id = t.id

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATES}
        for t in self.trials.values():
            out[t.state] += 1
        out["total"] = len(self.trials)
        return out

    def best_view(self) -> dict[str, Any] | None:
        if self.multi or self.best_id is None:
            return None
        t = self.trials[self.best_id]
        return {"id": t.id, "number": t.number, "params": t.params, "value": t.value,
                "constraints": t.constraints, "values": t.values}

    def front(self) -> list[int]:
        """A multi-objective study's Pareto front (ids by number): completed trials no other dominates,
        of equal ones the first completed."""
        signs = [1.0 if d == "minimize" else -1.0 for d in KINDS[self.kind]["directions"]]
        done = sorted((t for t in self.trials.values() if t.state == "complete" and t.values is not None),
                      key=lambda t: t.finish_seq)
        ys = [[s * v for s, v in zip(signs, t.values, strict=True)] for t in done]
        keep = []
        for i, t in enumerate(done):
            dominated = any(all(a <= b for a, b in zip(o, ys[i], strict=True)) and o != ys[i] for o in ys)
            equal_before = any(ys[j] == ys[i] for j in range(i))
            if not dominated and not equal_before:
                keep.append(t)
        return [t.id for t in sorted(keep, key=lambda t: t.number)]

    def skip_match(self, params: dict[str, Any]) -> Trial | None:
        """The trial an enqueue with skip_if_exists answers: the first (by number) whose parameters
        include every given value, whatever its state."""
        for t in self.trials.values():
            if all(k in t.params and t.params[k] == v for k, v in params.items()):
                return t
        return None

    def waiting(self) -> list[Trial]:
        return [t for t in self.trials.values() if t.state == "waiting"]

    def evaluated_since(self) -> list[Trial]:
        """The waiting trials an ask takes off the queue: enqueued whole with skip_if_exists, whose
        params a finished trial has (added, or told, after the enqueue)."""
        done = [t.params for t in self.trials.values() if t.state in FINISHED]
        return [t for t in self.waiting() if t.skip and t.params in done]

    def with_attr(self, key: str, value: str) -> list[int]:
        return [t.id for t in self.trials.values() if isinstance(t.user_attrs.get(key), str)
                and t.user_attrs[key] == value]


def staleness(alive: tuple[float, float], event: tuple[float, float], timeout: float, eps: float = 0.05) -> str:
    """Whether a running trial last heard from during ``alive`` (sent, answered) had expired when an
    event the server handled during ``event`` looked at it: ``stale``, ``alive`` or ``maybe``
    (too close to the timeout to say from the client's clock)."""
    if event[0] - alive[1] > timeout + eps:
        return "stale"
    if event[1] - alive[0] < timeout - eps:
        return "alive"
    return "maybe"


def tell_problem(s: Study, body: dict[str, Any]) -> str | None:
    """The field a tell (or an added row) with ``body`` is refused for by study ``s`` (a 422), or None:
    a multi-objective study takes ``values``, one per objective, a single-objective one ``value``; a
    completed trial needs its value(s), a failed one has none; a constrained study's completed trial
    needs one constraint value per constraint, and a study without constraints takes none."""
    state = body.get("state", "complete")
    if s.multi:
        if "value" in body:
            return "value"
        if (state == "complete") != ("values" in body):
            return "values"
    else:
        if "values" in body:
            return "values"
        if (state == "complete" and "value" not in body) or (state == "failed" and "value" in body):
            return "value"
    if "constraints" in body:
        if not s.constrained or len(body["constraints"]) != len(KINDS[s.kind]["constraints"]):
            return "constraints"
    elif s.constrained and state == "complete":
        return "constraints"
    return None
