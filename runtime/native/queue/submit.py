"""The worker's submit on the text queue: a compare-and-set on the job, then payment.

A submit claims its job with ``generation IS NULL AND NOT faulted AND NOT cancelled``
(``claim_job``), so a job is paid at most once; a second submit is DuplicateGen, one on a
job that ended (aborted, faulted, cancelled) AbortedGen. ``load_job``, ``claim_job``,
``fault_job`` and ``pay_for_job`` serve the text submit here and the chat submit
(``chat_submit``), which differ only in what they store and how they count tokens.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from generated.errors import AbortedGen, DuplicateGen, InvalidJobID, WrongCredentials
from generated.wire import STATE_FAULTED, STATE_OK
from runtime.native.accounts import kudos
from runtime.native.db.tables import Generation, User, WaitingPrompt, Worker
from runtime.native.queue.policy import Policy
from runtime.native.queue.sweep import fault_generation
from runtime.native.requests.rows import unfinished
from runtime.native.requests.text import finish_if_complete

FAULTED = STATE_FAULTED


@dataclass(frozen=True)
class Submission:
    generation_id: str
    text: str
    state: str
    seed: int | None
    gen_metadata: list[Any]


def submit_text_job(
    session: Session, policy: Policy, user: User, sub: Submission, now: datetime
) -> Decimal:
    """Store a worker's result once and pay for it; returns the worker's reward."""
    gen, worker, wp = load_job(session, user, sub.generation_id, is_chat=False)
    if sub.state == FAULTED:
        fault_job(session, policy, gen.id, now, {"state": FAULTED})
        return Decimal(0)
    tokens = kudos.token_count(sub.text, wp.max_length)
    reward, _ = land_job(
        session, user, worker.id, wp, gen, tokens, sub.state, now,
        {"generation": sub.text, "seed": sub.seed, "gen_metadata": sub.gen_metadata},
    )  # fmt: skip
    return reward


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
        update(Generation)
        .where(Generation.id == gen_id, *unfinished())
        .values(**values)
        .returning(Generation.id)
    ).first()
    if claimed is None:
        refuse_claim(session, gen_id)


def fault_job(
    session: Session, policy: Policy, gen_id: uuid.UUID, now: datetime, values: dict[str, Any]
) -> None:
    """A worker's fault: claim the job with ``values`` and give the request its slot back."""
    claim_job(session, gen_id, values)
    fault_generation(session, policy, gen_id, now, aborted=False)


def land_job(
    session: Session,
    user: User,
    worker_id: uuid.UUID,
    wp: WaitingPrompt,
    gen: Generation,
    tokens: int,
    state: str,
    now: datetime,
    stored: dict[str, Any],
) -> tuple[Decimal, WaitingPrompt]:
    """Claim a finished job with ``stored`` (its result) and pay for ``tokens`` through the
    text formula (nothing charged when censored); returns the reward and the locked request."""
    bridge_agent = session.scalar(select(Worker.bridge_agent).where(Worker.id == worker_id))
    reward = kudos.request_reward(
        wp, tokens, gen.model, trusted=user.trusted, bridge_agent=bridge_agent or ""
    )
    censored = state != STATE_OK
    charge = Decimal(0) if censored else reward
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
    locked = pay_for_job(session, user, worker_id, wp, gen.id, reward, charge, tokens)
    return reward, locked


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
    finish the request if nothing is left; returns the request, locked."""
    kudos.apply_kudos(
        session, user.id, reward, "reward", wp_id=wp.id, generation_id=gen_id, worker_id=worker_id
    )
    if charge:
        kudos.apply_kudos(session, wp.user_id, -charge, "charge", wp_id=wp.id, generation_id=gen_id)
    session.execute(
        update(Worker)
        .where(Worker.id == worker_id)
        .values(
            kudos=Worker.kudos + reward,
            fulfilments=Worker.fulfilments + 1,
            contributions=Worker.contributions + tokens,
        )
    )
    locked = session.scalars(
        select(WaitingPrompt).where(WaitingPrompt.id == wp.id).with_for_update()
    ).one()
    finish_if_complete(session, locked)
    return locked


def refuse_claim(session: Session, gen_id: uuid.UUID) -> None:
    session.expire_all()
    gen = session.get(Generation, gen_id)
    assert gen is not None
    if gen.generation is not None:
        raise DuplicateGen(id=str(gen_id))
    raise AbortedGen(id=str(gen_id))
