"""calibo's server, installed as ``calibo.server``: the FastAPI app, storage, fit workers, dashboard, CLI.

``create_app(settings)`` builds the app; ``Settings`` reads the ``CALIBO_*`` environment. Both are
imported on first use, so a fit process importing ``calibo.server.workers`` loads no web stack.
"""

from __future__ import annotations

from typing import Any

# ruff: noqa: E402 - the import-name guard comes before the imports it protects
if __name__ != "calibo.server":  # the repository's service/ folder installs as calibo.server only
    raise ImportError(f"calibo's server is the package calibo.server, not {__name__!r}: "
                      "install calibo[server] and import calibo.server")

from calibo import __version__  # one version for the whole namespace

__all__ = ["Settings", "__version__", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "Settings":
        from .config import Settings

        return Settings
    raise AttributeError(f"module 'calibo.server' has no attribute {name!r}")
