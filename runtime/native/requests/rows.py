"""What text and chat requests share as rows of ``waiting_prompts``: finding one by id (a
text id is not found on the chat routes, and the reverse), the user's concurrency count,
admission of new jobs (concurrency, the anonymous key's share per address and its kudos an
hour, upfront kudos)
and what queuing one charges.

``text_requests`` and ``chat_requests`` call these; each keeps the checks of its own kind.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    bindparam,
    func,
    literal_column,
    select,
)
from sqlalchemy.orm import Session

from generated.defences import ANONYMOUS_QUEUED_PER_SOURCE
from generated.errors import (
    AnonymousKudosExhausted,
    KudosUpfront,
    RequestNotFound,
    TooManyAnonymousPrompts,
    TooManyPrompts,
)
from generated.pricing import ANONYMOUS_CHARGE_PER_HOUR
from runtime.native.accounts.keys import ANONYMOUS_USER_ID
from runtime.native.db.tables import Generation, KudosLedger, User, WaitingPrompt
from runtime.native.queue.policy import Policy

CONCURRENCY_RETRY_AFTER = 5
"""Seconds a TooManyPrompts refusal asks the client to wait."""


def find_request(
    session: Session, request_id: str, *, is_chat: bool, request_type: str, lock: bool = False
) -> WaitingPrompt:
    """The request of that kind with ``request_id``, or RequestNotFound naming the kind.

    ``lock`` (a cancel): its running jobs' rows are locked first, then the request's, the
    order a payment (``horde_pay``), a fault and the sweep take them (a job's row, then its
    request's). Locked the other way round, a cancel and a worker's submit of the same
    request each held what the other waited for, and Postgres broke the deadlock after a
    second by failing one of them (503)."""
    wp_id = request_uuid(request_id, request_type)
    query = select(WaitingPrompt).where(
        WaitingPrompt.id == wp_id, WaitingPrompt.is_chat.is_(is_chat)
    )
    if lock:
        session.execute(_RUNNING_JOBS, {"wp_id": wp_id})
    wp = session.scalars(query.with_for_update() if lock else query).first()
    if wp is None:
        raise RequestNotFound(request_type=request_type, id=request_id)
    return wp


def request_uuid(request_id: str, request_type: str) -> uuid.UUID:
    """``request_id`` as a UUID; any other spelling is RequestNotFound naming the kind."""
    try:
        return uuid.UUID(request_id)
    except ValueError:
        raise RequestNotFound(request_type=request_type, id=request_id) from None


def queued() -> list[ColumnElement[bool]]:
    """SQL: a request with jobs left to hand out, spelled as the predicate of the partial
    index ``ix_waiting_prompts_queue`` (``active AND n > 0``, the 0 inlined, not a bound
    parameter) so the planner can use it, prepared statements included. Written ``active IS
    TRUE AND n > $1`` it cannot, and every pop sorted the whole queue (9 ms on 10k rows)."""
    return [WaitingPrompt.active.expression, WaitingPrompt.n > literal_column("0")]


def unfinished() -> list[Any]:
    """SQL: a job handed out and still running (no result, not faulted, not cancelled).
    Spelled on the table's columns, so a Core UPDATE using it stays Core (an ORM attribute
    in its WHERE makes it an ORM update, which synchronizes the session at a cost)."""
    columns = Generation.__table__.c
    return [
        columns.generation.is_(None),
        columns.faulted.is_(False),
        columns.cancelled.is_(False),
    ]


def _running_jobs(wp_id: Any) -> Select[Any]:
    """SQL: the ids of the request ``wp_id``'s running jobs (a value or a parameter)."""
    return select(Generation.id).where(Generation.wp_id == wp_id, *unfinished())


_RUNNING_JOBS = (
    _running_jobs(bindparam("wp_id"))
    .order_by(Generation.start_time, Generation.id)
    .with_for_update()
)
"""A request's running jobs, locked in one order (``find_request`` for a cancel)."""


def running_jobs_free(wp_id: uuid.UUID) -> Select[Any]:
    """SQL: the ids of ``wp_id``'s running jobs no other transaction holds, locked. A cancel
    holds those ``find_request`` found; a job handed out since is locked after the request,
    so one a worker's payment holds now is left to it (the payment then waits for the
    request's lock, and its reply is paid: it landed before the cancel reached it)."""
    return _running_jobs(wp_id).with_for_update(skip_locked=True)


def queued_jobs(session: Session, user_id: int) -> int:
    """Jobs the user has waiting or processing (upstream's concurrency count), one statement."""
    return int(session.execute(_QUEUED_JOBS, {"user_id": user_id}).scalar_one())


