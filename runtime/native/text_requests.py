"""Text requests: create (with upstream's checks, concurrency, upfront kudos), status, cancel.

Bodies arrive validated against the route's schema with its defaults filled
(``runtime.native.body``); this module applies the checks a schema cannot express.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from generated.errors import (
    ExcessiveStopSequence,
    KudosUpfront,
    MissingFullSamplerOrder,
    MissingPrompt,
    RequestNotFound,
    TokenOverflow,
    TooManyPrompts,
    TooManyStopSequences,
)
from runtime.native import kudos
from runtime.native.auth import ANONYMOUS_USER_ID
from runtime.native.fit import worker_fits
from runtime.native.models import Generation, User, WaitingPrompt, Worker
from runtime.native.policy import Policy

MAX_STOP_SEQUENCES = 128
MAX_STOP_SEQUENCE_CHARS = 2000
MIN_SAMPLER_ORDER = 7
REQUEST_TYPE = "Text Waiting Prompt"


@dataclass(frozen=True)
class Submitted:
    id: uuid.UUID | None
    kudos: Decimal


def check_text_params(prompt: str, params: dict[str, Any]) -> None:
    """Upstream's text validations that a JSON Schema does not express."""
    if not prompt.strip():
        raise MissingPrompt()
    if params["max_context_length"] < params["max_length"]:
        raise TokenOverflow(
            max_context_length=params["max_context_length"], max_length=params["max_length"]
        )
    stops = params.get("stop_sequence") or []
    if len(stops) > MAX_STOP_SEQUENCES:
        raise TooManyStopSequences(count=len(stops), limit=MAX_STOP_SEQUENCES)
    chars = sum(len(s) for s in stops)
    if chars > MAX_STOP_SEQUENCE_CHARS:
        raise ExcessiveStopSequence(chars=chars, limit=MAX_STOP_SEQUENCE_CHARS)
    order = params.get("sampler_order")
    if order is not None and len(set(order)) < MIN_SAMPLER_ORDER:
        raise MissingFullSamplerOrder(count=len(set(order)))


def queued_jobs(session: Session, user_id: int) -> int:
    """Jobs the user has waiting or processing (upstream's concurrency count)."""
    waiting = session.scalar(
        select(func.coalesce(func.sum(WaitingPrompt.n), 0)).where(
            WaitingPrompt.user_id == user_id, WaitingPrompt.active.is_(True)
        )
    )
    processing = session.scalar(
        select(func.count())
        .select_from(Generation)
        .join(WaitingPrompt, WaitingPrompt.id == Generation.wp_id)
        .where(WaitingPrompt.user_id == user_id, *unfinished())
    )
    return int(waiting or 0) + int(processing or 0)


def unfinished() -> list[Any]:
    return [
        Generation.generation.is_(None),
        Generation.faulted.is_(False),
        Generation.cancelled.is_(False),
    ]


def create_text_request(
    session: Session,
    policy: Policy,
    user: User,
    body: dict[str, Any],
    *,
    client_agent: str,
    ipaddr: str,
    now: datetime,
) -> Submitted:
    """Queue a text request (or quote it on dry_run); ``user`` must be locked FOR UPDATE."""
    params = dict(body["params"])
    check_text_params(body["prompt"], params)
    n = int(params.pop("n", 1))
    models = list(body.get("models") or [])
    cost = kudos.quote(
        params["max_length"], params["max_context_length"], n, models, policy.horde_tax
    )
    if body.get("dry_run"):
        return Submitted(id=None, kudos=cost)
    count = queued_jobs(session, user.id)
    if count + n > user.concurrency:
        raise TooManyPrompts(count=count + n, concurrency=user.concurrency, retry_after=5)
    needs_upfront = params["max_length"] > policy.upfront_max_length
    if needs_upfront and user.kudos < cost:
        raise KudosUpfront(kudos=float(cost), balance=float(user.kudos))
    wp = WaitingPrompt(
        id=uuid.uuid4(),
        user_id=user.id,
        prompt=body["prompt"],
        params=params,
        n=n,
        jobs=n,
        max_length=params["max_length"],
        max_context_length=params["max_context_length"],
        models=models,
        workers=[str(w) for w in body.get("workers") or []],
        worker_blacklist=bool(body.get("worker_blacklist")),
        trusted_workers=bool(body.get("trusted_workers")),
        slow_workers=bool(body.get("slow_workers", True)),
        extra_slow_workers=bool(body.get("extra_slow_workers")),
        nsfw=bool(body.get("nsfw")),
        softprompt=body.get("softprompt"),
        client_agent=client_agent[:255],
        ipaddr=ipaddr[:64],
        extra_priority=(
            Decimal(policy.anonymous_priority) if user.id == ANONYMOUS_USER_ID else user.kudos
        ),
        kudos_estimate=cost,
        created=now,
        expiry=now + timedelta(seconds=policy.waiting_expiry_seconds),
    )
    session.add(wp)
    session.flush()
    kudos.apply_kudos(session, user.id, -policy.horde_tax, "horde_tax", wp_id=wp.id)
    if needs_upfront:
        kudos.hold_upfront(session, user.id, wp.id, cost)
    return Submitted(id=wp.id, kudos=cost)


