"""The one writer of the numbers calibo stores and answers: finite JSON.

Every JSON column the storage writes and every JSON body the API answers goes through ``dumps``, and
every floating-point column through ``finite_float``, so that whatever path a number took (a told
value, a prediction, a calibration record, a snapshot's summary, an importance, a metric) what is
stored and read back is a finite float, the same on SQLite and PostgreSQL:

* ``-0.0`` is written ``0.0`` (SQLite keeps no sign in a REAL column: it stores an integral value as
  an integer, so the two backends would otherwise read back different signs);
* an infinity, which only a computation can make (the API refuses non-finite input with a 422),
  saturates at the largest float of its sign, and a NaN is written ``null``. Either is an engine
  fault: it is logged (once a minute per kind) with where it was found, and the request still
  succeeds, instead of one unrepresentable number failing every ask of a study from then on.

The common case costs one ``json.dumps``: the walk that rewrites numbers runs only when that refuses
a non-finite number or the text holds a ``-0.0``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from typing import Any

from .logs import Throttled

log = logging.getLogger("calibo.storage")

LARGEST = sys.float_info.max
# a JSON number token -0.0 (or -0.00...); a string holding the same text is a false alarm: the walk
# then finds nothing to change
_NEGATIVE_ZERO = re.compile(r"-0\.0+(?![0-9eE])")
_trouble = Throttled(log, 60.0)


def finite_float(v: float, where: str = "a number") -> float | None:
    """``v`` as stored: ``-0.0`` as ``0.0``, an infinity as the largest float of its sign, NaN as
    None (the non-finite cases logged as an engine fault found at ``where``)."""
    if v != v:  # NaN
        _trouble.log(logging.ERROR, "nan", "a NaN reached storage at %s: written as null", where)
        return None
    if v in (math.inf, -math.inf):
        _trouble.log(logging.ERROR, "inf", "an infinity reached storage at %s: written as %s", where,
                     "the largest float of its sign")
        return math.copysign(LARGEST, v)
    return 0.0 if v == 0.0 else v


def finite(o: Any, where: str = "") -> Any:
    """``o`` with every float as ``finite_float`` writes it (a new container only where one changed)."""
    if isinstance(o, float):
        return finite_float(o, where or "a number")
    if isinstance(o, dict):
        return {k: finite(v, f"{where}.{k}") for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v, f"{where}[{i}]") for i, v in enumerate(o)]
    return o


def dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps(obj, **kw)`` of ``finite(obj)``: never NaN or infinity, never ``-0.0``."""
    try:
        out = json.dumps(obj, allow_nan=False, **kw)
    except ValueError:  # a non-finite float: rewritten, and logged by finite_float
        return json.dumps(finite(obj), allow_nan=False, **kw)
    if "-0.0" in out and _NEGATIVE_ZERO.search(out):
        return json.dumps(finite(obj), allow_nan=False, **kw)
    return out
