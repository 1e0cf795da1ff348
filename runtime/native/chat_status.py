"""A chat request's status: progress, structured generations and availability.

Availability is measured against the online pool now: ``eligible_threads`` (threads of the
online workers whose declaration covers the stored requirements; fail_fast reads it),
``missing_features`` / ``exceeded_limits`` (the pool gap among the online workers serving
the request's models), ``is_possible``, ``queue_position`` (requests ahead, as upstream) and
``wait_time``: the queued work ahead that this request's eligible workers could take
(tokens), plus this request's own, over those workers' throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, and_, false, func, or_, select
from sqlalchemy.orm import Session

from generated.chat import CHARGE_BASIS, pool_gap
from runtime.native.chat_fit import (
    chat_model,
    chat_queue_filters,
    chat_worker_fits,
    serves_chat,
)
from runtime.native.fit import queue_filters
from runtime.native.models import Generation, WaitingPrompt, Worker
from runtime.native.policy import Policy
from runtime.native.text_requests import online_workers


@dataclass(frozen=True)
class Availability:
    eligible: list[tuple[Worker, bool]]
    missing_features: list[str]
    exceeded_limits: list[dict[str, Any]]

    @property
    def threads(self) -> int:
        return sum(w.threads for w, _ in self.eligible)


def availability(
    session: Session, policy: Policy, wp: WaitingPrompt, now: datetime
) -> Availability:
    online = online_workers(session, policy, now)
    eligible = [(w, t) for w, t in online if chat_worker_fits(w, t, wp)]
    serving = [
        dict(w.chat_declaration or {})
        for w, _ in online
        if serves_chat(w) and chat_model(w) in wp.models
    ]
    gap = pool_gap(serving, list(wp.required_features), dict(wp.required_limits))
    missing: list[str] = []
    exceeded: list[dict[str, Any]] = []
    if gap is not None and gap.kind == "features":
        missing = list(gap.missing)
    elif gap is not None:
        exceeded = [{"limit": gap.limit, "value": gap.value, "maximum": gap.maximum}]
    return Availability(eligible, missing, exceeded)


def takes_any(eligible: list[tuple[Worker, bool]]) -> ColumnElement[bool]:
    """SQL: a queued request (text or chat) one of the ``eligible`` workers could take."""
    kinds: list[ColumnElement[bool]] = []
    for worker, trusted in eligible:
        if worker.prompt_jobs:
            kinds.append(and_(WaitingPrompt.is_chat.is_(False), *queue_filters(worker, trusted)))
        declaration = worker.chat_declaration or {}
        kinds.append(and_(*chat_queue_filters(worker, trusted, declaration)))
    return or_(false(), *kinds)


def queue_estimate(
    session: Session, policy: Policy, wp: WaitingPrompt, eligible: list[tuple[Worker, bool]]
) -> tuple[int, int]:
    """(requests ahead, estimated seconds) for a waiting chat request, counted in SQL."""
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
    work = WaitingPrompt.max_length * WaitingPrompt.n
    count, tokens = session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(work).filter(takes_any(eligible)), 0),
        ).where(ahead)
    ).one()
    threads = sum(w.threads for w, _ in eligible)
    if threads == 0:
        return int(count), 0
    rate = threads * policy.assumed_tokens_per_second
    return int(count), math.ceil((int(tokens) + wp.max_length * wp.n) / rate)


def _generation_json(gen: Generation, worker_name: str) -> dict[str, Any]:
    reply = gen.reply or {}
    return {
        "id": str(gen.id),
        "worker_id": str(gen.worker_id),
        "worker_name": worker_name,
        "model": gen.model,
        "state": gen.state or "ok",
        "content": reply.get("content"),
        "reasoning_content": reply.get("reasoning_content"),
        "tool_calls": list(reply.get("tool_calls") or []),
        "finish_reason": reply.get("finish_reason"),
        "usage": gen.reported_usage or {},
        "kudos": float(gen.charge),
        "charge_basis": gen.charge_basis or CHARGE_BASIS,
        "seed": gen.seed,
        "gen_metadata": gen.gen_metadata or [],
    }


def chat_status(
    session: Session, policy: Policy, wp: WaitingPrompt, now: datetime
) -> dict[str, Any]:
    gens = session.execute(
        select(Generation, Worker.name)
        .join(Worker, Worker.id == Generation.worker_id)
        .where(Generation.wp_id == wp.id)
        .order_by(Generation.start_time)
    ).all()
    landed = [(g, name) for g, name in gens if g.generation is not None]
    processing = [g for g, _ in gens if g.generation is None and not (g.faulted or g.cancelled)]
    restarted = [g for g, _ in gens if g.aborted or g.faulted]
    done = wp.faulted or wp.cancelled or (wp.n == 0 and not processing)
    pool = availability(session, policy, wp, now)
    position, wait = queue_estimate(session, policy, wp, pool.eligible) if wp.n > 0 else (0, 0)
    charged = sum((g.charge for g, _ in landed), Decimal(0)) + policy.horde_tax
    return {
        "finished": len(landed),
        "processing": len(processing),
        "restarted": len(restarted),
        "waiting": max(wp.n, 0),
        "done": bool(done),
        "faulted": wp.faulted,
        "wait_time": wait,
        "queue_position": position,
        "kudos": float(charged),
        "is_possible": wp.n == 0 or pool.threads > 0,
        "generations": [_generation_json(g, name) for g, name in landed],
        "eligible_threads": pool.threads,
        "charge_basis": CHARGE_BASIS,
        "missing_features": pool.missing_features,
        "exceeded_limits": pool.exceeded_limits,
        "max_tokens_lowered_to": wp.max_tokens_lowered_to,
    }
