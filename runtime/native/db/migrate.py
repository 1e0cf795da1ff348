"""Bring the database schema up to date with the Alembic migrations beside this module.

Migrations live in ``runtime/native/db/migrations/versions``, one revision per schema change
(0002 the chat columns, 0003 the object-storage columns); a test checks that they build
exactly the tables of ``tables.py``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

from runtime.stores.embedded_postgres import sqlalchemy_url

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(database_url).replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Apply every migration up to ``revision`` (safe to run concurrently)."""
    command.upgrade(alembic_config(database_url), revision)


def current_revision(database_url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine

    engine = create_engine(sqlalchemy_url(database_url))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str:
    """The newest revision of the migrations shipped with this code."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("postgresql://unused/")).get_current_head()
    assert head is not None
    return head


def revision_on(conn: Connection) -> str | None:
    """The revision the database behind ``conn`` is at (None: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()
