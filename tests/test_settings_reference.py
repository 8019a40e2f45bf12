"""Every study setting earns its place: at most 20 shown, each in the settings reference with when to
change it, and every removed one listed there with the constant it became."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from calibo.engine import EngineConfig
from calibo.engine.config import REMOVED
from calibo.server.studies import SERVICE_SETTINGS

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "settings.md"


def _rows(section: str) -> dict[str, list[str]]:
    """The table rows of ``section`` of the settings reference: first cell (unquoted) -> cells."""
    text = REFERENCE.read_text()
    body = text.split(f"### {section}\n", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in body.splitlines():
        m = re.match(r"\| `([a-z_]+)` \|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_a_study_shows_at_most_20_settings() -> None:
    # the study view: every engine setting but surrogate and acquisition (top-level fields), and the
    # service settings (studies.views.study_view)
    shown = [f.name for f in fields(EngineConfig) if f.name not in ("surrogate", "acquisition")]
    shown += list(SERVICE_SETTINGS)
    assert len(shown) <= 20, shown
    assert len(fields(EngineConfig)) <= 20


def test_every_engine_setting_is_in_the_reference_with_when_to_change_it() -> None:
    rows = _rows("Engine settings")
    names = [f.name for f in fields(EngineConfig)]
    assert sorted(rows) == sorted(names)
    for name, cells in rows.items():
        assert len(cells) == 4 and all(cells), (name, cells)  # default, accepted, what, change it when


def test_every_removed_setting_is_listed_with_its_constant() -> None:
    rows = _rows("Removed settings")
    assert sorted(rows) == sorted(REMOVED)
    assert not set(REMOVED) & {f.name for f in fields(EngineConfig)}
