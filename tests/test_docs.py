"""The documentation as tests: every Python and shell block of README.md and docs/**/*.md runs.

Sybil (the ``test`` extra) finds the fenced blocks of each page; the blocks of one page run in
order in one namespace, as a reader pastes them, in a fresh working folder, against a live server
on a fresh SQLite database (``CALIBO_URL`` names it, and the server URLs the pages show,
``http://127.0.0.1:8000`` and the cluster's ``http://calibo:8000`` / ``http://server:8000``, are
read as it). A block that cannot run here says so on its first line, visibly in the page:

    # not run by the docs tests: needs a Kubernetes cluster

and is counted, not run. Every fence names its language; what a command prints is ``text``, never
run. The run ends with ``docs: N blocks run, M not run here (reasons...)`` (tests/conftest.py
prints it from the counts each page leaves).

The REST reference's table of calls names every route of the app's OpenAPI document, and no other.
"""

from __future__ import annotations

import faulthandler
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import LiveServer
from starlette.routing import Match
from sybil import Document, Example, Region
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from calibo import Client

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell"}
NOT_CODE = {"text", "json", "yaml"}  # what a command prints, request and answer bodies, manifests
# a block that does not run here: its first line says why
NOT_RUN = re.compile(r"#\s*not run by the docs tests:\s*(?P<reason>\S.*?)\s*$")
ALMOST_NOT_RUN = re.compile(r"#\s*not run\b.*", re.IGNORECASE)  # a marker misspelt, or with no reason
# the server the pages talk to: `calibo serve`'s default address, and the cluster's service names
SERVER_URLS = re.compile(r"http://(?:127\.0\.0\.1|localhost|calibo|server):8000")
SHELL_TIMEOUT = 300  # seconds; a shell block that hangs fails instead of hanging the suite
PAGE_TIMEOUT = 600  # seconds; past it, a page whose Python hangs ends the test process with its traceback


@dataclass
class Block:
    language: str
    source: str
    not_run: str | None  # the reason, when the block is marked as not run here

    @property
    def runs(self) -> bool:
        return self.not_run is None and self.language in PYTHON | SHELL


FENCE = RawFencedCodeBlockLexer(
    info_pattern=re.compile(r"(?P<language>[^\s`{]*)(?P<options>[^\n]*)$\n", re.MULTILINE))


def blocks(document: Document) -> list[Region]:
    """Every fenced block of the page, as a region whose ``parsed`` is a :class:`Block`."""
    regions = []
    for region in FENCE(document):
        source = str(region.lexemes["source"])
        first = source.split("\n", 1)[0]
        reason = match.group("reason") if (match := NOT_RUN.fullmatch(first)) else None
        region.parsed = Block(region.lexemes["language"], source, reason)
        region.evaluator = evaluate
        regions.append(region)
    return regions


def parse(page: Path) -> Document:
    document = Document(page.read_text(encoding="utf-8"), str(page))
    for region in blocks(document):
        document.add(region)
    return document


def evaluate(example: Example) -> None:
    block: Block = example.parsed
    if not block.runs:
        return
    source = SERVER_URLS.sub(os.environ["CALIBO_URL"], block.source)
    if block.language in PYTHON:
        # padded so that a traceback names the page's own line numbers
        code = compile("\n" * example.line + source, example.path, "exec", dont_inherit=True)
        exec(code, example.namespace)
        example.namespace.pop("__builtins__", None)
        return
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", source], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=SHELL_TIMEOUT)
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n"
                             f"--- stderr\n{done.stderr[-4000:]}")


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture(scope="module")
def docs_server() -> LiveServer:
    with tempfile.TemporaryDirectory(prefix="calibo-docs-") as tmp:
        srv = LiveServer(f"sqlite:///{tmp}/docs.db").start()
        try:
            yield srv
        finally:
            srv.stop()


