"""Public reads: heartbeat, models, workers, users."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from flask import Response, jsonify, request
from sqlalchemy import func, select

from generated.chat.names import DECL_CHAT_JOBS
from generated.errors import InvalidPayload, UserNotFound, WorkerNotFound
from runtime.native.api.context import native
from runtime.native.api.lane import LaneRequest, Reply
from runtime.native.db.tables import User, WaitingPrompt, Worker
from runtime.native.queue.fit import chat_model, serves_chat
from runtime.native.queue.sweep import utcnow
from runtime.native.requests.rows import queued as queued_requests
from runtime.native.requests.text import online_workers
from runtime.stores.database import transaction

INT32 = 2**31 - 1
VERSION = "2.0.0"
MODEL_TYPE = "text"


def heartbeat(_req: LaneRequest) -> Reply:
    """Served on the workers' lane without Flask (``runtime.native.api.lane``)."""
    return Reply(dict(message="OK", version=VERSION))


def models() -> Response:
    kinds = request.args.getlist("type")
    if any(kind != MODEL_TYPE for kind in kinds):
        raise InvalidPayload(field="type", problem=f"must be {MODEL_TYPE!r}", param="type")
    ctx = native()
    now = utcnow()
    with transaction(ctx.sessions) as session:
        counts: dict[str, dict[str, Any]] = {}
        for worker, _trusted in online_workers(session, ctx.policy, now):
            chat = chat_model(worker)
            for name in dict.fromkeys([*worker.models, *([chat] if chat else [])]):
                entry = counts.setdefault(
                    name, {"name": name, "count": 0, "threads": 0, "chat_count": 0}
                )
                entry["count"] += 1
                entry["threads"] += worker.threads
                entry["chat_count"] += int(name == chat)
        waiting = session.execute(
            select(WaitingPrompt.models, WaitingPrompt.max_length, WaitingPrompt.n).where(
                *queued_requests()
            )
        ).all()
    out = []
    for name, entry in sorted(counts.items()):
        queued = sum(length * n for models_, length, n in waiting if not models_ or name in models_)
        jobs = sum(n for models_, _length, n in waiting if not models_ or name in models_)
        rate = entry["threads"] * ctx.policy.assumed_tokens_per_second
        out.append(
            {
                "name": name,
                "count": entry["count"],
                "performance": float(rate),
                "queued": float(queued),
                "jobs": float(jobs),
                "eta": int(queued / rate) if rate else 0,
                "type": MODEL_TYPE,
                "chat_count": entry["chat_count"],
            }
        )
    return jsonify(out)


def _worker_json(worker: Worker, trusted: bool, online_since: Any) -> dict[str, Any]:
    return {
        "id": str(worker.id),
        "name": worker.name,
        "type": "text",
        "online": worker.last_check_in > online_since,
        "maintenance_mode": worker.maintenance,
        "maintenance_reason": worker.maintenance_reason if worker.maintenance else None,
        "performance": (
            "no speed samples yet"
            if worker.speed is None
            else f"{round(worker.speed, 1)} tokens per second"
        ),
        "trusted": trusted,
        "threads": worker.threads,
        "max_length": worker.max_length,
        "max_context_length": worker.max_context_length,
        "models": list(worker.models),
        DECL_CHAT_JOBS: serves_chat(worker),
        "kudos_rewards": float(worker.kudos),
        "uptime": 0,
    }


def workers() -> Response:
    ctx = native()
    since = utcnow() - timedelta(seconds=ctx.policy.worker_stale_seconds)
    with transaction(ctx.sessions) as session:
        rows = session.execute(
            select(Worker, User.trusted).join(User, User.id == Worker.user_id).order_by(Worker.name)
        ).all()
        return jsonify([_worker_json(w, t, since) for w, t in rows])


def worker(id: str) -> Response:
    ctx = native()
    since = utcnow() - timedelta(seconds=ctx.policy.worker_stale_seconds)
    try:
        worker_id = uuid.UUID(id)
    except ValueError:
        raise WorkerNotFound(id=id) from None
    with transaction(ctx.sessions) as session:
        row = session.execute(
            select(Worker, User.trusted)
            .join(User, User.id == Worker.user_id)
            .where(Worker.id == worker_id)
        ).first()
        if row is None:
            raise WorkerNotFound(id=id)
        return jsonify(_worker_json(row[0], row[1], since))


def _user_json(user: User, worker_count: int) -> dict[str, Any]:
    return {
        "id": user.id,
        "username": f"{user.username}#{user.id}",
        "kudos": float(user.kudos),
        "concurrency": user.concurrency,
        "trusted": user.trusted,
        "worker_count": worker_count,
    }


def _users_with_worker_counts() -> Any:
    """Users beside the number of workers each has (0 without any)."""
    counts = (
        select(Worker.user_id, func.count().label("workers")).group_by(Worker.user_id).subquery()
    )
    return select(User, func.coalesce(counts.c.workers, 0)).outerjoin(
        counts, counts.c.user_id == User.id
    )


def user(id: str) -> Response:
    if not id.isdigit() or int(id) > INT32:
        raise UserNotFound(id=id)
    ctx = native()
    with transaction(ctx.sessions) as session:
        row = session.execute(_users_with_worker_counts().where(User.id == int(id))).first()
        if row is None:
            raise UserNotFound(id=id)
        return jsonify(_user_json(row[0], row[1]))


def users() -> Response:
    ctx = native()
    with transaction(ctx.sessions) as session:
        rows = session.execute(
            _users_with_worker_counts().order_by(User.kudos.desc(), User.id).limit(1000)
        ).all()
        return jsonify([_user_json(u, n) for u, n in rows])