def queued_jobs_of(
    user_id: ColumnElement[int], source: ColumnElement[str] | None = None
) -> ColumnElement[int]:
    """``queued_jobs`` as a column, for the user ``user_id`` (a parameter, or a subquery
    naming the user some other way): a statement that runs after the user's row lock may
    carry it (a chat request's admission reads it with the online workers). ``source``:
    only the user's requests from that address."""
    mine = [WaitingPrompt.user_id == user_id]
    if source is not None:
        mine.append(WaitingPrompt.ipaddr == source)
    waiting = (
        select(func.coalesce(func.sum(WaitingPrompt.n), 0))
        .where(*mine, WaitingPrompt.active.is_(True))
        .scalar_subquery()
    )
    processing = (
        select(func.count())
        .select_from(Generation)
        .join(WaitingPrompt, WaitingPrompt.id == Generation.wp_id)
        .where(*mine, *unfinished())
        .scalar_subquery()
    )
    return (waiting + processing).label("queued_jobs")


_QUEUED_JOBS = select(queued_jobs_of(bindparam("user_id", type_=Integer())))
"""``queued_jobs``' statement, built once (building it on each submit cost CPU:
docs/performance.md; SQLAlchemy keeps a statement's cache key on it, so a kept one is not
walked again)."""
_ANONYMOUS_JOBS_FROM = select(
    queued_jobs_of(literal_column(str(ANONYMOUS_USER_ID)), bindparam("source", type_=String()))
)
"""The anonymous user's jobs from one address, built once."""
SOURCE_CHARS = 64
"""A request row keeps this much of its source address (``ipaddr``)."""


def anonymous_share(session: Session, jobs: int, source: str) -> None:
    """Refuse ``jobs`` more of the anonymous user from ``source`` over its share per address
    (run under the user's row lock, so concurrent submits count each other)."""
    held = int(
        session.execute(_ANONYMOUS_JOBS_FROM, {"source": source[:SOURCE_CHARS]}).scalar_one()
    )
    if held + jobs > ANONYMOUS_QUEUED_PER_SOURCE:
        raise TooManyAnonymousPrompts(
            count=held + jobs,
            limit=ANONYMOUS_QUEUED_PER_SOURCE,
            retry_after=CONCURRENCY_RETRY_AFTER,
        )


CHARGE_REASON = "charge"
"""The ledger's reason for what a request is charged for a generation (``horde_pay``)."""
HOUR_SECONDS = 3600
"""The window ``anonymous_charges`` sums (the spec's limit is per hour)."""
_ANONYMOUS_CHARGES = select(
    -func.coalesce(func.sum(KudosLedger.delta), 0),
    func.min(KudosLedger.created),
    func.now(),
).where(
    # literals, so the planner matches the partial index's predicate
    KudosLedger.user_id == literal_column(str(ANONYMOUS_USER_ID)),
    KudosLedger.reason == literal_column(f"'{CHARGE_REASON}'"),
    KudosLedger.created > func.now() - literal_column(f"interval '{HOUR_SECONDS} seconds'"),
)
"""The anonymous user's charges of the last hour, its oldest one's time, and now (the
partial index ix_kudos_ledger_anonymous_charges serves it)."""


def anonymous_budget(session: Session, limit: float = ANONYMOUS_CHARGE_PER_HOUR) -> None:
    """Refuse an anonymous request while the anonymous user's charges of the last hour reach
    ``limit``: the kudos anonymous requests pay workers in an hour are bounded, so no worker
    farms them. It asks to retry when the oldest of those charges leaves the hour."""
    row: Any = session.execute(_ANONYMOUS_CHARGES).one()
    charged, now = row[0], row[2]
    oldest: datetime | None = row[1]  # None: no charge in the hour
    if Decimal(charged) < Decimal(str(limit)):
        return
    left = 1.0 if oldest is None else HOUR_SECONDS - (now - oldest).total_seconds()
    raise AnonymousKudosExhausted(
        charged=float(charged), limit=limit, retry_after=max(1, math.ceil(left))
    )


def admit_jobs(
    session: Session,
    policy: Policy,
    user: User,
    jobs: int,
    max_length: int,
    cost: Decimal,
    *,
    source: str,
    slow_workers: bool = True,
    counted: int | None = None,
) -> bool:
    """Refuse ``jobs`` more over the user's concurrency (and, for the anonymous user, over
    its share for ``source``, the client's address), or a request the user cannot hold
    upfront: a large one, or one that keeps slow workers away (``slow_workers`` false, as
    upstream's require_upfront_kudos); returns whether the request needs an upfront hold.
    ``counted``: the user's ``queued_jobs``, already read under the user's row lock."""
    count = queued_jobs(session, user.id) if counted is None else counted
    if count + jobs > user.concurrency:
        raise TooManyPrompts(
            count=count + jobs, concurrency=user.concurrency, retry_after=CONCURRENCY_RETRY_AFTER
        )
    if user.id == ANONYMOUS_USER_ID:
        anonymous_share(session, jobs, source)
        anonymous_budget(session, policy.anonymous_charge_per_hour)
    needs_upfront = max_length > policy.upfront_max_length or not slow_workers
    if needs_upfront and user.kudos < cost:
        raise KudosUpfront(kudos=float(cost), balance=float(user.kudos))
    return needs_upfront


def queue_priority(policy: Policy, user: User) -> Decimal:
    """A new request's place in the queue: the user's kudos, the anonymous user's fixed one."""
    if user.id == ANONYMOUS_USER_ID:
        return Decimal(policy.anonymous_priority)
    return user.kudos
