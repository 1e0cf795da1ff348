"""A new request's writes in one statement, chat or text.

``enqueue_request`` writes the row, the horde tax (balance and ledger) and the operation key
in one statement of data-modifying CTEs, instead of three round trips. The key is claimed ON
CONFLICT DO NOTHING, and the row and the tax are written only if the claim took: a key
claimed first by another submit leaves the statement's writes empty and the caller retries
(``requests.chat.OperationKeyRace``). So a caller with nothing to write after it may send
the transaction's COMMIT in the same round trip (``commit``). An upfront hold is written
after it (``accounts.kudos.hold_upfront``). The row is written from the admission's
``WaitingPrompt`` with every column bound, Python defaults included, so its status reads
what was stored.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from psycopg import RawCursor
from sqlalchemy import (
    Numeric,
    Select,
    String,
    Table,
    bindparam,
    cast,
    exists,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.orm import Session
from sqlalchemy.schema import ColumnDefault

from runtime.native.accounts import kudos
from runtime.native.db.tables import OperationKey, WaitingPrompt
from runtime.native.queue.jobs import DIALECT, driver_of
from runtime.observability.context import note_kudos
from runtime.stores.database import UNFLUSHED_COMMIT
from runtime.stores.raw_sql import raw_sql, with_jsonb

REQUESTS: Table = WaitingPrompt.__table__  # type: ignore[assignment]
OPERATION_KEYS: Table = OperationKey.__table__  # type: ignore[assignment]


def _bound(column: Any) -> Any:
    """The row's parameter for ``column`` (``row_<name>``); a nullable JSON column's None
    is SQL NULL, as a column the ORM's flush was not given."""
    kind = JSONB(none_as_null=True) if isinstance(column.type, JSONB) else column.type
    return bindparam(f"row_{column.key}", type_=kind)


def _unsized(kind: Any) -> Any:
    """A column's type without its length or scale: a cast to VARCHAR(n) would cut a longer
    value short, where the INSERT refuses it; the column itself still applies both."""
    if isinstance(kind, String):
        return type(kind)()
    if isinstance(kind, Numeric):
        return Numeric()
    return kind


def _enqueue(claim: bool, *, unflushed: bool = False) -> Select[Any]:
    """The row, the tax and, with ``claim``, the operation key's claim, which the other two
    then wait on: a key claimed first by another submit leaves all three empty, so the
    statement wrote nothing (and a COMMIT sent behind it, ``commit``, keeps nothing).
    ``unflushed``: its transaction's commit does not wait for the disk (``commit``)."""
    columns = list(REQUESTS.columns)
    if not claim:
        queued = insert(REQUESTS).values({c.key: _bound(c) for c in columns})
        taxed = kudos.APPLY_KUDOS.cte("taxed")
    else:
        claimed = (
            insert(OPERATION_KEYS)
            .values(
                user_id=bindparam("user_id"),
                key=bindparam("operation_key"),
                fingerprint=bindparam("fingerprint"),
                wp_id=bindparam("wp_id"),
                kudos=bindparam("cost"),
            )
            .on_conflict_do_nothing(constraint="uq_operation_keys_user_key")
            .returning(OPERATION_KEYS.c.id)
            .cte("claimed")
        )
        won = exists(select(claimed.c.id))
        # each value cast to its column's type: a SELECT's NULL has no type of its own
        row = select(*(cast(_bound(c), _unsized(c.type)) for c in columns)).where(won)
        queued = insert(REQUESTS).from_select([c.key for c in columns], row)
        taxed = kudos.apply_kudos_statement(only_if=won).cte("taxed")
    queued_cte = queued.returning(REQUESTS.c.id).cte("queued")
    selected = [
        select(queued_cte.c.id).scalar_subquery().label("queued"),
        select(taxed.c.balance_after).scalar_subquery().label("balance"),
    ]
    if claim:
        selected.append(
            select(func.count()).select_from(claimed).scalar_subquery().label("claimed")
        )
    if unflushed:
        selected.append(literal_column(UNFLUSHED_COMMIT).label("unflushed"))
    return select(*selected)


_ENQUEUE = _enqueue(claim=False)
_ENQUEUE_AND_CLAIM = _enqueue(claim=True)
"""``enqueue_request``'s statements, built once: without an operation key, and with one."""
_RAW = {
    claim: raw_sql(_enqueue(claim, unflushed=True).compile(dialect=DIALECT).string)
    for claim in (False, True)
}
"""The two statements in Postgres's placeholders, for ``commit`` (sent on psycopg's
connection, in a pipeline with the COMMIT, which they make an unflushed one), by whether
they claim a key."""
JSON_PARAMS = frozenset(f"row_{c.key}" for c in REQUESTS.columns if isinstance(c.type, JSONB))


def row_values(wp: WaitingPrompt) -> dict[str, Any]:
    """Every column's value of the new row ``wp``: what it was given, else its column's
    Python default, which ``wp`` is then given as well. A column with a server default
    alone must be given (none such is left to the database)."""
    values = {}
    for column in REQUESTS.columns:
        name = column.key
        if name not in wp.__dict__:
            default = column.default
            if isinstance(default, ColumnDefault):
                setattr(wp, name, default.arg if default.is_scalar else default.arg(None))
            else:
                assert column.server_default is None, f"{name} must be given"
        values[f"row_{name}"] = wp.__dict__.get(name)
    return values


def enqueue_request(
    session: Session,
    wp: WaitingPrompt,
    tax: Decimal,
    operation: tuple[str, str] | None,
    *,
    commit: bool = False,
) -> bool:
    """Write the new request ``wp`` and its owner's horde tax, and claim the operation key
    (``operation``: the key and the body's fingerprint), in one statement of the session's
    transaction. False: another submit claimed the key first (nothing was written).

    ``commit``: the transaction's COMMIT goes in the same pipeline, one round trip for both,
    for a caller with nothing left to write after it; the session's own commit then finds
    nothing to commit (psycopg's, with no transaction open, sends nothing). That COMMIT
    does not wait for the disk: the request is visible at once, so a pop can take it while
    the caller waits for the flush (``stores.database.flush_wal``) before it tells anyone
    the request was queued."""
    delta = kudos.money(-tax)
    params = {
        **row_values(wp),
        "user_id": wp.user_id,
        "delta": delta,
        "reason": kudos.HORDE_TAX_REASON,
        "wp_id": wp.id,
        "generation_id": None,
        "worker_id": None,
    }
    if operation is not None:
        params.update(operation_key=operation[0], fingerprint=operation[1], cost=wp.kudos_estimate)
    note_kudos(session.info, kudos.HORDE_TAX_REASON, delta)  # counted once committed
    if not commit:
        written = session.execute(_ENQUEUE if operation is None else _ENQUEUE_AND_CLAIM, params)
        return operation is None or written.one().claimed == 1
    statement = _RAW[operation is not None]
    values = with_jsonb(params, JSON_PARAMS)
    driver = driver_of(session)
    with RawCursor(driver) as cursor, RawCursor(driver) as committing:
        with driver.pipeline():  # one Sync, at its end, answers both
            cursor.execute(statement.sql, statement.values(values))
            # a statement of the pipeline: psycopg's commit() would sync on its own
            committing.execute(b"COMMIT")
        row = cursor.fetchone()
    assert row is not None
    return operation is None or row[2] == 1
