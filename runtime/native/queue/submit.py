"""The worker's submit on the text queue: a compare-and-set on the job, then payment.

A submit claims its job with ``generation IS NULL AND NOT faulted AND NOT cancelled``
(``claim_job``), so a job is paid at most once; a second submit is DuplicateGen, one on a
job that ended (aborted, faulted, cancelled) AbortedGen. ``load_job``, ``claim_job``,
``fault_job`` and ``pay_for_job`` serve the text submit here and the chat submit
(``chat_submit``), which differ only in what they store and how they count tokens.

Every landed generation records its worker's speed sample (upstream's worker
performance): its output estimate (the tokens it is paid for) over its time from pop to
submit, in tokens per second; the worker's ``speed`` is the average of its newest
``Policy.speed_samples`` samples (older ones are deleted). A worker's fault counts toward
its abort limit (``sweep.fault_generation``). A landed generation of a request with a
webhook returns the call to make after the commit (``webhooks.generation_delivery``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Table, delete, func, insert, select, union_all, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from generated.errors import AbortedGen, DuplicateGen, InvalidJobID, WrongCredentials
from generated.wire import STATE_FAULTED, STATE_OK
from runtime.native.accounts import kudos
from runtime.native.db.tables import Generation, User, WaitingPrompt, Worker, WorkerPerformance
from runtime.native.queue.policy import Policy
from runtime.native.queue.sweep import fault_generation
from runtime.native.queue.webhooks import Delivery, generation_delivery
from runtime.native.requests.rows import unfinished
from runtime.native.requests.text import finish_if_complete
from runtime.observability.context import KIND_TEXT, note_worker_fault

FAULTED = STATE_FAULTED
PERFORMANCES: Table = WorkerPerformance.__table__  # type: ignore[assignment]
WORKERS: Table = Worker.__table__  # type: ignore[assignment]
GENERATIONS: Table = Generation.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class Landed:
    reward: Decimal
    wp: WaitingPrompt
    """The request, locked."""
    webhook: Delivery | None = None
    """The webhook call to make after the commit."""


@dataclass(frozen=True)
class Submission:
    generation_id: str
    text: str
    state: str
    seed: int | None
    gen_metadata: list[Any]


def submit_text_job(
    session: Session, policy: Policy, user: User, sub: Submission, now: datetime
) -> tuple[Decimal, Delivery | None]:
    """Store a worker's result once and pay for it; returns the worker's reward and the
    webhook call to make after the commit."""
    gen, worker, wp = load_job(session, user, sub.generation_id, is_chat=False)
    if sub.state == FAULTED:
        fault_job(session, policy, gen.id, now, {"state": FAULTED})
        return Decimal(0), None
    tokens = kudos.token_count(sub.text, wp.max_length)
    landed = land_job(
        session, policy, user, worker.id, wp, gen, tokens, sub.state, now,
        {"generation": sub.text, "seed": sub.seed, "gen_metadata": sub.gen_metadata},
    )  # fmt: skip
    return landed.reward, landed.webhook


def load_job(
    session: Session, user: User, generation_id: str, *, is_chat: bool
) -> tuple[Generation, Worker, WaitingPrompt]:
    """A handed-out job of that kind with its worker and request; the worker must be the
    user's (InvalidJobID for an unknown id or one of the other kind, else WrongCredentials)."""
    try:
        gen_id = uuid.UUID(generation_id)
    except ValueError:
        raise InvalidJobID(id=generation_id) from None
    row = session.execute(
        select(Generation, Worker, WaitingPrompt)
        .join(Worker, Worker.id == Generation.worker_id)
        .join(WaitingPrompt, WaitingPrompt.id == Generation.wp_id)
        .where(Generation.id == gen_id, WaitingPrompt.is_chat.is_(is_chat))
    ).first()
    if row is None:
        raise InvalidJobID(id=generation_id)
    gen, worker, wp = row
    if worker.user_id != user.id:
        raise WrongCredentials()
    return gen, worker, wp


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
    user: User,
    worker_id: uuid.UUID,
    wp: WaitingPrompt,
    gen: Generation,
    tokens: int,
    state: str,
    now: datetime,
    stored: dict[str, Any],
    charged_tokens: int | None = None,
) -> Landed:
    """Claim a finished job with ``stored`` (its result), pay for ``tokens`` through the
    text formula (the worker is paid and nothing charged when censored, as upstream) and
    record the worker's speed sample. ``charged_tokens``: the requester is charged for no
    more than these (what its client received of a stream that diverged)."""
    # the worker is in the session when the caller loaded its job (load_job): no query then
    worker = session.get(Worker, worker_id)
    bridge_agent = worker.bridge_agent if worker is not None else None
    reward = kudos.request_reward(
        wp, tokens, gen.model, trusted=user.trusted, bridge_agent=bridge_agent or ""
    )
    censored = state != STATE_OK
    charge = Decimal(0) if censored else reward
    if charged_tokens is not None and charged_tokens < tokens:
        received = kudos.request_reward(
            wp, charged_tokens, gen.model, trusted=user.trusted, bridge_agent=bridge_agent or ""
        )
        charge = min(charge, received)
    claim_job(
        session,
        gen.id,
        {
            **stored,
            "state": state,
            "reward": reward,
            "charge": charge,
            "censored": censored,
            "completed_at": now,
        },
    )
    # the speed sample first: pay_for_job locks the requester's balance row, shared by all of
    # its requests' submits, so the less that follows it before the commit the better
    record_speed(session, policy, worker_id, tokens, (now - gen.start_time).total_seconds())
    locked = pay_for_job(session, user, worker_id, wp, gen.id, reward, charge, tokens)
    return Landed(reward, locked, generation_delivery(session, locked, gen.id, reward))


