"""Alembic migrations, installed as ``calibo.server.migrations``: the only way calibo's schema is
created or changed."""

from pathlib import Path

if __name__ != "calibo.server.migrations":
    raise ImportError(f"calibo's migrations are the package calibo.server.migrations, not {__name__!r}")

DIRECTORY = Path(__file__).resolve().parent
