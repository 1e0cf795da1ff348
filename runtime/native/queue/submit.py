"""The worker's submit on the text queue: a compare-and-set on the job, then payment.

A job is claimed with ``generation IS NULL AND NOT faulted AND NOT cancelled``, so it is
paid at most once (a second submit: DuplicateGen; on an ended job: AbortedGen). ``pay``
serves the text submit and, through ``land_job``, the chat submit. A text submit reads its
key and job in one statement and pays in one, on the driver connection, building no SQL
expression and loading no entity (docs/performance.md). Each landed generation records its
worker's speed sample (output tokens over pop-to-submit time; ``speed`` averages the newest).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from sqlalchemy import Connection, Table, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from generated.errors import AbortedGen, DuplicateGen, InvalidJobID, WrongCredentials
from generated.wire import STATE_FAULTED, STATE_OK
from runtime.native.accounts import kudos, suspicion
from runtime.native.db.tables import Generation, User, WaitingPrompt, Worker
from runtime.native.queue.jobs import raw_cursor
from runtime.native.queue.policy import Policy
from runtime.native.queue.sweep import fault_generation
from runtime.native.queue.webhooks import Delivery, generation_delivery
from runtime.native.requests.rows import unfinished
from runtime.observability.context import KIND_TEXT, note_kudos, note_worker_fault
from runtime.stores.raw_sql import RawSql, raw_sql, with_jsonb

FAULTED = STATE_FAULTED
GENERATIONS: Table = Generation.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class Landed:
    reward: Decimal
    wp: WaitingPrompt
    """The request, locked."""
    webhook: Delivery | None = None
    """The webhook call to make after the commit."""
    jobs: int = 1
    """The request's jobs, this one included (``Paid.jobs``)."""


@dataclass(frozen=True)
class Submission:
    generation_id: str
    text: str
    state: str
    seed: int | None
    gen_metadata: list[Any]


@dataclass(frozen=True)
class Job:
    """A handed-out job as its payment needs it: the job, its worker and its request."""

    gen_id: uuid.UUID
    model: str
    start_time: datetime
    worker_id: uuid.UUID
    worker_user_id: int
    bridge_agent: str
    wp_id: uuid.UUID
    prompt: str
    max_length: int
    max_context_length: int
    requester_id: int
    request_address: str
    """The request's source address (``kudos.Serving``)."""
    request_jobs: int
    """The request's jobs, handed out or not (its ``n``; ``kudos.Serving``)."""


@dataclass(frozen=True)
class Owner:
    """A worker's owner as its payment needs it: its id and its trust (a ``User`` serves),
    and the address its worker's result arrived from (None: not known)."""

    id: int
    trusted: bool
    address: str | None = None


@dataclass(frozen=True)
class Found:
    """A text submit's key and job, read together (``find_text_submit``)."""

    owner_id: int | None
    """The key's user (None: no such key)."""
    trusted: bool
    is_chat: bool | None
    """The job's kind (None: no such job)."""
    job: Job | None
    """A text job (None: no such job, or a chat job)."""

    @property
    def owner(self) -> Owner:
        """The key's user, once a caller made sure there is a registered one."""
        assert self.owner_id is not None
        return Owner(self.owner_id, self.trusted)


def job_id(generation_id: str) -> uuid.UUID | None:
    """A submitted job id as the finds bind it (None: not an id, so no job is found)."""
    try:
        return uuid.UUID(generation_id)
    except ValueError:
        return None


def key_and_job(job: str) -> RawSql:
    """A submit's one read: its key's user (``%(key_hash)s``; id and trust, NULL when no
    such key) and the row of ``job`` (a SELECT of at most one row; NULL when none), in
    Postgres's placeholders once (``RawSql``: psycopg would split it on every run)."""
    return raw_sql(f"""
SELECT owner.id, owner.trusted, job.*
FROM (SELECT 1) AS one
LEFT JOIN (
    SELECT users.id, users.trusted FROM api_keys JOIN users ON users.id = api_keys.user_id
    WHERE api_keys.key_hash = %(key_hash)s LIMIT 1
) AS owner ON true
LEFT JOIN ({job}) AS job ON true
""")


