"""JSON as written: PostgreSQL's JSON columns become ``json`` (from ``jsonb``), and a JSON ``null``
stored where SQL NULL was meant becomes NULL.

* ``jsonb`` reorders object keys (shorter keys first) and keeps no sign on ``-0.0``: a study's space,
  a trial's parameters and user attributes came back from PostgreSQL in another order than
  written, and an ask's parameters followed that order (SQLite kept it). ``json`` keeps the text as
  written. Rows written before this revision keep the order ``jsonb`` gave them.
* A nullable JSON column set to Python's None was written as the JSON ``null`` (SQLAlchemy's
  default), which ``IS NOT NULL`` reads as a value: a tell recorded after its trial had expired
  replaced the expiry record with ``null``, and the study's calibration and the server's metrics
  then failed on it. The models now write None as SQL NULL; existing JSON ``null`` values of the
  nullable columns are set to NULL here.

No row is copied or dropped: PostgreSQL alters each column in place (``USING col::json``), SQLite
stores JSON as text and needs only the NULL update.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSON, JSONB

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = {  # table -> (JSON columns NOT NULL, nullable JSON columns)
    "studies": (("definition", "state"), ("user_attrs",)),
    "trials": (("params",), ("prediction", "record", "constraints", "values", "user_attrs")),
}


def _retype(new: type, old: type, cast: str) -> None:
    for table, (required, nullable) in COLUMNS.items():
        for column in (*required, *nullable):
            op.alter_column(table, column, type_=new(), existing_type=old(), existing_nullable=column in nullable,
                            postgresql_using=f'"{column}"::{cast}')


def upgrade() -> None:
    bind = op.get_bind()
    for table, (_, nullable) in COLUMNS.items():
        for column in nullable:
            # a JSON null: on SQLite the text 'null', on PostgreSQL the jsonb literal
            test = f'"{column}" = \'null\'' if bind.dialect.name == "sqlite" else f"\"{column}\" = 'null'::jsonb"
            bind.execute(sa.text(f'UPDATE "{table}" SET "{column}" = NULL WHERE {test}'))
    if bind.dialect.name == "postgresql":
        _retype(JSON, JSONB, "json")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _retype(JSONB, JSON, "jsonb")
