"""The real-tuning suites: deterministic objectives, and held-out tasks apart from the chosen ones."""

from __future__ import annotations

import math

import pytest

from benchmarks.harness.tasks import HELDOUT_TASKS, REAL_TASKS, TASKS
from calibo.engine import SearchSpace


def test_the_held_out_tasks_are_new_tasks() -> None:
    """A held-out task shares no name with a task the default was chosen on, and each is registered,
    marked held out."""
    assert len(HELDOUT_TASKS) >= 8
    assert not set(HELDOUT_TASKS) & set(REAL_TASKS)
    assert all(TASKS[name] is task for name, task in HELDOUT_TASKS.items())
    assert all(t.heldout for t in HELDOUT_TASKS.values()) and not any(t.heldout for t in REAL_TASKS.values())


@pytest.mark.parametrize("name", sorted(HELDOUT_TASKS))
def test_a_held_out_objective_is_deterministic_and_finite(name: str) -> None:
    """The fixed cross-validation split scores one configuration the same every time, and
    configurations of the space differ (the objective is not constant)."""
    task = HELDOUT_TASKS[name]
    space = SearchSpace.from_dict(task.space)
    params = space.from_unit(space.sample(4, 0))
    values = [task.objective(p) for p in params]
    assert all(math.isfinite(v) for v in values)
    assert task.objective(params[0]) == values[0]
    assert len(set(values)) > 1
