"""The worker side of the text queue: register on pop, hand out jobs, take submissions.

A pop locks its request with ``FOR UPDATE SKIP LOCKED`` (ordered by kudos priority, then
age), so concurrent pops never hand out the same job. Text and chat requests share the
queue: a pop with a chat declaration also matches the chat requests it covers
(``chat_fit.chat_queue_filters``), and one with prompt_jobs false matches only those.
A submit is a compare-and-set on the generation (``generation IS NULL AND NOT faulted AND
NOT cancelled``), so a job is paid at most once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import and_, case, false, func, or_, select, update
from sqlalchemy.orm import Session

from generated.chat.names import DECL_CHAT_JOBS, DECL_MODEL_ID, DECL_PROMPT_JOBS
from generated.errors import (
    AbortedGen,
    DuplicateGen,
    InvalidJobID,
    WorkerMaintenance,
    WrongCredentials,
)
from runtime.native import kudos
from runtime.native.chat_fit import chat_queue_filters
from runtime.native.fit import SKIP_REASONS, pick_model, queue_filters
from runtime.native.lifecycle import fault_generation
from runtime.native.models import Generation, User, WaitingPrompt, Worker
from runtime.native.policy import Policy
from runtime.native.text_requests import finish_if_complete


@dataclass
class Popped:
    wp: WaitingPrompt | None = None
    generations: list[Generation] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)


def register_worker(
    session: Session,
    user: User,
    body: dict[str, Any],
    now: datetime,
    declaration: dict[str, Any] | None = None,
) -> Worker:
    """The pop's worker, created or refreshed from its declaration; owned by ``user``.

    ``declaration`` is the parsed chat declaration; kept only when it declares chat_jobs.
    """
    worker = session.scalars(
        select(Worker).where(Worker.name == body["name"]).with_for_update()
    ).first()
    if worker is None:
        worker = Worker(id=uuid.uuid4(), name=body["name"], user_id=user.id)
        session.add(worker)
    elif worker.user_id != user.id:
        raise WrongCredentials()
    worker.models = list(dict.fromkeys(body.get("models") or []))
    worker.max_length = body["max_length"]
    worker.max_context_length = body["max_context_length"]
    worker.threads = body.get("threads", 1)
    worker.nsfw = bool(body.get("nsfw"))
    worker.bridge_agent = (body.get("bridge_agent") or "")[:255]
    chat = bool(declaration and declaration[DECL_CHAT_JOBS])
    worker.chat_declaration = declaration if chat else None
    worker.prompt_jobs = bool(declaration[DECL_PROMPT_JOBS]) if declaration else True
    worker.last_check_in = now
    session.flush()
    if worker.maintenance:
        raise WorkerMaintenance(name=worker.name, reason=worker.maintenance_reason or "")
    return worker


def pop_text_job(
    session: Session,
    policy: Policy,
    worker: Worker,
    trusted: bool,
    amount: int,
    now: datetime,
    declaration: dict[str, Any] | None = None,
) -> Popped:
    """The next job ``worker`` may take, text or (with a chat declaration) chat."""
    filters = queue_filters(worker, trusted)
    kinds = []
    if declaration is None or declaration[DECL_PROMPT_JOBS]:
        kinds.append(and_(WaitingPrompt.is_chat.is_(False), *filters))
    if declaration is not None and declaration[DECL_CHAT_JOBS]:
        kinds.append(and_(*chat_queue_filters(worker, trusted, declaration)))
    wp = session.scalars(
        select(WaitingPrompt)
        .where(
            WaitingPrompt.active.is_(True),
            WaitingPrompt.n > 0,
            WaitingPrompt.expiry > now,
            or_(false(), *kinds),
        )
        .order_by(WaitingPrompt.extra_priority.desc(), WaitingPrompt.created.asc())
        .limit(1)
        .with_for_update(skip_locked=True)
    ).first()
    if wp is None:
        return Popped(skipped=skipped_counts(session, filters, now))
    take = 1 if wp.is_chat or wp.params.get("disable_batching") else max(1, min(amount, wp.n))
    wp.n -= take
    model = declaration[DECL_MODEL_ID] if wp.is_chat and declaration else pick_model(worker, wp)
    gens = [
        Generation(
            id=uuid.uuid4(),
            wp_id=wp.id,
            worker_id=worker.id,
            model=model,
            start_time=now,
            ttl=policy.generation_ttl_seconds,
            gen_metadata=[],
        )
        for _ in range(take)
    ]
    session.add_all(gens)
    session.flush()
    return Popped(wp=wp, generations=gens)


def skipped_counts(session: Session, filters: list[Any], now: datetime) -> dict[str, int]:
    """How many waiting requests each filter turned away (upstream's ``skipped``)."""
    columns = [func.count(case((~f, 1))) for f in filters]
    row = session.execute(
        select(*columns).where(
            WaitingPrompt.active.is_(True),
            WaitingPrompt.n > 0,
            WaitingPrompt.is_chat.is_(False),
            WaitingPrompt.expiry > now,
        )
    ).one()
    return {name: int(v) for name, v in zip(SKIP_REASONS, row, strict=True) if v}


def job_payload(wp: WaitingPrompt, count: int) -> dict[str, Any]:
    return {**wp.params, "prompt": wp.prompt, "n": count}


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
    try:
        gen_id = uuid.UUID(sub.generation_id)
    except ValueError:
        raise InvalidJobID(id=sub.generation_id) from None
    row = session.execute(
        select(Generation, Worker, WaitingPrompt)
        .join(Worker, Worker.id == Generation.worker_id)
        .join(WaitingPrompt, WaitingPrompt.id == Generation.wp_id)
        .where(Generation.id == gen_id, WaitingPrompt.is_chat.is_(False))
    ).first()
    if row is None:
        raise InvalidJobID(id=sub.generation_id)
    gen, worker, wp = row
    if worker.user_id != user.id:
        raise WrongCredentials()
    open_job = [
        Generation.id == gen_id,
        Generation.generation.is_(None),
        Generation.faulted.is_(False),
        Generation.cancelled.is_(False),
    ]
    if sub.state == "faulted":
        return _submit_faulted(session, policy, gen, wp, open_job, now)
    tokens = kudos.token_count(sub.text, wp.max_length)
    reward = kudos.generation_kudos(tokens, gen.model, wp.max_context_length, user.trusted)
    censored = sub.state != "ok"
    charge = Decimal(0) if censored else reward
    claimed = session.execute(
        update(Generation)
        .where(*open_job)
        .values(
            generation=sub.text,
            state=sub.state,
            seed=sub.seed,
            gen_metadata=sub.gen_metadata,
            reward=reward,
            charge=charge,
            censored=censored,
            completed_at=now,
        )
        .returning(Generation.id)
    ).first()
    if claimed is None:
        refuse_claim(session, gen_id)
    kudos.apply_kudos(
        session, user.id, reward, "reward", wp_id=wp.id, generation_id=gen_id, worker_id=worker.id
    )
    if charge:
        kudos.apply_kudos(session, wp.user_id, -charge, "charge", wp_id=wp.id, generation_id=gen_id)
    session.execute(
        update(Worker)
        .where(Worker.id == worker.id)
        .values(
            kudos=Worker.kudos + reward,
            fulfilments=Worker.fulfilments + 1,
            contributions=Worker.contributions + tokens,
        )
    )
    locked = session.scalars(
        select(WaitingPrompt).where(WaitingPrompt.id == wp.id).with_for_update()
    )
    finish_if_complete(session, locked.one())
    return reward


def refuse_claim(session: Session, gen_id: uuid.UUID) -> None:
    session.expire_all()
    gen = session.get(Generation, gen_id)
    assert gen is not None
    if gen.generation is not None:
        raise DuplicateGen(id=str(gen_id))
    raise AbortedGen(id=str(gen_id))


def _submit_faulted(
    session: Session,
    policy: Policy,
    gen: Generation,
    wp: WaitingPrompt,
    open_job: list[Any],
    now: datetime,
) -> Decimal:
    claimed = session.execute(
        update(Generation).where(*open_job).values(state="faulted").returning(Generation.id)
    ).first()
    if claimed is None:
        refuse_claim(session, gen.id)
    fault_generation(session, policy, gen.id, now, aborted=False)
    return Decimal(0)
