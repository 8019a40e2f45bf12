"""Short ``repr``s for the client's objects: the identifying fields, long values cut.

A trial's params, a prediction's quantiles or a server's message can be long; a repr stays under
``LIMIT`` characters (an interactive session, a log line), showing what tells the object apart.
"""

from __future__ import annotations

from typing import Any

LIMIT = 200  # the longest repr of any client object
PARAMS = 90  # the longest params shown


def value(v: Any) -> str:
    """A scalar as a repr shows it: a long float to 6 significant digits, long text cut."""
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


def prediction(pred: dict[str, Any] | None) -> str | None:
    """A prediction as ``mean=1.2, 90%=[0.5, 2.1]`` (the widest interval), or ``objectives=2``."""
    if not isinstance(pred, dict):
        return None
    if pred.get("objectives"):
        return f"objectives={len(pred['objectives'])}"
    parts = [f"mean={value(pred.get('mean'))}"]
    intervals = [iv for iv in pred.get("intervals") or [] if isinstance(iv, dict)]
    if intervals:
        iv = max(intervals, key=lambda iv: iv.get("coverage") or 0.0)
        lo, hi = iv.get("lower"), iv.get("upper")  # None: unbounded on that side
        parts.append(f"{100 * float(iv.get('coverage') or 0):g}%=[{'-inf' if lo is None else value(lo)}, "
                     f"{'inf' if hi is None else value(hi)}]")
    return ", ".join(parts)


def build(obj: Any, *fields: tuple[str, str | None]) -> str:
    """``Name(a=..., b=...)`` from pre-formatted fields (None: left out), cut at ``LIMIT``."""
    body = ", ".join(f"{name}={text}" for name, text in fields if text is not None)
    out = f"{type(obj).__name__}({body})"
    return out if len(out) <= LIMIT else out[: LIMIT - 4] + "...)"