def get_text_request(session: Session, request_id: str, *, lock: bool = False) -> WaitingPrompt:
    try:
        wp_id = uuid.UUID(request_id)
    except ValueError:
        raise RequestNotFound(request_type=REQUEST_TYPE, id=request_id) from None
    query = select(WaitingPrompt).where(WaitingPrompt.id == wp_id, WaitingPrompt.is_chat.is_(False))
    wp = session.scalars(query.with_for_update() if lock else query).first()
    if wp is None:
        raise RequestNotFound(request_type=REQUEST_TYPE, id=request_id)
    return wp


def finish_if_complete(session: Session, wp: WaitingPrompt) -> None:
    """Deactivate a request with nothing left to hand out or wait for; release its holds."""
    if wp.n > 0 and not (wp.faulted or wp.cancelled):
        return
    pending = session.scalar(
        select(func.count()).select_from(Generation).where(Generation.wp_id == wp.id, *unfinished())
    )
    if pending and not (wp.faulted or wp.cancelled):
        return
    wp.active = False
    kudos.release_holds(session, wp.id)


def cancel_text_request(session: Session, wp: WaitingPrompt) -> None:
    """Upstream's DELETE: nothing more is handed out; jobs in flight are cancelled unpaid."""
    wp.n = 0
    wp.cancelled = True
    session.execute(
        update(Generation).where(Generation.wp_id == wp.id, *unfinished()).values(cancelled=True)
    )
    finish_if_complete(session, wp)


def text_status(
    session: Session, policy: Policy, wp: WaitingPrompt, now: datetime
) -> dict[str, Any]:
    gens = session.execute(
        select(Generation, Worker.name)
        .join(Worker, Worker.id == Generation.worker_id)
        .where(Generation.wp_id == wp.id)
        .order_by(Generation.start_time)
    ).all()
    finished = [g for g, _ in gens if g.generation is not None]
    processing = [g for g, _ in gens if g.generation is None and not (g.faulted or g.cancelled)]
    restarted = [g for g, _ in gens if g.aborted]
    done = wp.faulted or wp.cancelled or (wp.n == 0 and not processing)
    position, wait = queue_estimate(session, policy, wp, now) if wp.n > 0 else (0, 0)
    charged = sum((g.charge for g in finished), Decimal(0)) + policy.horde_tax
    return {
        "finished": len(finished),
        "processing": len(processing),
        "restarted": len(restarted),
        "waiting": max(wp.n, 0),
        "done": bool(done),
        "faulted": wp.faulted,
        "wait_time": wait,
        "queue_position": position,
        "kudos": float(charged),
        "is_possible": wp.n == 0 or is_possible(session, policy, wp, now),
        "generations": [
            {
                "text": g.generation,
                "seed": g.seed,
                "worker_id": str(g.worker_id),
                "worker_name": name,
                "model": g.model,
                "id": str(g.id),
                "state": g.state or "ok",
                "gen_metadata": g.gen_metadata or [],
            }
            for g, name in gens
            if g.generation is not None
        ],
    }


def online_workers(session: Session, policy: Policy, now: datetime) -> list[tuple[Worker, bool]]:
    since = now - timedelta(seconds=policy.worker_stale_seconds)
    rows = session.execute(
        select(Worker, User.trusted)
        .join(User, User.id == Worker.user_id)
        .where(Worker.last_check_in > since, Worker.maintenance.is_(False))
    ).all()
    return [(w, bool(t)) for w, t in rows]


def is_possible(session: Session, policy: Policy, wp: WaitingPrompt, now: datetime) -> bool:
    return any(worker_fits(w, t, wp) for w, t in online_workers(session, policy, now))


def queue_estimate(
    session: Session, policy: Policy, wp: WaitingPrompt, now: datetime
) -> tuple[int, int]:
    """Requests ahead of ``wp`` and a wait in seconds: tokens ahead over online throughput."""
    ahead = and_(
        WaitingPrompt.active.is_(True),
        WaitingPrompt.n > 0,
        WaitingPrompt.id != wp.id,
        or_(
            WaitingPrompt.extra_priority > wp.extra_priority,
            and_(
                WaitingPrompt.extra_priority == wp.extra_priority,
                WaitingPrompt.created < wp.created,
            ),
        ),
    )
    count, tokens = session.execute(
        select(
            func.count(), func.coalesce(func.sum(WaitingPrompt.max_length * WaitingPrompt.n), 0)
        ).where(ahead)
    ).one()
    threads = sum(
        w.threads for w, t in online_workers(session, policy, now) if worker_fits(w, t, wp)
    )
    if threads == 0:
        return int(count), 0
    rate = threads * policy.assumed_tokens_per_second
    return int(count), math.ceil((int(tokens) + wp.max_length * wp.n) / rate)