_FIND = key_and_job("""
    SELECT waiting_prompts.is_chat, processing_gens.id, processing_gens.model,
        processing_gens.start_time, workers.id, workers.user_id, workers.bridge_agent,
        waiting_prompts.id, waiting_prompts.prompt, waiting_prompts.max_length,
        waiting_prompts.max_context_length, waiting_prompts.user_id, waiting_prompts.ipaddr,
        waiting_prompts.jobs
    FROM processing_gens
    JOIN workers ON workers.id = processing_gens.worker_id
    JOIN waiting_prompts ON waiting_prompts.id = processing_gens.wp_id
    WHERE processing_gens.id = %(gen_id)s
""")
"""``find_text_submit``'s statement: the key's user and the job in one round trip."""


def find_text_submit(db: Session | Connection, key_hash: str, generation_id: str) -> Found:
    """A submit's key's user and its job (with its worker and request) in one statement."""
    params = {"key_hash": key_hash, "gen_id": job_id(generation_id)}
    with raw_cursor(db) as cursor:
        cursor.execute(_FIND.sql, _FIND.values(params))
        row = cursor.fetchone()
    assert row is not None
    owner_id, trusted, is_chat, *job = row
    found = Job(*job) if is_chat is False else None
    return Found(owner_id=owner_id, trusted=bool(trusted), is_chat=is_chat, job=found)


def submit_text_job(
    db: Session | Connection,
    policy: Policy,
    found: Found,
    sub: Submission,
    now: datetime,
    info: dict[str, Any],
    source: str | None,
) -> tuple[Decimal, Delivery | None]:
    """Store a worker's result once and pay for it; returns the worker's reward and the
    webhook call to make after the commit. ``found``: the key's user (a registered one) and
    the job, from ``find_text_submit``. ``db``: a session's transaction, or a connection in
    autocommit (the payment is one statement, ``pay``: committed when it returns), then not
    for a fault (``fault_job`` is ORM work). ``info``: where the kudos it moved are noted
    (``note_kudos``: a session's ``info``, counted at its commit). ``source``: the address
    the result arrived from (``kudos.Serving``)."""
    job = found.job
    if job is None:
        raise InvalidJobID(id=sub.generation_id)
    if job.worker_user_id != found.owner_id:
        raise WrongCredentials()
    if sub.state == FAULTED:
        assert isinstance(db, Session), "a fault takes a session's transaction"
        fault_job(db, policy, job.gen_id, now, {"state": FAULTED})
        return Decimal(0), None
    tokens = kudos.token_count(sub.text, job.max_length)
    stored = {"generation": sub.text, "seed": sub.seed, "gen_metadata": sub.gen_metadata}
    paid = pay(
        db, policy, job, found.trusted, tokens, sub.state, now, stored, info, worker_address=source
    )
    webhook = None
    if paid.webhook:
        with _session_on(db) as session:
            wp = session.get(WaitingPrompt, job.wp_id)
            assert wp is not None
            webhook = generation_delivery(session, wp, job.gen_id, paid.reward)
    return paid.reward, webhook


@contextmanager
def _session_on(db: Session | Connection) -> Iterator[Session]:
    """``db`` itself, or a session on a connection's engine (its reads in autocommit)."""
    if isinstance(db, Session):
        yield db
        return
    with Session(db.engine, expire_on_commit=False) as session:
        yield session


class JobWorker(NamedTuple):
    """What a chat submit reads of its job's worker (``chat_find``): not the entity, whose
    21 columns (two of them JSON) it never reads and would cost CPU to load."""

    id: uuid.UUID
    user_id: int
    name: str
    bridge_agent: str


def claim_job(session: Session, gen_id: uuid.UUID, values: dict[str, Any]) -> None:
    """The compare-and-set on a running job: set ``values`` once, or refuse the claim."""
    claimed = session.execute(
        update(GENERATIONS)
        .where(GENERATIONS.c.id == gen_id, *unfinished())
        .values(**values)
        .returning(GENERATIONS.c.id)
    ).first()
    if claimed is None:
        refuse_claim(session, gen_id)
    synchronize(session, Generation, gen_id, values)


def synchronize(session: Session, entity: type[Any], key: Any, values: dict[str, Any]) -> None:
    """Give the session's object of ``entity`` with primary key ``key``, if loaded, the
    values a Core UPDATE just wrote (what an ORM update synchronizes, without its cost)."""
    loaded = session.identity_map.get(identity_key(entity, key))
    if loaded is not None:
        for name, value in values.items():
            set_committed_value(loaded, name, value)


