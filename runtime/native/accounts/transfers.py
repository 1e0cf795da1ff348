"""Kudos transfers (upstream's transfer_kudos_from_apikey_to_username), with its checks in
its order, and its reverse wait kept in Redis (best effort, as upstream's).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from generated.accounts import (
    RECENT_TRANSFER_KEY,
    SHARED_KEY_UNLIMITED,
    TRANSFER_REVERSE_WAIT_SECONDS,
)
from generated.errors import (
    IdempotencyKeyConflict,
    InvalidKudosTransferAmount,
    InvalidTargetUsername,
    KudosTransferFromAnon,
    KudosTransferNotEnough,
    KudosTransferToAnon,
    KudosTransferToSelf,
    NegativeKudosTransfer,
    SharedKeyExpired,
    TooFastKudosTransfers,
)
from runtime.native.accounts.keys import ANONYMOUS_USER_ID, user_for_key
from runtime.native.accounts.kudos import apply_kudos, money
from runtime.native.accounts.shared_keys import expired, shared_key_id
from runtime.native.db.tables import KudosTransfer, SharedKey, User

log = logging.getLogger(__name__)

SENT = "transfer_sent"
RECEIVED = "transfer_received"
"""The ledger's reasons for a transfer's debit and credit."""
INT32 = 2**31 - 1


@dataclass(frozen=True)
class Target:
    """Who receives a transfer: a user, or a shared key's owner (and the key)."""

    user_id: int
    shared_key: SharedKey | None = None


def target_of(session: Session, username: str, now: datetime) -> Target:
    """Upstream's find_user_by_username (the id after the last '#'), else a shared key's
    id (refused when expired), else InvalidTargetUsername."""
    tail = username.rsplit("#", 1)[-1].strip()
    digits = tail.isascii() and tail.isdigit()  # "²".isdigit() too, which int() refuses
    if digits and int(tail) <= INT32 and session.get(User, int(tail)) is not None:
        return Target(int(tail))
    key_id = shared_key_id(username)
    key = session.get(SharedKey, key_id) if key_id is not None else None
    if key is None:
        raise InvalidTargetUsername(username=username[:100])
    if expired(key, now):
        raise SharedKeyExpired(param="username")
    return Target(key.user_id, key)


def _recent_key(source: int, dest: int) -> str:
    return RECENT_TRANSFER_KEY.format(source=source, dest=dest)


def check_reverse_wait(redis: Redis, source: int, dest: int) -> None:
    """Refuse a transfer to a user who sent kudos to ``source`` within the reverse wait."""
    try:
        left = redis.pttl(_recent_key(dest, source))
    except RedisError as exc:
        log.warning("kudos transfer's reverse wait unread: Redis: %s", type(exc).__name__)
        return
    if left > 0:
        raise TooFastKudosTransfers(seconds=TRANSFER_REVERSE_WAIT_SECONDS, retry_after=left / 1000)


def mark_sent(redis: Redis, source: int, dest: int) -> None:
    """Start the reverse wait of a committed transfer (best effort: it moved already)."""
    try:
        redis.set(_recent_key(source, dest), 1, ex=TRANSFER_REVERSE_WAIT_SECONDS)
    except RedisError as exc:
        log.warning("kudos transfer's reverse wait unmarked: Redis: %s", type(exc).__name__)


def whole_amount(amount: float) -> Decimal:
    """The kudos a transfer moves: a fraction is dropped, as upstream's integer parser does;
    a negative or zero amount is refused."""
    if amount < 0 and int(amount) != 0:
        raise NegativeKudosTransfer()
    if int(amount) == 0:
        raise InvalidKudosTransferAmount()
    return Decimal(int(amount))


@dataclass(frozen=True)
class Transferred:
    amount: Decimal
    source: int
    dest: int
    replayed: bool


def transfer(
    session: Session,
    redis: Redis,
    api_key: str | None,
    username: str,
    amount: float,
    idempotency_key: str | None,
    now: datetime,
) -> Transferred:
    """Move ``amount`` kudos from ``api_key``'s user to ``username`` in the session's
    transaction (the caller commits, then calls ``mark_sent``).

    The debit, the credit, their ledger rows and the transfer's row are one transaction,
    which locks both users' rows first, in the order of their ids: the balance checked is
    the one debited, so concurrent transfers never overdraw it, and two transfers between
    the same users in opposite directions cannot deadlock. The reverse wait is read before
    and marked after the commit: a Redis outage neither blocks a transfer nor undoes one."""
    source = user_for_key(session, api_key)  # a shared key is not a user's key: refused
    if source.id == ANONYMOUS_USER_ID:
        raise KudosTransferFromAnon()
    target = target_of(session, username, now)
    if target.user_id == ANONYMOUS_USER_ID:
        raise KudosTransferToAnon()
    if target.user_id == source.id:
        raise KudosTransferToSelf()
    check_reverse_wait(redis, source.id, target.user_id)
    moved = whole_amount(amount)
    balances = dict(
        session.execute(  # both rows locked, in the order of their ids
            select(User.id, User.kudos)
            .where(User.id.in_([source.id, target.user_id]))
            .order_by(User.id)
            .with_for_update()
        ).all()
    )
    if idempotency_key is not None:
        earlier = _earlier(session, source.id, idempotency_key)
        if earlier is not None:
            if (earlier.dest_id, earlier.amount) != (target.user_id, money(moved)):
                raise IdempotencyKeyConflict()
            return Transferred(moved, source.id, target.user_id, replayed=True)
    if balances[source.id] < moved:
        raise KudosTransferNotEnough(amount=float(moved), balance=float(balances[source.id]))
    _move(session, source.id, target, moved, idempotency_key)
    return Transferred(moved, source.id, target.user_id, replayed=False)


def _earlier(session: Session, source: int, idempotency_key: str) -> KudosTransfer | None:
    return session.scalars(
        select(KudosTransfer).where(
            KudosTransfer.source_id == source, KudosTransfer.idempotency_key == idempotency_key
        )
    ).first()


def _move(session: Session, source: int, target: Target, amount: Decimal, key: str | None) -> None:
    """The transfer's writes: its row first (a concurrent transfer under the same
    Idempotency-Key that got here too waits on it, then finds it taken), then the debit,
    the credit and the shared key's limit."""
    key_id: uuid.UUID | None = target.shared_key.id if target.shared_key is not None else None
    row = {
        "source_id": source, "dest_id": target.user_id, "sharedkey_id": key_id,
        "amount": amount, "idempotency_key": key,
    }  # fmt: skip
    written = session.execute(
        insert(KudosTransfer)
        .values(**row)
        .on_conflict_do_nothing(constraint="uq_kudos_transfers_source_key")
        .returning(KudosTransfer.id)
    ).first()
    if written is None:  # unreachable: the source's row lock serializes its transfers
        raise IdempotencyKeyConflict()
    apply_kudos(session, source, -amount, SENT)
    apply_kudos(session, target.user_id, amount, RECEIVED)
    if key_id is not None:
        session.execute(
            update(SharedKey)
            .where(SharedKey.id == key_id, SharedKey.kudos != SHARED_KEY_UNLIMITED)
            .values(kudos=SharedKey.kudos + amount)
        )
