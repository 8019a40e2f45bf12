"""One column for a study's adaptive state: ``studies.state``, what the engine's
``StudyState.to_dict()`` writes (the study's seed, the first objective's ACI/DtACI states, each
further objective's and each constraint's), replacing ``adaptive`` and ``head_adaptive``, which the
service had assembled and taken apart itself.

Existing rows are carried over unchanged in content: ``{"seed": definition.seed, "states":
adaptive, "objectives": head_adaptive.objectives, "constraints": head_adaptive.constraints}``.

The studies table is altered in place, never copied: on SQLite a copy drops the old table, and with
foreign keys on (calibo's connections) that deletes every trial, snapshot and report of every study
through their ON DELETE CASCADE. SQLite can add a NOT NULL column only with a default, which is the
value existing rows hold for the moment between the ALTER and the loop that writes each row's
state in the same transaction; calibo's storage always writes the column, so it is never read. The
old columns go with SQLite's own ALTER TABLE ... DROP COLUMN (SQLite 3.35+).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def _studies(*columns: str) -> sa.TableClause:
    return sa.table("studies", sa.column("id", sa.Integer), *(sa.column(c, Json) for c in columns))


def _add_not_null(name: str, until_filled: str) -> None:
    """Add ``name`` to studies, to be NOT NULL once filled: on SQLite at once, existing rows holding
    ``until_filled`` until the caller writes theirs (SQLite cannot make a column NOT NULL later
    without copying the table)."""
    if op.get_bind().dialect.name == "sqlite":
        op.add_column("studies", sa.Column(name, Json, nullable=False, server_default=until_filled))
    else:
        op.add_column("studies", sa.Column(name, Json, nullable=True))


def _now_not_null(name: str) -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column("studies", name, existing_type=Json, nullable=False)


def upgrade() -> None:
    _add_not_null("state", "{}")
    bind = op.get_bind()
    old = _studies("definition", "adaptive", "head_adaptive", "state")
    for sid, definition, adaptive, heads in bind.execute(
            sa.select(old.c.id, old.c.definition, old.c.adaptive, old.c.head_adaptive)).all():
        heads = heads or {}
        state = {"seed": int(definition["seed"]), "states": adaptive,
                 "objectives": heads.get("objectives") or [], "constraints": heads.get("constraints") or []}
        bind.execute(old.update().where(old.c.id == sid).values(state=state))
    _now_not_null("state")
    op.drop_column("studies", "head_adaptive")
    op.drop_column("studies", "adaptive")


def downgrade() -> None:
    _add_not_null("adaptive", "[]")
    op.add_column("studies", sa.Column("head_adaptive", Json, nullable=True))
    bind = op.get_bind()
    new = _studies("state", "adaptive", "head_adaptive")
    for sid, state in bind.execute(sa.select(new.c.id, new.c.state)).all():
        heads = {k: state[k] for k in ("objectives", "constraints") if state.get(k)}
        bind.execute(new.update().where(new.c.id == sid).values(adaptive=state["states"], head_adaptive=heads or None))
    _now_not_null("adaptive")
    op.drop_column("studies", "state")
