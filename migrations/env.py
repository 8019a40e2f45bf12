"""Alembic environment: runs on the connection calibo hands over, or on the configured URL."""

from __future__ import annotations

from alembic import context

from calibo.server.storage.models import Base, calibo_owns

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # ALTER via table copies on SQLite
        compare_type=True,
        include_name=calibo_owns,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from calibo.server.storage.db import make_engine

    url = config.get_main_option("sqlalchemy.url")
    assert url is not None, "alembic.ini sets sqlalchemy.url"
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
