"""Trials out of a study: files that ``add_trials`` reads back unchanged, and a pandas DataFrame.

``write_trials`` writes a study's finished trials (complete, failed, pruned) as CSV or JSON lines,
in exactly the format ``calibo._rows`` reads, so that exporting a study and adding the file to a
fresh study of the same definition gives the same trials: parameters with their types (inactive
conditional ones left out), value or values, state, constraint values and user attributes.

* JSON lines: one trial per line in the wire's shape, ``{"params", "state", "value" | "values",
  "constraints", "user_attrs"}``; JSON keeps every type.
* CSV: one column per parameter (an empty cell: inactive), ``value`` or ``values.0``, ...,
  ``state``, ``constraint.<name>`` per constraint, then the user attributes. Numbers are written
  as Python's ``repr`` (floats read back exactly, ints stay ints); a choice is written as its
  text when that reads back as the same choice, else as JSON (``"1"`` for the string when ``1``
  is a choice too, ``""`` for the empty string). An attribute whose values are all non-empty
  strings is a ``user_attrs.<key>`` column; any other is a ``user_attrs_json.<key>`` column of JSON
  cells. A study whose parameter names clash with those columns is refused (JSON lines has no
  such clash).

``trials_frame`` is ``Study.trials_dataframe``: Optuna's layout (``number``, ``value`` or
``values_<i>``, ``datetime_start``, ``datetime_complete``, ``duration``, ``params_<name>``,
``user_attrs_<key>``, ``state``: each trial's :class:`~calibo.TrialState` by its name, as Optuna's
frame shows it) plus ``constraints_<name>``; pandas is imported only there.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._rows import JSON_ATTRS, cell, choice_key
from .models import TrialRecord, TrialState

__all__ = ["DATAFRAME_ATTRS", "FINISHED", "export_format", "trials_frame", "wire_rows", "write_trials"]

FINISHED = ("complete", "failed", "pruned")  # what add_trials takes
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
DATAFRAME_ATTRS = ("number", "value", "datetime_start", "datetime_complete", "duration", "params", "user_attrs",
                   "constraints", "state")
FRAME_ATTRS = (*DATAFRAME_ATTRS, "values", "id", "origin", "worker_id", "prediction", "system_attrs")
PANDAS_MISSING = "trials_dataframe needs pandas: pip install 'calibo[pandas]'"


def export_format(path: str | os.PathLike[str], format: str | None) -> str:
    """``csv`` or ``jsonl``: ``format`` when given, else by the file's suffix."""
    if format is not None:
        if format not in ("csv", "jsonl"):
            raise ValueError(f"format must be 'csv' or 'jsonl', got {format!r}")
        return format
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"cannot tell the format of {os.fspath(path)!r}: name it .csv, .jsonl or .ndjson, "
                         "or pass format='csv' / 'jsonl'")
    return FORMATS[suffix]


def wire_rows(trials: Iterable[TrialRecord]) -> list[dict[str, Any]]:
    """The finished trials among ``trials`` as add_trials' wire rows, by number."""
    out = []
    for t in sorted(trials, key=lambda t: t.number):
        if t.state not in FINISHED:
            continue
        row: dict[str, Any] = {"params": dict(t.params), "state": t.state}
        if t.values is not None:
            row["values"] = list(t.values)
        elif t.value is not None:
            row["value"] = t.value
        if t.constraints is not None:
            row["constraints"] = list(t.constraints)
        if t.user_attrs:
            row["user_attrs"] = dict(t.user_attrs)
        out.append(row)
    return out


def write_trials(path: str | os.PathLike[str], trials: Iterable[TrialRecord], space: dict[str, Any],
                 constraints: Sequence[str], objectives: int = 1, format: str | None = None) -> int:
    """Write the finished trials among ``trials`` to ``path`` (see the module docstring); how many.
    ``space``, ``constraints`` and ``objectives`` (how many) are the study's."""
    kind = export_format(path, format)
    rows = wire_rows(trials)
    if kind == "jsonl":
        with Path(path).open("w", encoding="utf-8", newline="\n") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        return len(rows)
    header, cells = _csv_table(rows, space, list(constraints), objectives)
    with Path(path).open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(cells)
    return len(rows)


def _csv_table(rows: list[dict[str, Any]], space: dict[str, Any], constraints: list[str], objectives: int
               ) -> tuple[list[str], list[list[str]]]:
    multi = objectives > 1
    outcome = [f"values.{i}" for i in range(objectives)] if multi else ["value"]
    fixed = [*outcome, "state", *(f"constraint.{c}" for c in constraints)]
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r.get("user_attrs") or {}))
    plain = {k: all(isinstance(r["user_attrs"][k], str) and r["user_attrs"][k] != ""
                    for r in rows if k in (r.get("user_attrs") or {})) for k in keys}
    attr_cols = [f"user_attrs.{k}" if plain[k] else f"{JSON_ATTRS}{k}" for k in keys]
    clash = sorted(p for p in space if p in fixed or p in ("values", "state") or p.startswith(
        ("values.", "constraint.", "user_attrs.", JSON_ATTRS)) or p in attr_cols)
    if clash:
        raise ValueError(f"parameter names {clash} clash with the CSV's own columns: export to .jsonl instead")
    header = [*space, *fixed, *attr_cols]
    texts: dict[tuple[str, Any], str] = {}
    out = []
    for n, r in enumerate(rows):
        params = r["params"]
        line = [_param_text(params[p], space[p], p, texts) if p in params else "" for p in space]
        if multi:
            vs = r.get("values") or []
            line += [repr(float(vs[i])) if i < len(vs) else "" for i in range(objectives)]
        else:
            line.append("" if r.get("value") is None else repr(float(r["value"])))
        line.append(r["state"])
        cons = r.get("constraints")
        line += [repr(float(c)) for c in cons] if cons else [""] * len(constraints)
        attrs = r.get("user_attrs") or {}
        for k in keys:
            if k not in attrs:
                line.append("")
            elif plain[k]:
                line.append(attrs[k])
            else:
                line.append(json.dumps(attrs[k], ensure_ascii=False, allow_nan=False))
        if len(line) != len(header):  # pragma: no cover - a bug here, not the caller's
            raise AssertionError(f"row {n}: {len(line)} cells for {len(header)} columns")
        out.append(line)
    return header, out


