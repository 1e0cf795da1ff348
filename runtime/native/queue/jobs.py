"""The worker side of the text queue: register on pop, hand out jobs, take submissions.

A pop locks its request ``FOR UPDATE SKIP LOCKED`` (kudos priority, then age), so concurrent
pops never hand out the same job. Text and chat requests share the queue: a pop with a chat
declaration also matches the chat requests it covers (``fit.chat_queue_filters``; with
prompt_jobs false, only those). A user may register ``Policy.workers_per_user`` worker names
(trusted: ``workers_per_trusted_user``; else TooManyWorkers), as upstream, the user's row
locked while counting so concurrent pops cannot pass it together.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg import RawCursor
from psycopg.types.json import Jsonb
from sqlalchemy import Boolean, String, and_, case, false, func, literal_column, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from generated.chat.names import DECL_CHAT_JOBS, DECL_MODEL_ID, DECL_PROMPT_JOBS
from generated.errors import (
    TooManyWorkers,
    TooManyWorkersTrusted,
    WorkerMaintenance,
    WrongCredentials,
)
from runtime.native.accounts.keys import ANONYMOUS_USER_ID
from runtime.native.db.tables import User, WaitingPrompt, Worker
from runtime.native.queue.fit import (
    BOUND_TERMS,
    SKIP_REASONS,
    VALIDATED_BACKENDS_KEY,
    ChatShape,
    Terms,
    bound_chat_values,
    chat_filters,
    chat_shape,
    chat_values,
    fast_sql,
    fast_values,
    queue_filters,
    term_values,
    text_filters,
)
from runtime.native.queue.policy import Policy
from runtime.native.requests.rows import queued
from runtime.stores.database import UNFLUSHED_COMMIT
from runtime.stores.raw_sql import RawSql, raw_sql


@dataclass(frozen=True)
class PoppedJob:
    """What a pop hands out: its request's fields and its jobs' ids."""

    wp_id: uuid.UUID
    is_chat: bool
    params: dict[str, Any]
    prompt: str
    softprompt: str | None
    origin_id: str | None
    model: str
    ttl: int
    ids: list[uuid.UUID]


@dataclass(frozen=True)
class PoppedChat:
    """What a chat job's payload reads of its request besides ``PoppedJob``'s: returned by
    the pop's own statement: a session load of the row and two deferred loads of its
    stored request and messages were three more round trips after the pick."""

    chat_request: dict[str, Any] | None
    messages: list[Any] | None
    max_tokens_lowered_to: int | None
    messages_object: str | None


@dataclass
class Popped:
    job: PoppedJob | None = None
    chat: PoppedChat | None = None
    """A chat job's request (None for a text job)."""
    skipped: dict[str, int] = field(default_factory=dict)


def register_worker(
    session: Session,
    policy: Policy,
    user: User,
    body: dict[str, Any],
    now: datetime,
    declaration: dict[str, Any] | None = None,
) -> Worker:
    """The pop's worker, created or refreshed from its declaration; owned by ``user``.

    ``declaration`` is the parsed chat declaration; kept only when it declares chat_jobs.
    """
    worker = _locked_worker(session, body["name"])
    if worker is None:
        worker = _new_worker(session, policy, user, body)
    if worker.user_id != user.id:
        raise WrongCredentials()
    for column, value in _declared(body, declaration).items():
        setattr(worker, column, value)
    checked_in(worker, policy, now)
    session.flush()
    if worker.maintenance:
        raise WorkerMaintenance(name=worker.name, reason=worker.maintenance_reason or "")
    return worker


def checked_in(worker: Worker, policy: Policy, now: datetime) -> None:
    """A pop's check-in at ``now``: the time since the last one counts as uptime when the
    worker was online then (within the stale window) and is not in maintenance, as
    upstream's Worker.check_in counts it. ``UPTIME_SQL`` is the same in SQL."""
    online_since = now - timedelta(seconds=policy.worker_stale_seconds)
    if not worker.maintenance and worker.last_check_in > online_since:
        worker.uptime += max(0.0, (now - worker.last_check_in).total_seconds())
    worker.last_check_in = now


UPTIME_SQL = (
    "uptime = workers.uptime + CASE WHEN workers.last_check_in > %(online_since)s"
    " THEN greatest(0, extract(epoch FROM %(now)s - workers.last_check_in))::double precision"
    " ELSE 0 END"
)
"""``checked_in``'s uptime in the pop's registration (which skips a worker in maintenance)."""


