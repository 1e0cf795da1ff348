"""Rows read by a raw statement, built as the ORM's loader builds them, in no session.

A hot path that reads with psycopg directly (one round trip for several statements, in a
pipeline) still hands the rest of the code the mapped classes it knows: ``detached`` fills
an instance's dict with the row's values as a loaded, committed row's, with no history and
no session (so no identity map, no flush and no lazy load).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import inspect

Entity = TypeVar("Entity")


def column_names(entity: type[Any], *, leave: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The mapped columns' attribute names of ``entity``, in its mapper's order, but
    ``leave``'s (each attribute maps one column of the same name)."""
    names = []
    for prop in inspect(entity).column_attrs:
        (column,) = prop.columns
        assert column.name == prop.key, (entity, prop.key)
        if prop.key not in leave:
            names.append(prop.key)
    return tuple(names)


def detached(entity: type[Entity], names: tuple[str, ...], values: Sequence[Any]) -> Entity:
    """An instance of ``entity`` holding ``values`` (of the columns ``names``) as the ORM's
    loader leaves a loaded row's (in its dict, committed, no history), in no session."""
    instance: Entity = inspect(entity).class_manager.new_instance()
    instance.__dict__.update(zip(names, values, strict=True))
    return instance
