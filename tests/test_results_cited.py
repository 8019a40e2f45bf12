"""benchmarks/results holds what the docs cite, and the docs cite what it holds; the commands they
quote run the suites as they are.

* every file under benchmarks/results is named by some page (docs/**/*.md or README.md);
* every ``benchmarks/results/<file>`` path and every ``assets/results/<file>`` image a page names
  exists, except where the page says the file lives at an earlier commit: a fenced block or a
  paragraph (a list item is one) that names that commit (``git checkout 26d3c61``);
* the directory stays under 20 MB;
* a quoted ``python -m benchmarks.<suite>`` names a suite there is, and a ``benchmarks/...py`` path
  (the scripts' old ``python benchmarks/<script>.py`` form among them) is a file there is, or stands
  where the page says it is the earlier commit's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LIMIT_BYTES = 20 * 1024 * 1024
HISTORY = re.compile(r"\b26d3c61\b")  # the commit where the removed suites and their files last lived
RESULT_PATH = re.compile(r"(?:benchmarks|assets)/results/([\w.\-]+\.(?:json|png))")
MODULE = re.compile(r"python -m benchmarks\.([\w.]+)")
SCRIPT = re.compile(r"\bbenchmarks/[\w/]+\.py\b")
OLD_FORM = re.compile(r"python3? benchmarks/[\w/]+\.py")


def pages() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def chunks(text: str) -> list[str]:
    """A page's fenced blocks and paragraphs (each list item one), the units a note about the
    earlier commit applies to."""
    out: list[str] = []
    block: list[str] | None = None
    para: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if block is None:
                out.append("\n".join(para))
                para, block = [], [line]
            else:
                out.append("\n".join([*block, line]))
                block = None
            continue
        if block is not None:
            block.append(line)
        elif not line.strip() or re.match(r"\s*([-*]|\d+\.)\s", line):
            out.append("\n".join(para))
            para = [line] if line.strip() else []
        else:
            para.append(line)
    out.append("\n".join(para if block is None else block))
    return [c for c in out if c.strip()]


def current_chunks() -> list[tuple[Path, str]]:
    """Every chunk of every page that does not speak of the earlier commit."""
    return [(p, c) for p in pages() for c in chunks(p.read_text()) if not HISTORY.search(c)]


def test_every_results_file_is_cited_by_a_page() -> None:
    text = "\n".join(p.read_text() for p in pages())
    files = sorted(f for f in RESULTS.iterdir() if f.is_file())
    uncited = [f.name for f in files if not re.search(rf"(?<![\w.\-]){re.escape(f.name)}(?![\w\-])", text)]
    assert not uncited, f"benchmarks/results files no page cites (delete them, or cite them): {uncited}"


def test_every_cited_results_path_exists() -> None:
    missing = sorted({f"{p.relative_to(ROOT)}: {m}" for p, c in current_chunks() for m in RESULT_PATH.findall(c)
                      if not (RESULTS / m).is_file()})
    assert not missing, f"cited results files that do not exist (or say they are at 26d3c61): {missing}"


def test_the_results_directory_is_under_20_mb() -> None:
    size = sum(f.stat().st_size for f in RESULTS.rglob("*") if f.is_file())
    assert size < LIMIT_BYTES, f"benchmarks/results holds {size / 1e6:.1f} MB (limit 20 MiB)"


def test_quoted_suites_and_scripts_exist() -> None:
    wrong = set()
    for p, c in current_chunks():
        for m in MODULE.findall(c):
            parts = m.split(".")
            base = ROOT / "benchmarks" / Path(*parts)
            if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
                wrong.add(f"{p.relative_to(ROOT)}: python -m benchmarks.{m}")
        for m in OLD_FORM.findall(c):
            wrong.add(f"{p.relative_to(ROOT)}: {m} (now python -m benchmarks.<suite>)")
        for m in SCRIPT.findall(c):
            if not (ROOT / m).is_file():
                wrong.add(f"{p.relative_to(ROOT)}: {m}")
    makefile = (ROOT / "Makefile").read_text()
    for m in MODULE.findall(makefile):
        if not (ROOT / "benchmarks" / f"{m}.py").is_file():
            wrong.add(f"Makefile: python -m benchmarks.{m}")
    assert not wrong, f"quoted benchmark commands that do not run here: {sorted(wrong)}"