def fault_job(
    session: Session,
    policy: Policy,
    gen_id: uuid.UUID,
    now: datetime,
    values: dict[str, Any],
    *,
    worker_fault: bool = True,
    kind: str = KIND_TEXT,
) -> None:
    """A fault: claim the job with ``values`` and give the request its slot back. A worker's
    fault counts toward its abort limit; one the horde caused (``worker_fault`` False) not.
    ``kind``: the job's (text or chat), the label /metrics counts worker faults by."""
    claim_job(session, gen_id, values)
    fault_generation(session, policy, gen_id, now, aborted=False, worker_fault=worker_fault)
    if worker_fault:
        note_worker_fault(session.info, kind)  # /metrics counts it once the transaction commits


def land_job(
    session: Session,
    policy: Policy,
    user: User | Owner,
    worker: JobWorker,
    wp: WaitingPrompt,
    gen: Generation,
    tokens: int,
    state: str,
    now: datetime,
    stored: dict[str, Any],
    charged_tokens: int | None = None,
) -> Landed:
    """``pay`` for a job read as entities (``queue.chat_find``); ``gen`` gets what the
    claim wrote and ``wp`` what the payment left of the request (n, active, faulted,
    cancelled); ``wp`` is returned, locked until the payment's commit."""
    job = Job(
        gen_id=gen.id, model=gen.model, start_time=gen.start_time, worker_id=worker.id,
        worker_user_id=user.id, bridge_agent=worker.bridge_agent,
        wp_id=wp.id, prompt=wp.prompt, max_length=wp.max_length,
        max_context_length=wp.max_context_length, requester_id=wp.user_id,
        request_address=wp.ipaddr, request_jobs=wp.jobs,
    )  # fmt: skip
    paid = pay(
        session, policy, job, user.trusted, tokens, state, now, stored, session.info,
        charged_tokens, worker_address=user.address if isinstance(user, Owner) else None,
    )  # fmt: skip
    for name in ("n", "active", "faulted", "cancelled"):
        set_committed_value(wp, name, getattr(paid, name))
    for name, value in paid.claimed.items():  # a job read as rows is in no identity map
        set_committed_value(gen, name, value)
    webhook = generation_delivery(session, wp, gen.id, paid.reward)
    return Landed(paid.reward, wp, webhook, paid.jobs)


@dataclass(frozen=True)
class Paid:
    """What a payment left: the worker's reward and its request's state."""

    reward: Decimal
    n: int
    active: bool
    faulted: bool
    cancelled: bool
    webhook: bool
    """The request has a webhook."""
    jobs: int
    """The request's jobs, this one included, counted after its row lock."""
    claimed: dict[str, Any]
    """The generation's columns the claim wrote, with their values."""


def speed_sample(tokens: int, seconds: float) -> float:
    """Upstream's sample: tokens over seconds, rounded to 0.1 (1 when no time passed)."""
    return 1.0 if seconds <= 0 else round(tokens / seconds, 1)