def leave_pool(session: Session, policy: Policy, user: User, name: str, now: datetime) -> None:
    """The worker ``name`` of ``user`` is offline from ``now``: its last check-in is moved
    back to the stale line (``online_workers`` counts a check-in after it), never forward.
    An unknown name is offline already; another user's is refused."""
    worker = _locked_worker(session, name)
    if worker is None:
        return
    if worker.user_id != user.id:
        raise WrongCredentials()
    stale = now - timedelta(seconds=policy.worker_stale_seconds)
    if worker.last_check_in > stale:
        worker.last_check_in = stale


@dataclass(frozen=True)
class Registered:
    """A pop's key and worker, from ``register_known_worker``."""

    user_id: int
    trusted: bool
    worker: Worker | None
    """The worker, refreshed (transient: not in the session); None when the name is not yet
    this user's (new, or another user's): ``register_worker`` then decides."""


def register_and_pop(
    session: Session | Connection,
    policy: Policy,
    key_hash: str,
    body: dict[str, Any],
    now: datetime,
    declaration: dict[str, Any] | None = None,
    *,
    count_skipped: bool = True,
) -> tuple[Registered | None, Popped]:
    """A known worker's pop in one statement (``_pop_sql`` registering): the key's user, the
    worker's refresh from its declaration (when the name is that user's worker and not in
    maintenance) and ``pop_text_job``'s pick. None: no such key. A Registered without a
    worker changed nothing: the name is new or another user's, or the worker is in
    maintenance; ``register_worker`` then decides, in a transaction.

    Its commit does not wait for the WAL to reach the disk (``synchronous_commit`` off for
    its own transaction, set in the statement): a crash may lose the last moments' check-ins
    and claims. A lost claim leaves its request queued, to be popped again, and refuses the
    lost job's submit (InvalidJobID): nothing accepted is lost and nothing is charged twice.
    The payment's commit waits, and flushes the claim before it with it."""
    declared = _declared(body, declaration)
    worker = Worker(name=body["name"], **declared)
    prompt_jobs, shape = _pop_shape(declaration)
    params = {
        **term_values(worker, False),  # the body's terms (the row's: REGISTERED_TERMS)
        **_pop_values(policy, worker, body["amount"], now, declaration, shape),
        **fast_values(worker),
        **declared,
        "models": Jsonb(declared["models"]),
        "chat_declaration": Jsonb(declaration) if declared["chat_declaration"] else None,
        "key_hash": key_hash, "name": body["name"], "anonymous": ANONYMOUS_USER_ID,
        "online_since": now - timedelta(seconds=policy.worker_stale_seconds),
    }  # fmt: skip
    sql, defaults = _pop_sql(prompt_jobs, shape, registering=True)
    with raw_cursor(session) as cursor:
        cursor.execute(sql.sql, sql.values({**defaults, **params}))
        row = cursor.fetchone()
    if row is None:
        return None, Popped()
    user_id, trusted, worker_id, speed, *popped = row
    if worker_id is None:
        return Registered(user_id, trusted, None), Popped()
    worker.id, worker.user_id, worker.speed = worker_id, user_id, speed
    registered = Registered(user_id, trusted, worker)
    if popped[0] is None:
        if not count_skipped:
            return registered, Popped()
        return registered, Popped(
            skipped=skipped_counts(session, queue_filters(worker, trusted), now)
        )
    return registered, _popped(policy, popped)


def _declared(body: dict[str, Any], declaration: dict[str, Any] | None) -> dict[str, Any]:
    """What a pop's body declares of its worker (the worker row's columns)."""
    chat = bool(declaration and declaration[DECL_CHAT_JOBS])
    return {
        "models": list(dict.fromkeys(body.get("models") or [])),
        "max_length": body["max_length"],
        "max_context_length": body["max_context_length"],
        "threads": body.get("threads", 1),
        "nsfw": bool(body.get("nsfw")),
        "bridge_agent": (body.get("bridge_agent") or "")[:255],
        "extra_slow_worker": bool(body.get("extra_slow_worker")),
        "chat_declaration": declaration if chat else None,
        "prompt_jobs": bool(declaration[DECL_PROMPT_JOBS]) if declaration else True,
    }


