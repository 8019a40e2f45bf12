"""``examples/remote_worker.py`` runs as its docstring says, and each objective gets its own space.

``--objective digits`` tunes two classifiers with different parameters: its space is conditional,
so a trial holds ``model`` and that model's parameters only (an SVC trial never carries the
boosting parameters, nor the other way round).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import LiveServer, unique

from calibo import Client

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "remote_worker.py"
SVC = {"model", "svc_C", "svc_gamma"}
BOOSTING = {"model", "learning_rate", "max_leaf_nodes", "max_iter"}


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("remote_worker_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_digits_space_gives_each_model_its_own_parameters(live_server: LiveServer) -> None:
    worker = example()
    with Client(live_server.url) as client:
        study = client.create_study(unique("digits-space"), worker.DIGITS_SPACE, seed=0)
        asked = study.ask_batch(12)  # the warm start's quasi-random design: both models
    kinds = {t.params["model"] for t in asked}
    assert kinds == {"svc", "boosting"}
    for t in asked:
        assert set(t.params) == (SVC if t.params["model"] == "svc" else BOOSTING), t.params


def test_the_worker_runs_the_digits_objective_on_both_models(live_server: LiveServer,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sklearn")
    worker = example()
    name = unique("digits")
    with Client(live_server.url) as client:  # the same definition the worker creates: it joins this study
        study = client.create_study(name, worker.DIGITS_SPACE, "minimize", seed=0)
        study.enqueue({"model": "svc", "svc_C": 10.0, "svc_gamma": 1e-3})  # cheap ones, evaluated first
        study.enqueue({"model": "boosting", "learning_rate": 0.1, "max_leaf_nodes": 8, "max_iter": 10})
        code = worker.main(["--url", live_server.url, "--objective", "digits", "--study", name, "--trials", "2"])
        assert code == 0, capsys.readouterr()
        trials = study.trials()
    assert [t.state for t in trials] == ["complete", "complete"]
    assert [set(t.params) for t in trials] == [SVC, BOOSTING]
    assert all(0.0 < t.value < 0.3 for t in trials), [t.value for t in trials]  # CV error of a fair model
    out = capsys.readouterr().out
    assert f"study {name!r}" in out and "this machine: 2 complete, 0 failed" in out
