"""The statements the native API runs, recorded as they ran and planned again: a test
checks how Postgres reads a table (which index, no scan of a column) the way the service
queries it, with its own text and values."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Engine


@dataclass(frozen=True)
class Ran:
    raw: bool
    """Sent through a RawCursor (``$1`` placeholders), not a client-side-binding cursor."""
    query: Any
    params: Any


@contextmanager
def recorded(table: str) -> Iterator[list[Ran]]:
    """Every statement naming ``table`` that any psycopg cursor runs inside the block."""
    ran: list[Ran] = []
    execute = psycopg.Cursor.execute

    def record(cursor: psycopg.Cursor[Any], query: Any, params: Any = None, **kw: Any) -> Any:
        if table in (query.decode() if isinstance(query, bytes) else str(query)):
            ran.append(Ran(isinstance(cursor, psycopg.RawCursor), query, params))
        return execute(cursor, query, params, **kw)

    psycopg.Cursor.execute = record  # type: ignore[method-assign]
    try:
        yield ran
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]


def plans(engine: Engine, ran: list[Ran], options: str = "FORMAT JSON") -> list[dict[str, Any]]:
    """Each recorded statement's plan (``EXPLAIN (options)`` of its text and values), in a
    transaction rolled back after."""
    planned = []
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        for statement in ran:
            cursor = psycopg.RawCursor(driver) if statement.raw else driver.cursor()
            with cursor:
                prefix = f"EXPLAIN ({options}) "
                query = statement.query
                cursor.execute(
                    prefix.encode() + query if statement.raw else prefix + query,
                    statement.params,
                )
                (plan,) = cursor.fetchone()[0]
            planned.append(plan["Plan"])
        connection.rollback()
    return planned


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A plan's nodes, the root first."""
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)
