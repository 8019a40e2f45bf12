"""The cluster's fit queue: procrastinate's tables, functions and triggers (PostgreSQL only).

``CALIBO_WORKER_MODE=queue`` hands refits to ``calibo worker`` processes through
procrastinate's job queue, which lives in the same PostgreSQL database as the
studies. Its schema comes through this migration (not through ``procrastinate
schema --apply``) so that one ``calibo migrate`` brings a database to what every
replica and worker expects. The schema is the one shipped with the pinned
procrastinate version (``pyproject.toml``); a later procrastinate upgrade adds a
migration applying its own ``sql/migrations`` files. SQLite has no queue: the
embedded default fits in the local pool, so this revision does nothing there.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("procrastinate_events", "procrastinate_periodic_defers", "procrastinate_jobs", "procrastinate_workers")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    from procrastinate.schema import SchemaManager

    # a database set up by `procrastinate schema --apply` before calibo managed it keeps its queue
    if bind.execute(sa.text("SELECT to_regclass('procrastinate_jobs')")).scalar() is not None:
        return
    # the raw driver connection: no parameters, so psycopg leaves the schema's % signs alone
    driver = bind.connection.driver_connection
    assert driver is not None  # a live connection's
    driver.execute(SchemaManager.get_schema())


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table in _TABLES:
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    functions = bind.execute(sa.text(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = current_schema() AND p.proname LIKE 'procrastinate%'")).scalars().all()
    for fn in functions:
        op.execute(f"DROP FUNCTION IF EXISTS {fn} CASCADE")
    types = bind.execute(sa.text(  # enums, and composite types that are not a table's row type
        "SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
        "LEFT JOIN pg_class c ON c.oid = t.typrelid WHERE n.nspname = current_schema() "
        "AND t.typname LIKE 'procrastinate%' AND (t.typtype = 'e' OR c.relkind = 'c')")).scalars().all()
    for typ in types:
        op.execute(f"DROP TYPE IF EXISTS {typ} CASCADE")
