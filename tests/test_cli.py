"""The ``calibo`` command's arguments: a bad count is argparse's clear error, not a crash."""

from __future__ import annotations

import pytest

from calibo.server.cli import main


@pytest.mark.parametrize("trials", ["0", "-3", "many"])
def test_demo_refuses_a_trial_count_below_one(trials: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["demo", "--trials", trials])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --trials: must be" in err and "Traceback" not in err


def test_demo_runs_one_trial(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--trials", "1"]) == 0
    assert "ms per trial" in capsys.readouterr().out
