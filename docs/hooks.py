"""mkdocs hooks: the REST reference's OpenAPI document and the benchmark plots come from the code.

* ``on_pre_build`` writes ``docs/reference/openapi.json`` from ``calibo.server.create_app`` (what
  ``GET /openapi.json`` serves; the REST reference page renders it), so the reference cannot drift
  from the server.
* ``on_files`` adds every ``benchmarks/results/*.png`` as ``assets/results/<name>.png``: the
  benchmark pages show the committed plots without copies in ``docs/``.
* ``on_config`` lets mkdocstrings find ``calibo``: the repository's folders install under the one
  namespace through ``pyproject.toml``'s ``package-dir`` (``client/`` -> ``calibo``,
  ``service/engine/`` -> ``calibo.engine``, ...), which griffe's static loader cannot follow (it
  looks for a folder named like the package). The hook lays that mapping out as a tree of symbolic
  links in a temporary folder and gives it to the python handler as its ``paths``.
* ``on_page_content`` renders the Sphinx roles some docstrings use (``:class:`~calibo.Client```,
  ``:meth:`Client.optimize```), which Markdown leaves as text, as code linked to the object when
  the page documents it.
"""

from __future__ import annotations

import atexit
import json
import re
import shutil
import tempfile
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
OPENAPI = ROOT / "docs" / "reference" / "openapi.json"


def openapi_document() -> str:
    from calibo.server import Settings, create_app

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(database_url=f"sqlite:///{tmp}/docs.db", workers=0))
        return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"


def package_tree(target: Path) -> Path:
    """Lay out ``[tool.setuptools] package-dir`` under ``target`` as symbolic links; return ``target``.

    Each installed package becomes a folder named as it imports, holding links to its source
    folder's entries, less the subfolders that install under another name (``service/engine`` is
    ``calibo.engine``, never ``calibo.server.engine``).
    """
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = {name: (ROOT / folder).resolve() for name, folder in setuptools["package-dir"].items()}
    sources = set(mapping.values())
    for name in sorted(mapping, key=lambda n: n.count(".")):
        folder = target.joinpath(*name.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        for entry in sorted(mapping[name].iterdir()):
            if entry.name == "__pycache__" or entry.resolve() in sources:
                continue
            link = folder / entry.name
            if not link.exists():
                link.symlink_to(entry)
    return target


@event_priority(100)  # before mkdocstrings' on_config, which creates the python handler
def on_config(config, **kwargs):
    tree = Path(tempfile.mkdtemp(prefix="calibo-docs-"))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    package_tree(tree)
    plugin = config.plugins.get("mkdocstrings")
    if plugin is not None:
        python = plugin.config.handlers.setdefault("python", {})
        python["paths"] = [str(tree), *python.get("paths", [])]
    return config


def on_pre_build(config, **kwargs) -> None:
    text = openapi_document()
    if not OPENAPI.exists() or OPENAPI.read_text() != text:
        OPENAPI.write_text(text)


ROLE = re.compile(r":(?:class|meth|func|attr|mod|exc|obj):<code>(~?)([\w.]+)</code>")


def on_page_content(html: str, page, config, files) -> str:
    def code(match: re.Match) -> str:
        short, name = match.groups()
        shown = name.rsplit(".", 1)[-1] if short else name
        for anchor in (name, f"calibo.{name}"):
            if f'id="{anchor}"' in html:
                return f'<a href="#{anchor}"><code>{shown}</code></a>'
        return f"<code>{shown}</code>"

    return ROLE.sub(code, html)


def on_files(files, config, **kwargs):
    for png in sorted((ROOT / "benchmarks" / "results").glob("*.png")):
        files.append(File.generated(config, f"assets/results/{png.name}", abs_src_path=str(png)))
    return files