def _locked_worker(session: Session, name: str) -> Worker | None:
    return session.scalars(select(Worker).where(Worker.name == name).with_for_update()).first()


def _new_worker(session: Session, policy: Policy, user: User, body: dict[str, Any]) -> Worker:
    """Register a name first seen by this pop, once however many pops race for it.

    A worker's threads often pop together under one new name: the user's row lock (taken by
    the limit check) serializes the user's registrations and the name is looked up again
    under it, and the row is inserted ON CONFLICT DO NOTHING, so a pop that raced another
    user for the name finds that user's row (WrongCredentials), never a UniqueViolation.
    """
    check_worker_limit(session, policy, user, name=body["name"])
    worker = _locked_worker(session, body["name"])
    if worker is not None:
        return worker
    session.execute(
        insert(Worker)
        .values(
            id=uuid.uuid4(),
            name=body["name"],
            user_id=user.id,
            max_length=body["max_length"],
            max_context_length=body["max_context_length"],
        )
        .on_conflict_do_nothing(index_elements=[Worker.name])
    )
    worker = _locked_worker(session, body["name"])
    assert worker is not None  # ours, or the committed row of the user who won the name
    return worker


def check_worker_limit(
    session: Session, policy: Policy, user: User, *, name: str | None = None
) -> None:
    """Refuse one more worker name past the user's limit (upstream's TooManyWorkers)."""
    session.execute(select(User.id).where(User.id == user.id).with_for_update())
    others = Worker.user_id == user.id
    if name is not None:  # a name registered while this pop waited for the lock is not new
        others = and_(others, Worker.name != name)
    count = session.scalar(select(func.count()).select_from(Worker).where(others))
    if user.trusted and int(count or 0) >= policy.workers_per_trusted_user:
        raise TooManyWorkersTrusted(limit=policy.workers_per_trusted_user)
    if not user.trusted and int(count or 0) >= policy.workers_per_user:
        raise TooManyWorkers(limit=policy.workers_per_user)


def pop_text_job(
    session: Session,
    policy: Policy,
    worker: Worker,
    trusted: bool,
    amount: int,
    now: datetime,
    declaration: dict[str, Any] | None = None,
    *,
    count_skipped: bool = True,
) -> Popped:
    """The next job ``worker`` may take, text or (with a chat declaration) chat.

    One statement (``_pop_sql``: built and compiled once per declaration shape, the worker's
    values bound): the next request, locked (SKIP LOCKED), its n lowered by what this pop
    takes, and that many jobs inserted, with what a chat job's payload reads of its request;
    run on the session's driver connection (no SQL expression built, no entity loaded).

    ``count_skipped``: an empty answer counts the requests each of the worker's terms turned
    away (upstream's ``skipped``, a count over the queue); False for a long poll's run that
    goes on waiting, which sends no answer: counted on every such run, it was a large
    share of the native API's CPU (docs/performance.md)."""
    prompt_jobs, shape = _pop_shape(declaration)
    sql, defaults = _pop_sql(prompt_jobs, shape)
    params = {
        **defaults,
        **term_values(worker, trusted),
        **_pop_values(policy, worker, amount, now, declaration, shape),
        "worker_id": worker.id,
    }
    with raw_cursor(session) as cursor:
        cursor.execute(sql.sql, sql.values(params))
        row = cursor.fetchone()
    if row is None:
        if not count_skipped:
            return Popped()
        return Popped(skipped=skipped_counts(session, queue_filters(worker, trusted), now))
    return _popped(policy, row)


def _pop_shape(declaration: dict[str, Any] | None) -> tuple[bool, ChatShape | None]:
    """Whether a declaration takes text jobs, and the shape of its chat jobs' filters."""
    prompt_jobs = declaration is None or bool(declaration[DECL_PROMPT_JOBS])
    chat = declaration is not None and bool(declaration[DECL_CHAT_JOBS])
    return prompt_jobs, chat_shape(declaration) if declaration is not None and chat else None


