"""A study's space can grow (PATCH /v1/studies/{study}/space): ``studies.revision`` counts the changes
of its definition.

The service parses a study's definition once and caches it per process, and its locked transactions
(ask, tell, add, a fit's save) read the study row without the definition: the revision, read there at
no cost, tells a process that another one has grown the space since it parsed it, and a fit that
ran on an earlier space that its snapshot is stale (it is not saved). Existing studies start at 0.

The column is added in place (no table copy: see 0007), NOT NULL with a server default of 0.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-12
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("studies", sa.Column("revision", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("studies", "revision")
