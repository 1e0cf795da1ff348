"""A long statement run without psycopg parsing it on every run (issue 14).

psycopg turns a query's named placeholders (``%(name)s``) into Postgres's own (``$1``) on
every execute, a regular-expression split of the whole text, and caches the result only for
a query of at most 4 KiB and 50 parameters (``psycopg._queries``: the limits keep an ORM's
one-off statements out of its cache). The pop's statement is over both (~4-7 KiB with a
chat declaration's filters, its parameters ~60-100 with the worker's terms), so its split
was ~27% of a woken chat pop's CPU (cProfile, bench/dispatch.py). ``RawSql`` converts a
statement once; it runs on a ``psycopg.RawCursor``, which takes ``$n`` placeholders and a
sequence of values as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s")


@dataclass(frozen=True)
class RawSql:
    """A statement in Postgres's placeholders and its parameters' names, ``$1`` first."""

    sql: bytes
    names: tuple[str, ...]

    def values(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """The statement's values in placeholder order, from ``params`` by name (a name
        used twice is one placeholder, as psycopg makes it; extra names are ignored)."""
        return tuple(params[name] for name in self.names)


def raw_sql(sql: str) -> RawSql:
    """``sql``, written with psycopg's named placeholders (``%(name)s``, ``%%`` for a
    percent sign), in Postgres's own (``$1``...)."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        return f"${names.setdefault(name, len(names) + 1)}"

    if "%" in _PLACEHOLDER.sub("", sql):
        raise ValueError("a placeholder raw_sql cannot convert (only %(name)s and %%)")
    return RawSql(_PLACEHOLDER.sub(number, sql).encode(), tuple(names))
