"""Alembic migrations: the only way calibo's schema is created or changed."""

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent
