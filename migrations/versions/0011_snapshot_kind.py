"""A snapshot says how it was fitted (``engine.retune``): ``snapshots.kind`` is ``full`` (the
hyperparameters tuned) or ``update`` (those of the newest full refit kept); the study's status shows the
newest snapshot's kind. ``snapshots.tuned`` holds the hyperparameters the next fit keeps (the
snapshot's ``meta["tuned"]``), so that a fit job reads them without the snapshot's arrays.

The columns are added in place (no table copy: see 0007): ``kind`` NOT NULL with a server default of
``full`` (every stored snapshot was a full refit), ``tuned`` nullable (a stored snapshot has none: the
next fit is a full refit).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("snapshots", sa.Column("kind", sa.String(8), nullable=False, server_default="full"))
    op.add_column("snapshots", sa.Column("tuned", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("snapshots", "tuned")
    op.drop_column("snapshots", "kind")
