"""``Study.export`` and ``add_trials`` round trip, and ``Study.trials_dataframe``.

A study with float, int, log-scaled, categorical (choices of mixed types whose texts collide: ``1``
and ``"1"``, ``True`` and ``"true"``, ``None`` and ``"null"``, the empty string), ordinal and
conditional parameters, constraints, failed and pruned trials and user attributes of every JSON
type is exported to CSV and to JSON lines, and the file added to a fresh study of the same
definition: the trials compare equal (parameters with their types, value or values, state,
constraints, user attributes), sync and async, single- and multi-objective. Through a live server.
"""

from __future__ import annotations

import asyncio
import csv
import random
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import LiveServer, unique
from test_api import BRANIN

from calibo import AsyncClient, Client
from calibo._export import trials_frame, write_trials
from calibo._rows import read_rows
from calibo.models import TrialRecord

KERNELS = ["rbf", "poly", 1, "1", True, "true", None, "null", 2.5, "", "a,b \"q\""]
SPACE = {
    "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "depth": {"type": "int", "low": 1, "high": 12},
    "batch": {"type": "int", "low": 16, "high": 1024, "log": True},
    "kernel": {"type": "categorical", "choices": KERNELS},
    "degree": {"type": "int", "low": 2, "high": 5, "condition": {"parent": "kernel", "values": ["poly"]}},
    "gamma": {"type": "float", "low": 1e-3, "high": 10.0, "log": True,
              "condition": {"parent": "kernel", "values": ["rbf", "poly"]}},
    "size": {"type": "ordinal", "choices": [8, 16, 32]},
}
ATTRS = [{"run": "r-1"}, {"git": "4f2a9c1", "n": 3}, {"tags": ["a", "b"], "cfg": {"x": 1.5, "y": None}},
         {"flag": True, "empty": "", "line": "two\nlines, \"quoted\""}, {}, {"big": 2**62, "tiny": 5e-324}]


def _params(rng: random.Random, i: int) -> dict[str, Any]:
    kernel = KERNELS[i % len(KERNELS)]
    p = {"lr": 10 ** rng.uniform(-5, 0), "dropout": rng.choice([0.0, 0.5, rng.uniform(0, 0.5)]),
         "depth": rng.randint(1, 12), "batch": rng.randint(16, 1024), "kernel": kernel, "size": rng.choice([8, 16, 32])}
    if kernel == "poly":
        p["degree"] = rng.randint(2, 5)
    if kernel in ("rbf", "poly"):
        p["gamma"] = 10 ** rng.uniform(-3, 1)
    return p


