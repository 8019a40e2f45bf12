"""What an Optuna storage holds beyond calibo's own trial (``calibo.optuna.CaliboStorage``):

* ``studies.system_attrs`` and ``trials.system_attrs``: Optuna's system attributes, kept apart from the
  user's (a sampler's or Optuna's own bookkeeping), nullable JSON like ``user_attrs``;
* ``trials.distributions``: the distribution each parameter of a trial was drawn from, where the caller
  gave one (a define-by-run trial's, in Optuna's JSON form): a step, a range narrower than the study's
  space, a single value. Null: the study's space;
* ``trials.started_at``: when a trial started running, where that is not its ask (a trial the caller
  runs itself, a waiting one started later or one imported with its own start). Null: ``asked_at``.

Added in place (no table copy: see 0007), all nullable.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("studies", sa.Column("system_attrs", sa.JSON(), nullable=True))
    op.add_column("trials", sa.Column("system_attrs", sa.JSON(), nullable=True))
    op.add_column("trials", sa.Column("distributions", sa.JSON(), nullable=True))
    op.add_column("trials", sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("trials", "started_at")
    op.drop_column("trials", "distributions")
    op.drop_column("trials", "system_attrs")
    op.drop_column("studies", "system_attrs")
