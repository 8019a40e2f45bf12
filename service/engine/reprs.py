"""Short ``repr``s for the engine's objects: the identifying fields, arrays as their shapes.

A snapshot holds thousands of candidates, a prediction its quantiles and conformal point sets; a
repr stays under ``LIMIT`` characters and shows what tells the object apart. Reprs only: nothing
here changes what the engine computes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

LIMIT = 200  # the longest repr of any engine object
PARAMS = 90  # the longest params shown


def value(v: Any) -> str:
    """A scalar, an array (its shape) or a list (short ones whole, else its length), briefly."""
    if isinstance(v, np.ndarray):
        return f"<array {tuple(v.shape)}>"
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, list | tuple) and v and (len(v) > 4 or len(repr(v)) > 60):
        return f"<{len(v)} items>"
    if isinstance(v, list | tuple):
        inner = ", ".join(value(x) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    text = repr(v)
    if isinstance(v, float) and len(text) > 10:
        return f"{v:.6g}"
    return text if len(text) <= 40 else text[:36] + "...'"


def params(p: dict[str, Any] | None, width: int = PARAMS) -> str:
    """``{'x': 0.25, 'k': 'a', ...}``: the first items that fit in ``width``, then how many more."""
    if not p:
        return "{}"
    items = [f"{k!r}: {value(v)}" for k, v in p.items()]
    out = ""
    for i, item in enumerate(items):
        more = f", ...{len(items) - i} more" if i else f"...{len(items)} params"
        if len(out) + len(item) + 2 > width - len(more):
            return "{" + out + more + "}"
        out += (", " if out else "") + item
    return "{" + out + "}"


def end(v: Any, unbounded: str) -> str:
    """An interval's end: an unbounded one (``None`` as data, infinite in an ``Interval``) as ``unbounded``."""
    return unbounded if v is None or (isinstance(v, float) and math.isinf(v)) else value(v)


def interval(mean: Any, intervals: list[Any]) -> str:
    """``mean=1.2, 90%=[0.5, 2.1]``: the mean and the widest interval (dicts or ``Interval``s)."""
    def get(iv: Any, key: str) -> Any:
        return iv.get(key) if isinstance(iv, dict) else getattr(iv, key, None)

    out = f"mean={value(mean)}"
    if intervals:
        iv = max(intervals, key=lambda iv: get(iv, "coverage") or 0.0)
        out += (f", {100 * float(get(iv, 'coverage') or 0):g}%="
                f"[{end(get(iv, 'lower'), '-inf')}, {end(get(iv, 'upper'), 'inf')}]")
    return out


def prediction(pred: Any) -> str | None:
    """A ``Prediction`` or its plain data (``to_dict``), as ``(mean=..., 90%=[...])``."""
    if pred is None:
        return None
    if isinstance(pred, dict):
        if pred.get("objectives"):
            return f"(objectives={len(pred['objectives'])})"
        return f"({interval(pred.get('mean'), pred.get('intervals') or [])})"
    outcomes = getattr(pred, "outcomes", None) or []
    if len(outcomes) != 1:
        return f"(objectives={len(outcomes)})"
    return f"({interval(outcomes[0].mean, outcomes[0].intervals)})"


def build(obj: Any, *fields: tuple[str, str | None]) -> str:
    """``Name(a=..., b=...)`` from pre-formatted fields (None: left out), cut at ``LIMIT``."""
    body = ", ".join(f"{name}={text}" for name, text in fields if text is not None)
    out = f"{type(obj).__name__}({body})"
    return out if len(out) <= LIMIT else out[: LIMIT - 4] + "...)"


def fields(obj: Any, *names: str) -> str:
    """``build`` over attributes of ``obj``, each shown with :func:`value`."""
    return build(obj, *((n, value(getattr(obj, n))) for n in names))