def _pop_values(
    policy: Policy,
    worker: Worker,
    amount: int,
    now: datetime,
    declaration: dict[str, Any] | None,
    shape: ChatShape | None,
) -> dict[str, Any]:
    """The pop's parameters besides the worker's terms (``shape``: ``_pop_shape``'s)."""
    return {
        **(chat_values(declaration, shape) if declaration is not None and shape else {}),
        "now": now,
        "amount": amount,
        "worker_models": list(worker.models),
        "chat_model": declaration[DECL_MODEL_ID] if declaration is not None else None,
        "ttl": policy.generation_ttl_seconds,
    }


def _popped(policy: Policy, row: Any) -> Popped:
    """A pop's job from its row (``_POPPED``'s columns), a chat job's request with it."""
    wp_id, is_chat, params_, prompt, softprompt, origin_id, model, ids, *chat = row
    job = PoppedJob(
        wp_id=wp_id, is_chat=is_chat, params=params_, prompt=prompt, softprompt=softprompt,
        origin_id=origin_id, model=model, ttl=policy.generation_ttl_seconds, ids=list(ids),
    )  # fmt: skip
    return Popped(job=job, chat=PoppedChat(*chat) if is_chat else None)


@contextmanager
def driver_cursor(session: Session) -> Iterator[Any]:
    """A cursor of the driver's connection under the session's transaction."""
    connection = session.connection().connection.driver_connection
    assert connection is not None
    with connection.cursor() as cursor:
        yield cursor


@contextmanager
def raw_cursor(session: Session | Connection) -> Iterator[Any]:
    """A ``RawCursor`` of the driver's connection under the session's (or connection's)
    transaction: it runs a ``RawSql`` statement without parsing it again."""
    with RawCursor(driver_of(session)) as cursor:
        yield cursor


def driver_of(db: Session | Connection) -> Any:
    """The psycopg connection under the session's (or connection's) transaction."""
    connection = db.connection() if isinstance(db, Session) else db
    driver = connection.connection.driver_connection
    assert driver is not None
    return driver


DIALECT = PGDialect_psycopg()  # type: ignore[no-untyped-call]
_REGISTER_FRAME = """
owner AS (
    SELECT users.id, users.trusted, {unflushed} AS unflushed
    FROM api_keys JOIN users ON users.id = api_keys.user_id
    WHERE api_keys.key_hash = %(key_hash)s LIMIT 1
), registered AS (
    UPDATE workers SET models = %(models)s, max_length = %(max_length)s,
        max_context_length = %(max_context_length)s, threads = %(threads)s, nsfw = %(nsfw)s,
        bridge_agent = %(bridge_agent)s, extra_slow_worker = %(extra_slow_worker)s,
        chat_declaration = %(chat_declaration)s, prompt_jobs = %(prompt_jobs)s,
        {uptime}, last_check_in = %(now)s
    FROM owner
    WHERE workers.name = %(name)s AND workers.user_id = owner.id
        AND owner.id <> %(anonymous)s AND NOT workers.maintenance
    RETURNING workers.id, workers.speed
), worker AS (
    SELECT registered.id, registered.id::text AS id_text,
        {fast} AS fast
    FROM registered
),"""
"""The key's user and a known worker's refresh, ahead of the pop (``register_and_pop``)."""
REGISTERED_TERMS: Terms = {
    **BOUND_TERMS,
    "w_id": literal_column("(SELECT worker.id_text FROM worker)", String()),
    "w_trusted": literal_column("(SELECT owner.trusted FROM owner)", Boolean()),
    "w_fast": literal_column("(SELECT worker.fast FROM worker)", Boolean()),
}
"""The worker's terms the registration's row gives (its id, its owner's trust, its speed)."""
_POP_FRAME = """
WITH {registering} picked AS (
    SELECT waiting_prompts.id, waiting_prompts.n FROM waiting_prompts
    WHERE {queued} AND waiting_prompts.expiry > %(now)s AND ({kinds}){registered}
    ORDER BY waiting_prompts.extra_priority DESC, waiting_prompts.created ASC
    LIMIT 1 FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE waiting_prompts SET n = waiting_prompts.n - CASE
        WHEN waiting_prompts.is_chat
            OR coalesce((waiting_prompts.params ->> 'disable_batching')::boolean, false)
        THEN 1 ELSE greatest(1, least(%(amount)s::integer, picked.n)) END
    FROM picked WHERE waiting_prompts.id = picked.id
    RETURNING waiting_prompts.id, waiting_prompts.is_chat, waiting_prompts.params,
        waiting_prompts.prompt, waiting_prompts.softprompt, waiting_prompts.origin_id,
        waiting_prompts.models, picked.n - waiting_prompts.n AS took,
        waiting_prompts.chat_request, waiting_prompts.messages,
        waiting_prompts.max_tokens_lowered_to, waiting_prompts.messages_object
), chosen AS (
    SELECT CASE WHEN taken.is_chat AND %(chat_model)s::text IS NOT NULL THEN %(chat_model)s::text
        ELSE coalesce(
            (SELECT m.model FROM unnest(%(worker_models)s::text[]) WITH ORDINALITY AS m(model, i)
             WHERE taken.models = '[]'::jsonb OR taken.models ? m.model ORDER BY m.i LIMIT 1),
            (%(worker_models)s::text[])[1], '')
        END AS model
    FROM taken
), gens AS (
    INSERT INTO processing_gens (id, wp_id, worker_id, model, start_time, ttl, gen_metadata)
    SELECT gen_random_uuid(), taken.id, {worker_id}, chosen.model, %(now)s, %(ttl)s,
        '[]'::jsonb
    FROM taken, chosen, generate_series(1, taken.took)
    RETURNING id
)
{select}
"""
_POPPED = """SELECT taken.id, taken.is_chat, taken.params, taken.prompt, taken.softprompt,
    taken.origin_id, chosen.model, ARRAY(SELECT gens.id FROM gens),
    taken.chat_request, taken.messages, taken.max_tokens_lowered_to, taken.messages_object
FROM taken, chosen"""
_REGISTERED_POPPED = f"""SELECT owner.id, owner.trusted, registered.id, registered.speed, popped.*
FROM owner LEFT JOIN registered ON true LEFT JOIN ({_POPPED}) AS popped ON true"""
"""The pop. A text job's model is the worker's first model the request accepts (any, if it
names none), else the worker's first, else none; a chat job's is the declaration's model_id."""


