"""Trials made elsewhere, read for ``add_trials``: dicts, a CSV file or a JSON-lines file (no pandas).

Every row becomes the wire's added trial, ``{"params", "value" | "values" | "state": "failed",
"constraints", "user_attrs"}``:

* a dict already in that shape is taken as it is; a *flat* dict (``{"lr": 0.01, "depth": 6,
  "value": 0.12}``) is read like a CSV row;
* a CSV file has a header: one column per parameter (an empty cell: the parameter is inactive),
  ``value`` (a multi-objective study: ``values.0``, ``values.1``, ... one per objective),
  optionally ``state`` (``complete`` or ``failed``), ``constraint.<name>`` per study
  constraint and ``user_attrs.<key>`` per attribute. Cells are text: each parameter's is read by
  the study's space (a float, an int, or the choice whose text it is);
* a ``.jsonl`` / ``.ndjson`` file has one JSON object per line, in either dict form.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["read_rows"]

RESERVED = ("value", "state")


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
        if raw is None or (text and raw == ""):
            continue  # an empty cell: an inactive parameter, or no value
        if key in space:
            out["params"][key] = _cell(raw, space[key]) if text else raw
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
        else:
            raise ValueError(f"column {key!r} is neither a parameter of the study nor value, values.<i>, "
                             "state, constraint.<name> or user_attrs.<key>")
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


def _cell(raw: str, spec: dict[str, Any]) -> Any:
    kind = spec.get("type")
    if kind == "float":
        return float(raw)
    if kind == "int":
        return int(float(raw)) if float(raw).is_integer() else float(raw)  # the server refuses 2.5
    for choice in spec.get("choices", ()):
        if raw == (json.dumps(choice) if choice is None or isinstance(choice, bool) else str(choice)):
            return choice
    for choice in spec.get("choices", ()):  # "True", "none", "2.0" for 2
        if str(choice).lower() == raw.strip().lower():
            return choice
        if isinstance(choice, int | float) and not isinstance(choice, bool):
            try:
                if float(raw) == float(choice):
                    return choice
            except ValueError:
                pass
    return raw  # not a choice: the server answers which