def speed_sample(tokens: int, seconds: float) -> float:
    """Upstream's sample: tokens over seconds, rounded to 0.1 (1 when no time passed)."""
    return 1.0 if seconds <= 0 else round(tokens / seconds, 1)


def record_speed(
    session: Session, policy: Policy, worker_id: uuid.UUID, tokens: int, seconds: float
) -> None:
    """Add a speed sample, keep the newest ``policy.speed_samples`` and set the worker's
    speed to their average: one statement (the sample's INSERT and the old samples' DELETE
    are CTEs of the worker's UPDATE; the new sample is counted from the INSERT's RETURNING,
    as a statement's parts do not see each other's rows)."""
    new = (
        insert(PERFORMANCES)
        .values(worker_id=worker_id, performance=speed_sample(tokens, seconds))
        .returning(PERFORMANCES.c.id, PERFORMANCES.c.performance)
        .cte("new_sample")
    )
    samples = union_all(
        select(new.c.id, new.c.performance),
        select(PERFORMANCES.c.id, PERFORMANCES.c.performance).where(
            PERFORMANCES.c.worker_id == worker_id
        ),
    ).subquery()
    newest = (
        select(samples.c.id, samples.c.performance)
        .order_by(samples.c.id.desc())
        .limit(policy.speed_samples)
        .cte("newest")
    )
    older = (
        delete(PERFORMANCES)
        .where(PERFORMANCES.c.worker_id == worker_id, PERFORMANCES.c.id.not_in(select(newest.c.id)))
        .returning(PERFORMANCES.c.id)
        .cte("older")
    )
    speed = session.execute(
        update(WORKERS)
        .where(WORKERS.c.id == worker_id)
        .values(speed=select(func.avg(newest.c.performance)).scalar_subquery())
        .returning(WORKERS.c.speed)
        .add_cte(older)
    ).scalar_one()
    synchronize(session, Worker, worker_id, {"speed": speed})


def pay_for_job(
    session: Session,
    user: User,
    worker_id: uuid.UUID,
    wp: WaitingPrompt,
    gen_id: uuid.UUID,
    reward: Decimal,
    charge: Decimal,
    tokens: int,
) -> WaitingPrompt:
    """Reward the worker's owner, charge the requester, count the worker's fulfilment, and
    finish the request if nothing is left; returns the request, locked. The requester is
    charged after the request's lock is taken: its balance row is shared by every submit of
    its requests, so it is locked for as short a time as the transaction allows (and after
    the request's row, the order a cancel takes them in)."""
    kudos.apply_kudos(
        session, user.id, reward, "reward", wp_id=wp.id, generation_id=gen_id, worker_id=worker_id
    )
    counted = session.execute(
        update(WORKERS)
        .where(WORKERS.c.id == worker_id)
        .values(
            kudos=WORKERS.c.kudos + reward,
            fulfilments=WORKERS.c.fulfilments + 1,
            contributions=WORKERS.c.contributions + tokens,
        )
        .returning(WORKERS.c.kudos, WORKERS.c.fulfilments, WORKERS.c.contributions)
    ).one()
    synchronize(session, Worker, worker_id, dict(counted._mapping))
    locked = session.scalars(
        select(WaitingPrompt).where(WaitingPrompt.id == wp.id).with_for_update()
    ).one()
    if charge:
        kudos.apply_kudos(session, wp.user_id, -charge, "charge", wp_id=wp.id, generation_id=gen_id)
    finish_if_complete(session, locked)
    return locked


def refuse_claim(session: Session, gen_id: uuid.UUID) -> None:
    session.expire_all()
    gen = session.get(Generation, gen_id)
    assert gen is not None
    if gen.generation is not None:
        raise DuplicateGen(id=str(gen_id))
    raise AbortedGen(id=str(gen_id))