@functools.lru_cache(maxsize=256)
def _pop_sql(
    prompt_jobs: bool, shape: ChatShape | None, *, registering: bool = False
) -> tuple[RawSql, dict[str, Any]]:
    """The pop's SQL for a declaration of this shape and its literal parameters;
    ``registering``: with the key's user and the worker's refresh (``register_and_pop``).
    Converted to Postgres's placeholders once (``RawSql``): psycopg would parse it on
    every pop, as it does any query over 4 KiB or 50 parameters."""
    terms = REGISTERED_TERMS if registering else BOUND_TERMS
    kinds = []
    if prompt_jobs:
        kinds.append(and_(WaitingPrompt.is_chat.is_(False), *text_filters(terms)))
    if shape is not None:
        kinds.append(and_(*chat_filters(shape, bound_chat_values(shape), terms)))
    compiled = or_(false(), *kinds).compile(dialect=DIALECT)
    queued_sql = and_(*queued()).compile(dialect=DIALECT, compile_kwargs={"literal_binds": True})
    sql = _POP_FRAME.format(
        registering=_REGISTER_FRAME.format(
            fast=fast_sql("registered.speed"), uptime=UPTIME_SQL, unflushed=UNFLUSHED_COMMIT
        )
        if registering
        else "",
        queued=queued_sql,
        kinds=compiled.string,
        worker_id="(SELECT worker.id FROM worker)" if registering else "%(worker_id)s",
        registered=" AND EXISTS (SELECT 1 FROM worker)" if registering else "",
        select=_REGISTERED_POPPED if registering else _POPPED,
    )
    return raw_sql(sql), {k: v for k, v in compiled.params.items() if v is not None}


def skipped_counts(
    session: Session | Connection, filters: list[Any], now: datetime
) -> dict[str, int]:
    """How many waiting requests each filter turned away (upstream's ``skipped``)."""
    columns = [func.count(case((~f, 1))) for f in filters]
    row = session.execute(
        select(*columns).where(
            *queued(),
            WaitingPrompt.is_chat.is_(False),
            WaitingPrompt.expiry > now,
        )
    ).one()
    return {name: int(v) for name, v in zip(SKIP_REASONS, row, strict=True) if v}


def job_payload(job: PoppedJob) -> dict[str, Any]:
    params = {k: v for k, v in job.params.items() if k != VALIDATED_BACKENDS_KEY}
    return {**params, "prompt": job.prompt, "n": len(job.ids)}
