"""Alembic environment of the native API; run through runtime.native.db.migrate.upgrade()."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, text

from runtime.native.db.tables import Base
from runtime.stores.embedded_postgres import sqlalchemy_url

# Two processes upgrading at once take turns on this advisory lock.
_MIGRATION_LOCK = 7_001_001


def run_migrations_online() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(sqlalchemy_url(config.get_main_option("sqlalchemy.url") or ""))
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


def _run(connection: Connection) -> None:
    connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK})
    try:
        context.configure(connection=connection, target_metadata=Base.metadata)
        with context.begin_transaction():
            context.run_migrations()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK})
        connection.commit()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run horde-chat up")
run_migrations_online()
