"""Trials made elsewhere, read for ``add_trials``: dicts, a CSV file or a JSON-lines file (no pandas).

Every row becomes the wire's added trial, ``{"params", "value" | "values" | "state": "failed",
"constraints", "user_attrs"}``:

* a dict already in that shape is taken as it is; a *flat* dict (``{"lr": 0.01, "depth": 6,
  "value": 0.12}``) is read like a CSV row;
* a CSV file has a header: one column per parameter (an empty cell: the parameter is inactive),
  ``value`` (a multi-objective study: ``values.0``, ``values.1``, ... one per objective),
  optionally ``state`` (``complete``, ``failed`` or ``pruned``), ``constraint.<name>`` per study
  constraint, ``user_attrs.<key>`` per attribute (a text cell: the attribute is that string) or
  ``user_attrs_json.<key>`` (a JSON cell: a number, list, object...). Cells are text: each
  parameter's is read by the study's space (a float, an int, or the choice whose text it is; when
  several choices have that text, such as ``1`` and ``"1"``, the cell is read as JSON:
  ``"1"`` is the string);
* a ``.jsonl`` / ``.ndjson`` file has one JSON object per line, in either dict form.

``Study.export`` writes these files (``calibo._export``).
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import CaliboError

__all__ = ["JSON_ATTRS", "MAX_ADD", "add_chunks", "choice_key", "cell", "read_rows", "resumable"]

JSON_ATTRS = "user_attrs_json."  # the CSV column prefix of attributes written as JSON
MAX_ADD = 1000  # trials one add request may carry (the server's bound)
_MISSING = object()


def read_rows(source: str | os.PathLike[str] | Iterable[dict[str, Any]], space: dict[str, Any],
              constraints: list[str]) -> list[dict[str, Any]]:
    """The added trials ``source`` holds (see the module docstring), checked for shape only: the
    server validates the values and answers a 422 naming the row and field."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.suffix.lower() in (".jsonl", ".ndjson"):
            rows: list[dict[str, Any]] = []
            with path.open(encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        item = json.loads(line)
                        if not isinstance(item, dict):
                            raise ValueError(f"{path}:{n}: a line must be a JSON object")
                        rows.append(_row(item, space, constraints, text=False))
            return rows
        with path.open(newline="", encoding="utf-8") as f:
            return [_row(item, space, constraints, text=True) for item in csv.DictReader(f)]
    return [_row(dict(item), space, constraints, text=False) for item in source]


def _row(item: dict[str, Any], space: dict[str, Any], constraints: list[str], text: bool) -> dict[str, Any]:
    if "params" in item:  # the wire's own shape
        return {k: v for k, v in item.items() if v is not None}
    out: dict[str, Any] = {"params": {}}
    cons: dict[str, Any] = {}
    attrs: dict[str, Any] = {}
    objectives: dict[int, float] = {}
    for key, raw in item.items():
        if key is None:  # csv.DictReader's key for the cells past the header's
            raise ValueError(f"a row has more cells than the header has columns: {raw!r}")
        if raw is None or (text and raw == ""):
            continue  # an empty cell: an inactive parameter, or no value
        if key in space:
            out["params"][key] = cell(raw, space[key]) if text else raw
        elif key == "value":
            out["value"] = float(raw)
        elif key == "state":
            out["state"] = str(raw)
        elif key == "values" and not text:  # a multi-objective row's objectives, as a list
            out["values"] = [float(v) for v in raw]
        elif key.startswith("values."):  # a CSV's objective columns: values.0, values.1, ...
            objectives[int(key.split(".", 1)[1])] = float(raw)
        elif key.startswith("constraint."):
            cons[key.split(".", 1)[1]] = float(raw)
        elif key.startswith("user_attrs."):
            attrs[key.split(".", 1)[1]] = raw
        elif key.startswith(JSON_ATTRS):
            try:
                attrs[key[len(JSON_ATTRS):]] = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                raise ValueError(f"column {key!r}: {raw!r} is not JSON") from None
        else:
            raise ValueError(f"column {key!r} is neither a parameter of the study nor value, values.<i>, "
                             "state, constraint.<name>, user_attrs.<key> or user_attrs_json.<key>")
    if objectives:
        if sorted(objectives) != list(range(len(objectives))):
            raise ValueError(f"objective columns must be values.0 to values.{len(objectives) - 1}")
        out["values"] = [objectives[i] for i in range(len(objectives))]
    if cons:
        missing = [c for c in constraints if c not in cons]
        unknown = [c for c in cons if c not in constraints]
        if missing or unknown:
            raise ValueError(f"constraint columns must be exactly {constraints}: missing {missing}, unknown {unknown}")
        out["constraints"] = [cons[c] for c in constraints]
    if attrs:
        out["user_attrs"] = attrs
    return out


def choice_key(v: Any) -> tuple[str, Any]:
    """A choice's identity, as the server tells choices apart: True and 1 apart, 1 and 1.0 together."""
    if isinstance(v, bool) or v is None:
        return ("const", v)
    if isinstance(v, int | float):
        return ("num", float(v))
    return (type(v).__name__, v)


def _text(choice: Any) -> str:
    return json.dumps(choice) if choice is None or isinstance(choice, bool) else str(choice)


def cell(raw: str, spec: dict[str, Any]) -> Any:
    """The parameter value a CSV cell ``raw`` holds, read by the parameter's ``spec``."""
    kind = spec.get("type")
    if kind == "float":
        return float(raw)
    if kind == "int":
        try:
            return int(raw)  # exactly, beyond 2**53 too
        except ValueError:
            f = float(raw)
            return int(f) if f.is_integer() else f  # "3.0" is 3; the server refuses 2.5
    choices = spec.get("choices", ())
    exact = [c for c in choices if raw == _text(c)]
    if len(exact) == 1:
        return exact[0]
    try:  # several choices have this text (1 and "1"), or none does ("" for the empty string): JSON
        decoded = json.loads(raw)
    except ValueError:
        decoded = _MISSING
    if decoded is None or isinstance(decoded, str | int | float | bool):
        typed = [c for c in choices if choice_key(c) == choice_key(decoded)]
        if len(typed) == 1:
            return typed[0]
    if exact:
        return exact[0]
    for choice in choices:  # "True", "none", "2.0" for 2
        if str(choice).lower() == raw.strip().lower():
            return choice
        if isinstance(choice, int | float) and not isinstance(choice, bool):
            try:
                if float(raw) == float(choice):
                    return choice
            except ValueError:
                pass
    return raw  # not a choice: the server answers which


def add_chunks(trials: list[dict[str, Any]], chunk: int) -> Iterable[tuple[int, list[dict[str, Any]]]]:
    """``(first row index, rows)`` of the requests ``add_trials`` sends: ``chunk`` rows each, at most
    ``MAX_ADD``."""
    size = max(1, min(int(chunk), MAX_ADD))
    for lo in range(0, len(trials), size):
        yield lo, trials[lo : lo + size]


def resumable(error: CaliboError, lo: int, added: list[dict[str, Any]]) -> CaliboError:
    """The error of the request that sent rows ``lo..``, said of the whole call: a field naming a row
    (``trials.<i>...``) names it by its index among every row given, and ``error.stored`` (rows
    ``0 .. stored - 1`` are stored, none from ``stored`` on: each request is all or none) and
    ``error.added`` (their views) say where to resume: ``add_trials(rows[error.stored:])`` once the
    bad row is fixed."""
    m = re.fullmatch(r"trials\.(\d+)(.*)", error.field or "", flags=re.S)
    if m:
        error.field = f"trials.{lo + int(m.group(1))}{m.group(2)}"
    if lo:
        error.message += (f" (rows 0-{lo - 1} of this call are stored, none from row {lo} on: "
                          f"add rows[{lo}:] once fixed)")
        error.args = (error.message,)
    error.stored = lo
    error.added = added
    return error
