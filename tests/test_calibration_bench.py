"""The calibration benchmark's crowd rows under other study settings (``--settings``)."""

from __future__ import annotations

from benchmarks.calibration import CrowdRun, score_run
from calibo.engine import EngineConfig


def test_crowd_rows_score_every_conformalized_prediction_with_early_conformalization() -> None:
    """With ``conformalize_from`` below 32 every prediction from the first fit is conformalized; the
    split rows fit the same study with split conformal, so each such prediction is scored in every
    row (the split rows once fitted the default study, raw below 32, and the run failed)."""
    config = EngineConfig(conformalize_from=10, n_candidates=300)
    run = CrowdRun("forrester", 0, 4, 30, config).run()
    out = score_run(run)
    predicted = [a for a in run.asked if a.prediction is not None]
    assert predicted and all(a.prediction["method"] != "raw" for a in predicted)
    n = len(predicted)
    assert {name: row["n"] for name, row in out["rows"].items()} == {name: n for name in out["rows"]}
