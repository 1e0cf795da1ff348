"""SQLAlchemy 2 engine and transaction helpers (psycopg 3 driver)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from runtime.stores.embedded_postgres import sqlalchemy_url


def make_engine(url: str, *, pool_size: int = 15, max_overflow: int = 5) -> Engine:
    """An engine with upstream's pool (15 + 5 overflow); any Postgres URL spelling works."""
    return create_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,  # a connection lost to a database restart is replaced, not used
        hide_parameters=True,  # an error's text never carries a statement's values (prompts)
    )


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """One session, one transaction: committed on success, rolled back on any exception."""
    with sessions() as session, session.begin():
        yield session
