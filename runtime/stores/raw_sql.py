"""A long statement run without psycopg parsing it on every run.

psycopg rewrites named placeholders (``%(name)s``) to ``$n`` on every execute and caches the
result only for queries under 4 KiB and 50 parameters; the pop's statement is over both, so
the rewrite was a large share of a woken pop's CPU (docs/performance.md). ``RawSql``
converts a statement once and runs it on a ``psycopg.RawCursor``, which takes ``$n``
placeholders and a sequence of values as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

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


def with_jsonb(params: Mapping[str, Any], names: frozenset[str]) -> dict[str, Any]:
    """``params`` with the value of each of ``names`` wrapped in ``Jsonb`` (psycopg sends a
    dict or list as jsonb only so wrapped), None left as SQL NULL: what SQLAlchemy's JSONB
    type did for a statement it ran."""
    return {k: Jsonb(v) if k in names and v is not None else v for k, v in params.items()}
