"""Where each fit trained: ``snapshots.device`` (cpu or cuda), shown in the surrogate status.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # add_column is plain ALTER TABLE ... ADD COLUMN on both backends: no table rebuild
    op.add_column("snapshots", sa.Column("device", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("device")
