"""Studies as users expect them: enqueued and added trials, outcome constraints, user attributes,
several objectives.

* ``trials``: ``origin`` (``enqueued``, ``added``, ``copied``; null for a trial an ask chose),
  ``constraints`` (the told constraint values), ``values`` (the objectives of a multi-objective
  study), ``user_attrs``; a trial may be ``waiting`` (enqueued, not handed out yet, its ``params``
  possibly partial).
* ``studies``: ``user_attrs``, and ``head_adaptive``: the ACI/DtACI states of every modelled
  outcome beyond the first objective (``{"constraints": [...], "objectives": [...]}``).

Existing rows keep their meaning: every new column is nullable and means "none".

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("trials") as t:
        t.add_column(sa.Column("origin", sa.String(16), nullable=True))
        t.add_column(sa.Column("constraints", Json, nullable=True))
        t.add_column(sa.Column("values", Json, nullable=True))
        t.add_column(sa.Column("user_attrs", Json, nullable=True))
    with op.batch_alter_table("studies") as t:
        t.add_column(sa.Column("user_attrs", Json, nullable=True))
        t.add_column(sa.Column("head_adaptive", Json, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("studies") as t:
        t.drop_column("head_adaptive")
        t.drop_column("user_attrs")
    with op.batch_alter_table("trials") as t:
        t.drop_column("user_attrs")
        t.drop_column("values")
        t.drop_column("constraints")
        t.drop_column("origin")