def _param_text(value: Any, spec: dict[str, Any], name: str, texts: dict[tuple[str, Any], str]) -> str:
    """The cell ``cell`` reads back as ``value`` (cached per parameter and choice)."""
    kind = spec.get("type")
    if kind == "float":
        return repr(float(value))
    if kind == "int":
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else repr(float(value))
    key = (name, choice_key(value))
    if key not in texts:
        plain = json.dumps(value) if value is None or isinstance(value, bool) else str(value)
        for text in (plain, json.dumps(value, ensure_ascii=False)):
            if text != "" and choice_key(cell(text, spec)) == choice_key(value):
                texts[key] = text
                break
        else:
            raise ValueError(f"parameter {name!r}: the value {value!r} cannot be written to a CSV cell that "
                             "reads back as itself: export to .jsonl instead")
    return texts[key]


# ----------------------------------------------------------------- DataFrame
def trials_frame(trials: Iterable[TrialRecord], directions: Sequence[str] | None, constraints: Sequence[str],
                 attrs: Sequence[str] = DATAFRAME_ATTRS, multi_index: bool = False) -> Any:
    """``Study.trials_dataframe``: one row per trial (by number), the columns ``attrs`` name, in
    Optuna's layout; ``multi_index``: ``(attr, key)`` column pairs instead of ``choice_key`` names."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError(PANDAS_MISSING) from e
    unknown = [a for a in attrs if a not in FRAME_ATTRS]
    if unknown:
        raise ValueError(f"unknown attrs {unknown}: choose among {list(FRAME_ATTRS)}")
    trials = sorted(trials, key=lambda t: t.number)
    if not trials:
        return pd.DataFrame()
    multi = directions is not None and len(directions) > 1
    if multi:
        attrs = tuple("values" if a == "value" else a for a in attrs)
    attrs = tuple(dict.fromkeys(attrs))
    records = []
    columns: dict[str, dict[tuple[str, Any], None]] = {a: {} for a in attrs}
    for t in trials:
        record: dict[tuple[str, Any], Any] = {}
        for a in attrs:
            for col, v in _fields(t, a, directions, constraints):
                record[col] = v
                columns[a][col] = None
        records.append(record)
    ordered: list[tuple[str, Any]] = []
    for a in attrs:
        cols = list(columns[a])
        if a in ("params", "user_attrs", "prediction"):
            cols.sort(key=lambda c: str(c[1]))
        ordered += cols
    frame = pd.DataFrame(records, columns=pd.MultiIndex.from_tuples(ordered) if ordered else None)
    if not multi_index and ordered:
        frame.columns = ["_".join(str(p) for p in col if p != "") for col in ordered]
    return frame


def _fields(t: TrialRecord, attr: str, directions: Sequence[str] | None, constraints: Sequence[str]
            ) -> list[tuple[tuple[str, Any], Any]]:
    """The ``((attr, key), value)`` cells of trial ``t`` for ``attr``."""
    start = None if t.state == "waiting" else t.asked_at
    if attr == "value":
        return [((attr, ""), t.value)]
    if attr == "values":
        vs = t.values if t.values is not None else [t.value] if not directions or len(directions) < 2 else None
        n = len(directions) if directions else 1
        return [((attr, i), None if vs is None else vs[i]) for i in range(n)]
    if attr == "datetime_start":
        return [((attr, ""), start)]
    if attr == "datetime_complete":
        return [((attr, ""), t.finished_at)]
    if attr == "duration":
        return [((attr, ""), t.finished_at - start if start is not None and t.finished_at is not None else None)]
    if attr in ("params", "user_attrs"):
        return [((attr, k), v) for k, v in getattr(t, attr).items()]
    if attr == "constraints":
        cons = t.constraints
        return [((attr, c), None if cons is None else cons[i]) for i, c in enumerate(constraints)]
    if attr == "state":
        state = t.state
        return [((attr, ""), state.name if isinstance(state, TrialState) else str(state).upper())]
    if attr == "prediction":
        return _prediction(t.prediction)
    if attr == "system_attrs":  # Optuna's; a calibo trial has none
        return []
    return [((attr, ""), getattr(t, attr))]  # id, origin, worker_id


def _prediction(pred: dict[str, Any] | None) -> list[tuple[tuple[str, Any], Any]]:
    """A trial's prediction at ask: the mean and each interval's bounds (per objective, suffixed
    ``_<i>``, in a multi-objective study)."""
    if not pred:
        return []
    outcomes = pred.get("objectives") or [pred]
    out = []
    for j, o in enumerate(outcomes):
        suffix = f"_{j}" if len(outcomes) > 1 else ""
        out.append((("prediction", f"mean{suffix}"), o.get("mean")))
        for iv in o.get("intervals") or []:
            cov = f"{100 * float(iv['coverage']):g}"
            out.append((("prediction", f"lower{cov}{suffix}"), iv.get("lower")))
            out.append((("prediction", f"upper{cov}{suffix}"), iv.get("upper")))
    return out
