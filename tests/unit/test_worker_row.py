"""runtime.native.db.tables.WorkerRow: the online pool's rows carry every column of the
workers table, in its order, under the same names, so what the fit rules and the
pool's readers read of a Worker they read of a row."""

from __future__ import annotations

import typing

from runtime.native.db.tables import Worker, WorkerRow


def test_a_worker_row_has_the_table_s_columns_in_order() -> None:
    assert WorkerRow._fields == tuple(column.name for column in Worker.__table__.columns)


def test_a_worker_row_s_types_are_the_entity_s() -> None:
    entity = typing.get_type_hints(Worker)
    row = typing.get_type_hints(WorkerRow)
    for name in WorkerRow._fields:
        assert typing.get_args(entity[name]) == (row[name],), name