def _rows(n: int, seed: int, objectives: int, constraints: int) -> list[dict[str, Any]]:
    """Trials evaluated elsewhere: completed, failed and pruned (with and without a last value)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        row: dict[str, Any] = {"params": _params(rng, i), "user_attrs": ATTRS[i % len(ATTRS)]}
        kind = ("complete", "complete", "failed", "pruned")[i % 4]
        if kind == "complete":
            if objectives == 1:
                row["value"] = rng.gauss(0, 1e3) / 7
            else:
                row["values"] = [rng.uniform(-1, 1) / 3 for _ in range(objectives)]
            if constraints:
                row["constraints"] = [rng.uniform(-1, 1) for _ in range(constraints)]
        else:
            row["state"] = kind
            if kind == "pruned" and objectives == 1 and i % 8 == 3:
                row["value"] = rng.uniform(0, 1) / 3
        if not row["user_attrs"]:
            del row["user_attrs"]
        rows.append(row)
    return rows


def _typed(v: Any) -> Any:
    """A value with its type spelled out, so that True and 1, 1 and "1", 1 and 1.0 compare apart."""
    if isinstance(v, dict):
        return {k: _typed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_typed(x) for x in v]
    return (type(v).__name__, v)


def _same(t: TrialRecord) -> tuple:
    return (t.state, _typed(t.params), t.value, t.values, t.constraints, _typed(t.user_attrs))


def _finished(trials: list[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if t.state in ("complete", "failed", "pruned")]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_export_then_add_trials_gives_the_same_trials(live_server: LiveServer, tmp_path: Path, suffix: str) -> None:
    with Client(live_server.url) as c:
        study = c.create_study(unique("export"), SPACE, constraints=["mem", "latency"], seed=3)
        study.add_trials(_rows(44, seed=1, objectives=1, constraints=2))
        asked = study.ask_batch(3)  # trials of the study's own: told, running, and one enqueued
        study.tell(asked[0], 0.25, constraints=[-1.0, 0.0], user_attrs={"host": "h1"})
        study.tell(asked[1], state="failed")
        study.enqueue({"lr": 0.01})
        source = study.trials()
        assert {t.state for t in source} == {"complete", "failed", "pruned", "running", "waiting"}
        assert {type(v) for t in source for v in t.user_attrs.values()} == {str, int, float, bool, list, dict}
        assert {type(t.params["kernel"]) for t in _finished(source)} == {str, int, float, bool, type(None)}
        path = tmp_path / f"trials{suffix}"
        assert study.export(path) == len(_finished(source)) == 46
        copy = c.create_study(unique("import"), SPACE, constraints=["mem", "latency"], seed=3)
        added = copy.add_trials(path)
        assert [_same(t) for t in added] == [_same(t) for t in _finished(source)]
        assert [_same(t) for t in copy.trials()] == [_same(t) for t in _finished(source)]
        assert copy.best_value == study.best_value
        # the file speaks for itself: a CSV names its columns as add_trials reads them
        if suffix == ".csv":
            header = next(csv.reader(path.open(encoding="utf-8")))
            assert header[:8] == list(SPACE) and header[8:12] == ["value", "state", "constraint.mem",
                                                                    "constraint.latency"]
            assert {"user_attrs.run", "user_attrs.git", "user_attrs_json.n", "user_attrs_json.empty",
                    "user_attrs.line", "user_attrs_json.big"} <= set(header)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_multi_objective_round_trip_async(live_server: LiveServer, tmp_path: Path, fmt: str) -> None:
    async def run() -> None:
        async with AsyncClient(live_server.url) as ac:
            directions = ["minimize", "maximize", "minimize"]
            study = await ac.create_study(unique("export-mo"), SPACE, directions=directions, constraints=["c"])
            await study.add_trials(_rows(21, seed=2, objectives=3, constraints=1))
            path = tmp_path / "mo.txt"  # the suffix says nothing: the format is given
            assert await study.export(path, format=fmt) == 21
            copy = await ac.create_study(unique("import-mo"), SPACE, directions=directions, constraints=["c"])
            added = await copy.add_trials(path.rename(path.with_suffix(f".{fmt}")))  # read by the suffix
            assert [_same(t) for t in added] == [_same(t) for t in await study.trials()]
            front = [t.values for t in (await study.pareto()).trials]
            assert front and [t.values for t in (await copy.pareto()).trials] == front

    asyncio.run(run())


def test_export_formats_and_what_a_csv_cannot_hold(live_server: LiveServer, tmp_path: Path) -> None:
    with Client(live_server.url) as c:
        study = c.create_study(unique("export-edge"), {"value": {"type": "float", "low": 0, "high": 1},
                                                      "x": {"type": "int", "low": 0, "high": 3}})
        study.add_trials([{"params": {"value": 0.5, "x": 1}, "value": 2.0}])
        with pytest.raises(ValueError, match="clash"):
            study.export(tmp_path / "t.csv")  # a parameter named like the value column
        with pytest.raises(ValueError, match=r"\.csv, \.jsonl or \.ndjson"):
            study.export(tmp_path / "t.txt")
        with pytest.raises(ValueError, match="format must be"):
            study.export(tmp_path / "t.csv", format="parquet")
        assert study.export(tmp_path / "t.ndjson") == 1  # JSON lines holds it
        copy = c.create_study(unique("import-edge"), study.space)
        assert [t.params for t in copy.add_trials(tmp_path / "t.ndjson")] == [{"value": 0.5, "x": 1}]
        empty = c.create_study(unique("export-empty"), BRANIN)
        assert empty.export(tmp_path / "none.csv") == 0
        assert read_rows(tmp_path / "none.csv", BRANIN, []) == []


def test_csv_cells_read_back_as_the_same_choice_and_number() -> None:
    """Without a server: every choice of a categorical whose texts collide, ints beyond 2**53, and
    floats written by repr read back with their types."""
    space = {"c": {"type": "categorical", "choices": [*KERNELS, "True", "NULL", 0, False, "0", 1e16]},
             "i": {"type": "int", "low": -(2**62), "high": 2**62}, "f": {"type": "float", "low": -1, "high": 1}}
    trials = [TrialRecord(id=n, number=n, state="complete", params={"c": ch, "i": 2**62 - n, "f": 1 / (n + 3)},
                          value=(n + 0.1) / 3, study_id=1) for n, ch in enumerate(space["c"]["choices"])]
    for name in ("t.csv", "t.jsonl"):
        path = Path(pytest.importorskip("tempfile").mkdtemp()) / name
        write_trials(path, trials, space, [], 1)
        back = read_rows(path, space, [])
        assert [_typed(r["params"]) for r in back] == [_typed(t.params) for t in trials]
        assert [r["value"] for r in back] == [t.value for t in trials]
    # hand-written cells still read as before: a choice's text, any case, a number's other spelling
    from calibo._rows import cell

    spec = {"type": "categorical", "choices": [True, None, 2, "x"]}
    assert [cell(t, spec) for t in ("True", "none", "2.0", "x", "true")] == [True, None, 2, "x", True]
    assert cell("3.0", {"type": "int"}) == 3 and cell(str(2**60 + 1), {"type": "int"}) == 2**60 + 1


def test_trials_dataframe_in_optunas_layout(live_server: LiveServer) -> None:
    with Client(live_server.url) as c:
        study = c.create_study(unique("frame"), SPACE, constraints=["mem", "latency"])
        assert study.trials_dataframe().empty  # no trials: an empty frame, as Optuna answers
        study.add_trials(_rows(12, seed=4, objectives=1, constraints=2))
        asked = study.ask()
        trials = study.trials()
        df = study.trials_dataframe()
        assert len(df) == 13 and list(df["number"]) == [t.number for t in trials]
        params = sorted(f"params_{p}" for p in SPACE)
        attrs = sorted({f"user_attrs_{k}" for t in trials for k in t.user_attrs})
        assert list(df.columns) == ["number", "value", "datetime_start", "datetime_complete", "duration", *params,
                                    *attrs, "constraints_mem", "constraints_latency", "state"]
        assert list(df["state"]) == [{"complete": "COMPLETE", "failed": "FAIL", "pruned": "PRUNED",
                                      "running": "RUNNING"}[t.state] for t in trials]
        for row, t in zip(df.itertuples(index=False), trials, strict=True):
            r = row._asdict()
            assert (r["value"] == t.value) or (t.value is None and pd.isna(r["value"]))
            assert all(r[f"params_{k}"] == v for k, v in t.params.items() if v is not None)
            assert all(pd.isna(r[f"params_{k}"]) for k in SPACE if k not in t.params)
            assert r["datetime_start"] == t.asked_at
            if t.finished_at is None:
                assert pd.isna(r["datetime_complete"]) and pd.isna(r["duration"])
            else:
                assert r["duration"] == t.finished_at - t.asked_at and r["duration"] >= timedelta(0)
            if t.constraints is not None:
                assert [r["constraints_mem"], r["constraints_latency"]] == t.constraints
        assert df.loc[df["number"] == asked.number, "state"].item() == "RUNNING"
        multi = study.trials_dataframe(attrs=("number", "params", "state", "origin"), multi_index=True)
        assert ("params", "lr") in multi.columns and ("number", "") in multi.columns
        assert list(multi[("origin", "")]) == [t.origin for t in trials]
        with pytest.raises(ValueError, match="unknown attrs"):
            study.trials_dataframe(attrs=("number", "nope"))
        optuna_default = study.trials_dataframe(attrs=("number", "value", "user_attrs", "system_attrs", "state"))
        assert [x for x in optuna_default.columns if x.startswith("system_attrs")] == []

        mo = c.create_study(unique("frame-mo"), BRANIN, directions=["minimize", "maximize"])
        mo.add_trials([{"params": {"x1": 1.0, "x2": 2.0}, "values": [3.0, 4.0]},
                       {"params": {"x1": 2.0, "x2": 2.0}, "state": "failed"}])
        frame = mo.trials_dataframe()
        assert list(frame.columns[:3]) == ["number", "values_0", "values_1"]
        assert frame["values_1"].iloc[0] == 4.0 and pd.isna(frame["values_0"].iloc[1])


def test_trials_dataframe_async_and_prediction_columns(live_server: LiveServer) -> None:
    async def run() -> pd.DataFrame:
        async with AsyncClient(live_server.url) as ac:
            s = await ac.create_study(unique("frame-async"), BRANIN)
            await s.add_trials([{"params": {"x1": 1.0, "x2": 2.0}, "value": 3.0}])
            return await s.trials_dataframe(attrs=("number", "value", "values"))

    frame = asyncio.run(run())
    assert list(frame.columns) == ["number", "value", "values_0"] and frame["values_0"].item() == 3.0
    pred = {"mean": 1.5, "intervals": [{"coverage": 0.5, "lower": 1.0, "upper": 2.0},
                                       {"coverage": 0.9, "lower": 0.5, "upper": 2.5}]}
    t = TrialRecord(id=1, number=0, state="complete", params={"x": 1}, value=1.2, study_id=1, prediction=pred)
    df = trials_frame([t], None, [], attrs=("number", "prediction"))
    assert df.iloc[0].to_dict() == {"number": 0, "prediction_lower50": 1.0, "prediction_lower90": 0.5,
                                    "prediction_mean": 1.5, "prediction_upper50": 2.0, "prediction_upper90": 2.5}


def test_pandas_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client imports without pandas, and trials_dataframe says how to get it."""
    code = "import sys, calibo; calibo.Client; calibo.Study.trials_dataframe; assert 'pandas' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    t = TrialRecord(id=1, number=0, state="complete", params={}, value=1.0, study_id=1)
    with pytest.raises(ImportError, match=r"pip install 'calibo\[pandas\]'"):
        trials_frame([t], None, [])
