"""A new request's writes in one statement, chat or text.

``enqueue_request`` writes the row, the horde tax (balance and ledger) and the operation key
in one statement of data-modifying CTEs, instead of three round trips. The key is claimed ON
CONFLICT DO NOTHING: a key claimed first by another submit leaves the claim empty and the
caller retries (``requests.chat.OperationKeyRace``). An upfront hold is written after it
(``accounts.kudos.hold_upfront``). The row is written from the admission's ``WaitingPrompt``
with every column bound, Python defaults included, so its status reads what was stored.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import Select, Table, bindparam, func, select
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.orm import Session
from sqlalchemy.schema import ColumnDefault

from runtime.native.accounts import kudos
from runtime.native.db.tables import OperationKey, WaitingPrompt
from runtime.observability.context import note_kudos

REQUESTS: Table = WaitingPrompt.__table__  # type: ignore[assignment]
OPERATION_KEYS: Table = OperationKey.__table__  # type: ignore[assignment]


def _bound(column: Any) -> Any:
    """The row's parameter for ``column`` (``row_<name>``); a nullable JSON column's None
    is SQL NULL, as a column the ORM's flush was not given."""
    kind = JSONB(none_as_null=True) if isinstance(column.type, JSONB) else column.type
    return bindparam(f"row_{column.key}", type_=kind)


def _enqueue(claim: bool) -> Select[Any]:
    queued = (
        insert(REQUESTS)
        .values({c.key: _bound(c) for c in REQUESTS.columns})
        .returning(REQUESTS.c.id)
        .cte("queued")
    )
    taxed = kudos.APPLY_KUDOS.cte("taxed")
    columns = [
        select(queued.c.id).scalar_subquery().label("queued"),
        select(taxed.c.balance_after).scalar_subquery().label("balance"),
    ]
    if claim:
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
        columns.append(select(func.count()).select_from(claimed).scalar_subquery().label("claimed"))
    return select(*columns)


_ENQUEUE = _enqueue(claim=False)
_ENQUEUE_AND_CLAIM = _enqueue(claim=True)
"""``enqueue_request``'s statements, built once: without an operation key, and with one."""


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
) -> bool:
    """Write the new request ``wp`` and its owner's horde tax, and claim the operation key
    (``operation``: the key and the body's fingerprint), in one statement of the session's
    transaction. False: another submit claimed the key first (nothing is to be kept)."""
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
    row = session.execute(_ENQUEUE if operation is None else _ENQUEUE_AND_CLAIM, params).one()
    note_kudos(session.info, kudos.HORDE_TAX_REASON, delta)  # counted once committed
    return operation is None or row.claimed == 1
