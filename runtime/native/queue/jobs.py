"""The worker side of the text queue: register on pop, hand out jobs, take submissions.

A pop locks its request with ``FOR UPDATE SKIP LOCKED`` (ordered by kudos priority, then
age), so concurrent pops never hand out the same job. Text and chat requests share the
queue: a pop with a chat declaration also matches the chat requests it covers
(``fit.chat_queue_filters``), and one with prompt_jobs false matches only those.
Submissions are ``job_submit``'s.

A user may register ``Policy.workers_per_user`` distinct worker names (trusted users
``workers_per_trusted_user``), as upstream: a pop under one more new name is refused
(TooManyWorkers, TooManyWorkersTrusted); the user's row is locked while counting, so
concurrent pops under new names cannot pass the limit together.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, false, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from generated.chat.names import DECL_CHAT_JOBS, DECL_MODEL_ID, DECL_PROMPT_JOBS
from generated.errors import (
    TooManyWorkers,
    TooManyWorkersTrusted,
    WorkerMaintenance,
    WrongCredentials,
)
from runtime.native.db.tables import Generation, User, WaitingPrompt, Worker
from runtime.native.queue.fit import (
    SKIP_REASONS,
    VALIDATED_BACKENDS_KEY,
    chat_queue_filters,
    pick_model,
    queue_filters,
)
from runtime.native.queue.policy import Policy
from runtime.native.requests.rows import queued


@dataclass
class Popped:
    wp: WaitingPrompt | None = None
    generations: list[Generation] = field(default_factory=list)
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
    worker.models = list(dict.fromkeys(body.get("models") or []))
    worker.max_length = body["max_length"]
    worker.max_context_length = body["max_context_length"]
    worker.threads = body.get("threads", 1)
    worker.nsfw = bool(body.get("nsfw"))
    worker.bridge_agent = (body.get("bridge_agent") or "")[:255]
    worker.extra_slow_worker = bool(body.get("extra_slow_worker"))
    chat = bool(declaration and declaration[DECL_CHAT_JOBS])
    worker.chat_declaration = declaration if chat else None
    worker.prompt_jobs = bool(declaration[DECL_PROMPT_JOBS]) if declaration else True
    worker.last_check_in = now
    session.flush()
    if worker.maintenance:
        raise WorkerMaintenance(name=worker.name, reason=worker.maintenance_reason or "")
    return worker


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
) -> Popped:
    """The next job ``worker`` may take, text or (with a chat declaration) chat."""
    filters = queue_filters(worker, trusted)
    kinds = []
    if declaration is None or declaration[DECL_PROMPT_JOBS]:
        kinds.append(and_(WaitingPrompt.is_chat.is_(False), *filters))
    if declaration is not None and declaration[DECL_CHAT_JOBS]:
        kinds.append(and_(*chat_queue_filters(worker, trusted, declaration)))
    # One statement: the next request, locked (SKIP LOCKED) in a subquery the UPDATE joins,
    # its n lowered by what this pop takes; its old n comes back beside the row.
    picked = (
        select(WaitingPrompt.id, WaitingPrompt.n)
        .where(*queued(), WaitingPrompt.expiry > now, or_(false(), *kinds))
        .order_by(WaitingPrompt.extra_priority.desc(), WaitingPrompt.created.asc())
        .limit(1)
        .with_for_update(skip_locked=True)
        .subquery("picked")
    )
    single = or_(
        WaitingPrompt.is_chat,
        func.coalesce(WaitingPrompt.params["disable_batching"].as_boolean(), false()),
    )
    taking = case((single, 1), else_=func.greatest(1, func.least(amount, picked.c.n)))
    row = session.execute(
        update(WaitingPrompt)
        .where(WaitingPrompt.id == picked.c.id)
        .values(n=WaitingPrompt.n - taking)
        .returning(WaitingPrompt, picked.c.n)
        .execution_options(synchronize_session=False)
    ).first()
    if row is None:
        return Popped(skipped=skipped_counts(session, filters, now))
    wp, before = row
    take = int(before) - wp.n
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
            *queued(),
            WaitingPrompt.is_chat.is_(False),
            WaitingPrompt.expiry > now,
        )
    ).one()
    return {name: int(v) for name, v in zip(SKIP_REASONS, row, strict=True) if v}


def job_payload(wp: WaitingPrompt, count: int) -> dict[str, Any]:
    params = {k: v for k, v in wp.params.items() if k != VALIDATED_BACKENDS_KEY}
    return {**params, "prompt": wp.prompt, "n": count}