@pytest.mark.live
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_of_the_page_runs_as_written(page: Path, docs_server: LiveServer, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, record_property) -> None:
    document = parse(page)
    examples = list(document)
    unknown = [f"{e.line} ({e.parsed.language or 'none'})" for e in examples
               if e.parsed.language not in PYTHON | SHELL | NOT_CODE]
    assert not unknown, (f"{page_id(page)}: fences whose language this test does not know, at lines "
                         f"{', '.join(unknown)}: ```python and ```bash run, ```text (what a command "
                         f"prints), ```json and ```yaml do not")
    unclear = [e.line for e in examples if e.parsed.not_run is None
               and ALMOST_NOT_RUN.fullmatch(e.parsed.source.split("\n", 1)[0].strip())]
    assert not unclear, (f"{page_id(page)}: the blocks at lines {unclear} look marked as not run, but "
                         "not as '# not run by the docs tests: <reason>'")
    with Client(docs_server.url) as client:  # each page starts on an empty server, as a reader's
        for study in client.list_studies():
            client.delete_study(study["id"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # what a page writes there (Ray Tune's results) too
    monkeypatch.setenv("CALIBO_URL", docs_server.url)
    faulthandler.dump_traceback_later(PAGE_TIMEOUT, exit=True)
    try:
        for example in examples:
            try:
                example.evaluate()
            except Exception as e:
                e.add_note(f"in the {example.parsed.language} block at {page_id(page)}:{example.line}")
                raise
    finally:
        faulthandler.cancel_dump_traceback_later()
        if "ray" in sys.modules and sys.modules["ray"].is_initialized():
            sys.modules["ray"].shutdown()  # a page's Ray Tune experiment started a local Ray cluster
    code = [e.parsed for e in examples if e.parsed.language in PYTHON | SHELL]
    record_property("docs", {"run": sum(b.runs for b in code),
                             "not run": dict(Counter(b.not_run for b in code if not b.runs))})


def shell_commands(block: Block) -> list[list[str]]:
    """The commands of a shell block as word lists: continuations joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", block.source)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def documented_commands() -> list[tuple[str, int, list[str]]]:
    """Every command of every shell block, run here or not, except those that check out older code."""
    found = []
    for page in PAGES:
        for example in parse(page):
            block = example.parsed
            if block.language in SHELL and not re.search(r"\bgit (checkout|show)\b", block.source):
                found += [(page_id(page), example.line, words) for words in shell_commands(block)]
    return found


@pytest.mark.slow  # a --help of each benchmark suite: about 4 s
def test_the_benchmark_and_make_commands_the_pages_show_exist() -> None:
    """A command that is not run here still names a Makefile target and flags its suite takes."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w.-]+):", makefile, re.MULTILINE))
    helps: dict[str, str] = {}
    wrong = []
    for where, line, words in documented_commands():
        words = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]  # VAR=value prefixes
        if words[:1] == ["make"]:
            wrong += [f"{where}:{line}: make {w}: no such target"
                      for w in words[1:] if "=" not in w and not w.startswith("-") and w not in targets]
        module = next((w for w in words if w.startswith("benchmarks.")), None)
        if module and words[words.index(module) - 1] == "-m":
            if module not in helps:
                done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                                      capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, f"{module} --help: {done.stderr[-2000:]}"
                helps[module] = done.stdout
            wrong += [f"{where}:{line}: {module} has no {flag}"
                      for flag in (w.split("=", 1)[0] for w in words if w.startswith("--"))
                      if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helps[module])]
    assert helps, "no benchmark command found in the pages"
    assert not wrong, "\n".join(wrong)


def route(method: str, path: str) -> tuple[str, str]:
    return method.upper(), re.sub(r"\{[^}]*\}", "{}", path)  # {id}, {study}, {tid}: one placeholder


def test_the_rest_reference_lists_every_route_of_the_app() -> None:
    """docs/reference/rest.md's table of calls names every (method, path) of the OpenAPI document,
    and none that the app does not serve (``/dashboard`` is served, though not in the document)."""
    from calibo.server import Settings, create_app

    page = (ROOT / "docs" / "reference" / "rest.md").read_text(encoding="utf-8")
    calls = page.split("\n## Calls\n", 1)[1].split("\n## ", 1)[0]
    table = [route(*m) for m in re.findall(r"^\| `([A-Z]+) (/[^`\s]*)` \|", calls, re.MULTILINE)]
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(database_url=f"sqlite:///{tmp}/rest.db", workers=0))
        documented = {route(m, p) for p, ops in app.openapi()["paths"].items() for m in ops}

    def served(method: str, path: str) -> bool:  # as the app routes a request, "1" for each placeholder
        scope = {"type": "http", "method": method, "path": path.replace("{}", "1"), "root_path": "",
                 "query_string": b"", "headers": []}
        return any(r.matches(scope)[0] == Match.FULL for r in app.router.routes)

    assert len(table) == len(set(table)), f"rows listed twice: {[r for r in table if table.count(r) > 1]}"
    assert not documented - set(table), f"routes the table leaves out: {sorted(documented - set(table))}"
    unknown = [r for r in table if not served(*r)]
    assert not unknown, f"rows for routes the app does not serve: {unknown}"