def pay(
    db: Session | Connection,
    policy: Policy,
    job: Job,
    trusted: bool,
    tokens: int,
    state: str,
    now: datetime,
    stored: dict[str, Any],
    info: dict[str, Any],
    charged_tokens: int | None = None,
    *,
    worker_address: str | None,
) -> Paid:
    """Claim a finished job with ``stored`` (its result), pay for ``tokens`` through the
    text formula (the worker is paid and nothing charged when censored, as upstream),
    record the worker's speed sample, and finish the request if nothing is left.
    ``trusted``: the worker owner's. ``charged_tokens``: the requester is charged for no
    more than these (what its client received of a stream that diverged). ``info``: where
    the kudos moved are noted (``note_kudos``). The reward is ``kudos.earned``: upstream's
    under the rules no worker can farm (``worker_address``: where the result came from);
    a generation faster than its claimed model allows counts a suspicion (``suspicion``).

    One statement: the database function ``horde_pay`` (migration 0007), run on the
    driver connection of ``db`` (a session's transaction, or a connection in autocommit,
    where it is a transaction of its own):

    - the claim (a compare-and-set: refused with DuplicateGen or AbortedGen, and nothing
      else runs), the speed sample (the newest ``Policy.speed_samples`` kept, their average
      the worker's speed), the worker's counters, the owner's reward and its ledger row,
      and the request's row lock;
    - the requester's charge and its ledger row (after the request's lock: its balance row
      is shared by every submit of its requests, so it is locked last, in the order a
      cancel takes them), and, when nothing is left of the request (faulted or cancelled,
      or no job left to hand out and none running, counted in a snapshot taken after that
      lock), its deactivation and its unreleased holds' release and credit.
    """
    censored = state != STATE_OK
    seconds = (now - job.start_time).total_seconds()
    serving = kudos.Serving(
        requester_id=job.requester_id, owner_id=job.worker_user_id, trusted=trusted,
        request_address=job.request_address, worker_address=worker_address, seconds=seconds,
        censored=censored, jobs=job.request_jobs,
    )  # fmt: skip
    reward = kudos.earned(job, tokens, job.model, bridge_agent=job.bridge_agent, serving=serving)
    charge = Decimal(0) if censored else reward
    if charged_tokens is not None and charged_tokens < tokens:
        received = kudos.earned(
            job, charged_tokens, job.model, bridge_agent=job.bridge_agent, serving=serving
        )
        charge = min(charge, received)
    claimed = {
        **stored, "state": state, "reward": reward, "charge": charge, "censored": censored,
        "completed_at": now,
    }  # fmt: skip
    unknown = set(claimed) - CLAIMED_COLUMNS
    assert not unknown, unknown
    params = {
        **{k: None for k in CLAIMED_COLUMNS},
        **with_jsonb(claimed, JSON_COLUMNS),
        "gen_id": job.gen_id, "worker_id": job.worker_id, "owner_id": job.worker_user_id,
        "wp_id": job.wp_id, "requester_id": job.requester_id, "tokens": tokens,
        "keep": policy.speed_samples,
        "sample": speed_sample(tokens, seconds),
    }  # fmt: skip
    with raw_cursor(db) as cursor:
        cursor.execute(_PAY.sql, _PAY.values(params))
        row = cursor.fetchone()
    assert row is not None
    (landed, owner_kudos, speed, worker_kudos, fulfilments, contributions, n, faulted,
     cancelled, webhook, requester_kudos, complete, jobs, held_by, held,
     balances) = row  # fmt: skip
    if not landed:
        refuse_claim(db, job.gen_id)
    fast = kudos.unreasonably_fast(tokens, job.model, serving)
    if fast is not None:
        suspicion.report(db, job.worker_id, job.worker_user_id, trusted, fast)
    note_kudos(info, "reward", reward)  # /metrics counts them once committed
    if charge:
        note_kudos(info, "charge", -charge)
    for amount in held or []:
        note_kudos(info, "upfront_release", amount)
    if isinstance(db, Session):  # its loaded objects, if any, get what the function wrote
        synchronize(db, Generation, job.gen_id, claimed)
        synchronize(db, Worker, job.worker_id, {
            "speed": speed, "kudos": worker_kudos, "fulfilments": fulfilments,
            "contributions": contributions,
        })  # fmt: skip
        synchronize(db, User, job.worker_user_id, {"kudos": owner_kudos})
        if charge:
            synchronize(db, User, job.requester_id, {"kudos": requester_kudos})
        for user_id, balance in zip(held_by or [], balances or [], strict=True):
            synchronize(db, User, user_id, {"kudos": balance})
    return Paid(reward, n, not complete, faulted, cancelled, bool(webhook), jobs, claimed)


JSON_COLUMNS = frozenset(c.name for c in GENERATIONS.columns if isinstance(c.type, JSONB))
CLAIMED_COLUMNS = frozenset({
    "generation", "reply", "reported_usage", "charge_basis", "seed", "gen_metadata", "state",
    "censored", "completed_at", "reward", "charge",
})  # fmt: skip
"""The generation's columns ``horde_pay`` sets (a result's, text or chat, and the
payment's); a text result leaves the chat ones NULL, as they were."""
_PAY = raw_sql("""
SELECT * FROM horde_pay(
    %(gen_id)s::uuid, %(worker_id)s::uuid, %(owner_id)s::integer, %(wp_id)s::uuid,
    %(requester_id)s::integer,
    %(generation)s::text, %(reply)s::jsonb, %(reported_usage)s::jsonb,
    %(charge_basis)s::varchar, %(seed)s::bigint, %(gen_metadata)s::jsonb,
    %(state)s::varchar, %(censored)s::boolean, %(completed_at)s::timestamptz,
    %(reward)s::numeric, %(charge)s::numeric, %(tokens)s::integer, %(keep)s::integer,
    %(sample)s::double precision
)
""")
"""``pay``'s one statement."""


def refuse_claim(db: Session | Connection, gen_id: uuid.UUID) -> None:
    """A claim that found its job not running: DuplicateGen when it has a result, else
    AbortedGen (it ended: aborted, faulted or cancelled)."""
    generation = db.execute(
        select(GENERATIONS.c.generation).where(GENERATIONS.c.id == gen_id)
    ).scalar_one()
    if generation is not None:
        raise DuplicateGen(id=str(gen_id))
    raise AbortedGen(id=str(gen_id))
