"""Multi-fidelity: ``intermediate_values``, the learning-curve points a running trial reports.

One row per (trial, step), with the pruning decision it got: a repeated report
answers the stored decision, and the decision is reproducible from these rows.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "intermediate_values",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("trial_id", sa.Integer(), sa.ForeignKey("trials.id", ondelete="CASCADE"), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("should_prune", sa.Boolean(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("trial_id", "step", name="uq_intermediate_trial_step"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_intermediate_study", "intermediate_values", ["study_id"])


def downgrade() -> None:
    op.drop_index("ix_intermediate_study", table_name="intermediate_values")
    op.drop_table("intermediate_values")
