"""Keys of any space size, and asks that can be retried.

* ``trials.ukey`` becomes TEXT: a configuration's key grows 16 hex characters
  per parameter, so VARCHAR(512) broke every ask on PostgreSQL from 33
  parameters on (SQLite never enforced the length).
* ``trials.ask_key``: the ``Idempotency-Key`` of the ask that created the
  trial, so a retried ask answers the trials it already created.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # batch: SQLite rebuilds the table (it has no ALTER COLUMN); PostgreSQL alters in place
    with op.batch_alter_table("trials", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.alter_column("ukey", type_=sa.Text(), existing_type=sa.String(512), existing_nullable=False)
        batch.add_column(sa.Column("ask_key", sa.String(64), nullable=True))
    op.create_index("ix_trials_study_ask_key", "trials", ["study_id", "ask_key"])


def downgrade() -> None:
    op.drop_index("ix_trials_study_ask_key", table_name="trials")
    with op.batch_alter_table("trials", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("ask_key")
        batch.alter_column("ukey", type_=sa.String(512), existing_type=sa.Text(), existing_nullable=False)
