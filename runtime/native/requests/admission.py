"""A submit's admission reads in one round trip, chat or text.

``read_admission`` sends, in one psycopg pipeline (BEGIN rides with them:
``stores.pipelined_begin``), the key's user locked FOR UPDATE with its operation key's row,
then the user's queued jobs (with the online pool for a chat submit). Postgres runs them in
order, so the count is read after the lock and the concurrency check stays exact. An
operation key committed while this submit waited for the lock is not seen: its claim then
fails and the submit is retried (``requests.chat.OperationKeyRace``), finding the winner's
request.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from psycopg import RawCursor
from sqlalchemy import select
from sqlalchemy.orm import Session

from generated.errors import InvalidAPIKey
from runtime.native.accounts.keys import KEY_OWNER
from runtime.native.db.detached import column_names, detached
from runtime.native.db.tables import AnyWorker, User
from runtime.native.queue.jobs import DIALECT, driver_of
from runtime.native.queue.policy import Policy
from runtime.native.requests.rows import queued_jobs_of
from runtime.native.requests.text import ONLINE_COLUMNS, ONLINE_FROM, online_rows
from runtime.observability import context as request_context
from runtime.stores.raw_sql import raw_sql

USER_COLUMNS = column_names(User)

_USER_AND_OPERATION = raw_sql(f"""
SELECT {", ".join(f"users.{c}" for c in USER_COLUMNS)},
    operation_keys.id, operation_keys.wp_id, operation_keys.fingerprint, operation_keys.kudos
FROM api_keys JOIN users ON users.id = api_keys.user_id
LEFT JOIN operation_keys
    ON operation_keys.user_id = users.id AND operation_keys.key = %(operation_key)s
WHERE api_keys.key_hash = %(key_hash)s
FOR UPDATE OF users
""")
"""The key's user, locked, and the user's row of the operation key (NULLs when none)."""

_QUEUED = select(queued_jobs_of(KEY_OWNER)).compile(dialect=DIALECT)
_POOL = raw_sql(f"SELECT ({_QUEUED.string}), {ONLINE_COLUMNS}{ONLINE_FROM}")
"""The key's user's queued jobs (``rows.queued_jobs``) on every online worker's row."""
_QUEUED_ALONE = raw_sql(f"SELECT ({_QUEUED.string})")
"""The key's user's queued jobs, for a submit that needs no pool (a text submit)."""
_POOL_LITERALS = {k: v for k, v in _QUEUED.params.items() if k != "key_hash"}
"""The queued count's literal parameters, as SQLAlchemy compiled them (its zeros)."""


@dataclass(frozen=True)
class Operation:
    """The user's row of a submit's operation key."""

    wp_id: uuid.UUID | None
    """None: the key was retired by a cancel that found no request under it."""
    fingerprint: str
    kudos: Decimal


@dataclass(frozen=True)
class Admission:
    """What a submit's admission reads, under the user's row lock."""

    user: User
    """The key's user, locked FOR UPDATE, in no session (``db.detached``)."""
    operation: Operation | None
    """The request already under the operation key (None: no key, or a key not used yet)."""
    online: list[tuple[AnyWorker, bool]]
    """The online workers with their owners' trust (``requests.text.online_workers``);
    none read when the pool was not asked for."""
    queued: int | None
    """The user's ``queued_jobs``; None when the pool was read and no worker is online
    (no row carried it)."""


def read_admission(
    session: Session,
    policy: Policy,
    key_hash: str,
    operation_key: str | None,
    now: datetime,
    *,
    pool: bool = True,
) -> Admission:
    """The submit's user, found by its key's digest ``key_hash`` (``accounts.shared_keys.
    requester``; InvalidAPIKey for an unknown key), locked, its operation key's row, the
    online pool as of ``now`` (unless ``pool`` is false) and the user's queued jobs: one
    round trip in the session's transaction."""
    params = {
        **_POOL_LITERALS,
        "key_hash": key_hash,
        "operation_key": operation_key,
        "since": now - timedelta(seconds=policy.worker_stale_seconds),
    }
    counted = _POOL if pool else _QUEUED_ALONE
    driver = driver_of(session)
    with RawCursor(driver) as lock, RawCursor(driver) as count:
        with driver.pipeline():
            lock.execute(_USER_AND_OPERATION.sql, _USER_AND_OPERATION.values(params))
            count.execute(counted.sql, counted.values(params))
        row = lock.fetchone()
        rows = count.fetchall()
    if row is None:
        raise InvalidAPIKey()
    at = len(USER_COLUMNS)
    user = detached(User, USER_COLUMNS, row[:at])
    request_context.set_user(user.id)  # the access log's user id
    operation_id, wp_id, fingerprint, kudos = row[at:]
    operation = None if operation_id is None else Operation(wp_id, fingerprint, kudos)
    queued = int(rows[0][0]) if rows else None
    online = online_rows([r[1:] for r in rows]) if pool else []
    return Admission(user, operation, online, queued)
