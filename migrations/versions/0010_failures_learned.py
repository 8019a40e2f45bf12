"""Failed trials train a model of where trials succeed (``engine.failures``): ``studies.n_failed`` counts
the failures a fit learns from (failed trials told or added, not those the service failed for a silent
worker), and ``studies.snapshot_n_failed`` how many of them the newest snapshot learned. A study's
snapshot lags when either count is ahead of it, so a failure alone queues a refit and a sequential
ask waits for it, as a completed trial does.

Both columns are added in place (no table copy: see 0007), NOT NULL with a server default of 0;
``n_failed`` is then counted from the stored trials.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

import json
from collections import Counter
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EXPIRED = "heartbeat timeout"  # storage.info.EXPIRED as of this revision


def upgrade() -> None:
    op.add_column("studies", sa.Column("n_failed", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("studies", sa.Column("snapshot_n_failed", sa.Integer(), nullable=False, server_default="0"))
    conn = op.get_bind()
    counts: Counter[int] = Counter()
    rows = conn.execute(sa.text("SELECT study_id, record FROM trials WHERE state = 'failed'"))
    for study_id, record in rows:
        if isinstance(record, str):  # SQLite hands JSON back as text
            record = json.loads(record)
        if (record or {}).get("reason") != EXPIRED:
            counts[study_id] += 1
    for study_id, n in counts.items():
        conn.execute(sa.text("UPDATE studies SET n_failed = :n WHERE id = :id"), {"n": n, "id": study_id})


def downgrade() -> None:
    op.drop_column("studies", "snapshot_n_failed")
    op.drop_column("studies", "n_failed")
