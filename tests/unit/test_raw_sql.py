"""runtime.stores.raw_sql: named placeholders to Postgres's own, once."""

from __future__ import annotations

import pytest

from runtime.stores.raw_sql import raw_sql


def test_names_are_numbered_by_first_use_and_a_repeat_is_one_placeholder():
    statement = raw_sql("SELECT %(b)s, %(a)s WHERE x = %(b)s AND y LIKE 'a%%'")
    assert statement.sql == b"SELECT $1, $2 WHERE x = $1 AND y LIKE 'a%'"
    assert statement.names == ("b", "a")


def test_values_follow_the_placeholders_and_extra_names_are_left_out():
    statement = raw_sql("SELECT %(b)s, %(a)s, %(b)s")
    assert statement.values({"a": 1, "b": 2, "unused": 3}) == (2, 1)


def test_a_missing_value_is_an_error():
    with pytest.raises(KeyError):
        raw_sql("SELECT %(a)s").values({})


@pytest.mark.parametrize("sql", ["SELECT %s", "SELECT %(a)d", "SELECT 5 % 2"])
def test_a_placeholder_it_cannot_convert_is_refused(sql):
    with pytest.raises(ValueError, match="placeholder"):
        raw_sql(sql)
