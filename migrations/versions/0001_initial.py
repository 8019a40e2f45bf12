"""Studies, trials and snapshots.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BLOB = sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("definition", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("next_number", sa.Integer, nullable=False, server_default="0"),
        sa.Column("n_complete", sa.Integer, nullable=False, server_default="0"),
        sa.Column("finish_seq", sa.Integer, nullable=False, server_default="0"),
        sa.Column("adaptive", JSON, nullable=False),
        sa.Column("best_trial_id", sa.Integer, nullable=True),
        sa.Column("best_value", sa.Double, nullable=True),
        sa.Column("snapshot_version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("snapshot_n_obs", sa.Integer, nullable=False, server_default="0"),
        sa.Column("fitted_at", TS, nullable=True),
        sa.Column("fit_error", sa.Text, nullable=True),
        sa.UniqueConstraint("name", name="uq_studies_name"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("study_id", sa.Integer, sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("params", JSON, nullable=False),
        sa.Column("ukey", sa.String(512), nullable=False),
        sa.Column("value", sa.Double, nullable=True),
        sa.Column("prediction", JSON, nullable=True),
        sa.Column("points", BLOB, nullable=True),
        sa.Column("record", JSON, nullable=True),
        sa.Column("worker_id", sa.String(255), nullable=True),
        sa.Column("snapshot_version", sa.Integer, nullable=True),
        sa.Column("asked_at", TS, nullable=False),
        sa.Column("heartbeat_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("finish_seq", sa.Integer, nullable=True),
        sa.UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_trials_study_state", "trials", ["study_id", "state"])
    op.create_index("ix_trials_study_finish_seq", "trials", ["study_id", "finish_seq"])
    op.create_table(
        "snapshots",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("study_id", sa.Integer, sa.ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("n_obs", sa.Integer, nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("fit_seconds", sa.Double, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("data", BLOB, nullable=False),
        sa.UniqueConstraint("study_id", "version", name="uq_snapshots_study_version"),
    )
    op.create_index("ix_snapshots_study_id", "snapshots", ["study_id"])


def downgrade() -> None:
    op.drop_index("ix_snapshots_study_id", table_name="snapshots")
    op.drop_table("snapshots")
    op.drop_index("ix_trials_study_finish_seq", table_name="trials")
    op.drop_index("ix_trials_study_state", table_name="trials")
    op.drop_table("trials")
    op.drop_table("studies")
