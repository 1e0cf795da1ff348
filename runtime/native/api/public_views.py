"""Public reads: heartbeat, workers (all, filtered, by id, by name), users (all, by id, by
API key), in upstream's WorkerDetails and UserDetails shapes. ``suspicious`` is privileged:
upstream shows it to moderators; with no moderator role here, a user's own API key (the
apikey header) sees its own and its workers', any other read none."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from flask import Response, jsonify, request
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from generated.chat.names import DECL_CHAT_JOBS
from generated.errors import InvalidAPIKey, UserNotFound, WorkerNotFound
from generated.routes import HEADER_APIKEY
from runtime.native.accounts import shared_keys
from runtime.native.accounts.keys import ANONYMOUS_USER_ID, KEY_OWNER, key_hash_of, unique_alias
from runtime.native.accounts.kudos import GRANT_REASON as GRANT
from runtime.native.accounts.shared_keys import shared_key_id
from runtime.native.accounts.transfers import RECEIVED, SENT
from runtime.native.api.body import checked_headers
from runtime.native.api.context import native
from runtime.native.api.lane import LaneRequest, Reply
from runtime.native.api.validation import path_value, query_values
from runtime.native.db.tables import KudosLedger, SharedKey, User, Worker
from runtime.native.queue.fit import serves_chat
from runtime.native.queue.sweep import utcnow
from runtime.native.stats.models import MODEL_TYPE as WORKER_TYPE
from runtime.stores.database import transaction

INT32 = 2**31 - 1
VERSION = "2.0.0"


def heartbeat(_req: LaneRequest) -> Reply:
    """Served on the workers' lane without Flask (``runtime.native.api.lane``)."""
    return Reply(dict(message="OK", version=VERSION))


def _worker_json(
    worker: Worker, trusted: bool, online_since: datetime, viewer: int | None = None
) -> dict[str, Any]:
    shown = {
        "id": str(worker.id),
        "name": worker.name,
        "type": WORKER_TYPE,
        "online": worker.last_check_in > online_since,
        "requests_fulfilled": worker.fulfilments,
        "kudos_rewards": float(worker.kudos),
        "kudos_details": {"generated": float(worker.kudos), "uptime": 0},
        "performance": (
            "no speed samples yet"
            if worker.speed is None
            else f"{round(worker.speed, 1)} tokens per second"
        ),
        "threads": worker.threads,
        "uptime": int(worker.uptime),
        "maintenance_mode": worker.maintenance,
        "maintenance_reason": worker.maintenance_reason if worker.maintenance else None,
        "paused": False,
        "nsfw": worker.nsfw,
        "trusted": trusted,
        "flagged": False,
        "uncompleted_jobs": worker.aborted_jobs,
        "models": list(worker.models),
        "bridge_agent": worker.bridge_agent,
        "max_length": worker.max_length,
        "max_context_length": worker.max_context_length,
        "tokens_generated": worker.contributions,
        DECL_CHAT_JOBS: serves_chat(worker),
    }
    if viewer == worker.user_id:
        shown[SUSPICIOUS] = worker.suspicion
    return shown


SUSPICIOUS = "suspicious"


def _viewer(session: Session) -> int | None:
    """The id of the user whose own key the apikey header holds, who sees its privileged
    fields; None without one, for the anonymous key, or a key no user owns (a shared key
    is none: an unprivileged read, as upstream's)."""
    api_key = request.headers.get(HEADER_APIKEY)
    if not api_key:
        return None
    found = session.scalar(select(KEY_OWNER), {"key_hash": key_hash_of(api_key)})
    return None if found == ANONYMOUS_USER_ID else found


_WORKERS = select(Worker, User.trusted).join(User, User.id == Worker.user_id)


def _online_since() -> datetime:
    return utcnow() - timedelta(seconds=native().policy.worker_stale_seconds)


def workers() -> Response:
    """Every worker; ``name`` keeps the one of that name (case-insensitive) and wins over
    ``type``, which keeps them all (text) or none (another type), as upstream."""
    args = query_values("workers", request.args)
    checked_headers("workers")
    name, kind = args.get("name"), args.get("type")
    query = _WORKERS.order_by(Worker.name)
    if name:
        query = query.where(func.lower(Worker.name) == name.lower())
    elif kind and kind != WORKER_TYPE:
        return jsonify([])
    since = _online_since()
    with transaction(native().sessions) as session:
        viewer = _viewer(session)
        rows = session.execute(query).all()
        return jsonify([_worker_json(w, t, since, viewer) for w, t in rows])


def _one_worker(operation: str, where: Any, shown_as: str) -> Response:
    checked_headers(operation)
    since = _online_since()
    with transaction(native().sessions) as session:
        row = session.execute(_WORKERS.where(where)).first()
        if row is None:
            raise WorkerNotFound(id=shown_as)
        return jsonify(_worker_json(row[0], row[1], since, _viewer(session)))


def worker(id: str) -> Response:
    try:
        worker_id = uuid.UUID(id)
    except ValueError:
        raise WorkerNotFound(id=id) from None
    return _one_worker("worker", Worker.id == worker_id, id)


def worker_by_name(name: str) -> Response:
    return _one_worker(
        "worker_by_name", Worker.name == path_value("worker_by_name", "name", name), name
    )


def _user_json(user: User, worker_count: int) -> dict[str, Any]:
    return {
        "id": user.id,
        "username": unique_alias(user),
        "kudos": float(user.kudos),
        "concurrency": user.concurrency,
        "moderator": False,
        "trusted": user.trusted,
        "flagged": False,
        "worker_count": worker_count,
        "account_age": max(int((utcnow() - user.created).total_seconds()), 0),
    }


def _users_with_worker_counts() -> Any:
    """Users beside the number of workers each has (0 without any)."""
    counts = (
        select(Worker.user_id, func.count().label("workers")).group_by(Worker.user_id).subquery()
    )
    return select(User, func.coalesce(counts.c.workers, 0)).outerjoin(
        counts, counts.c.user_id == User.id
    )


KUDOS_DETAILS = {GRANT: "admin", SENT: "gifted", RECEIVED: "received"}
"""The ledger's reasons that have a kudos_details entry of their own (upstream's names; a
gift is negative, as upstream records it); every other reason is ``accumulated``."""
ACCUMULATED = "accumulated"


def _user_details(
    session: Session, user: User, worker_count: int, own: bool = False
) -> dict[str, Any]:
    """One user as a single read shows it: with the kudos by origin and the records, and
    its suspicion when ``own`` (read with the user's own key)."""
    details = {ACCUMULATED: 0.0, **{name: 0.0 for name in KUDOS_DETAILS.values()}}
    by_reason = session.execute(
        select(KudosLedger.reason, func.sum(KudosLedger.delta))
        .where(KudosLedger.user_id == user.id)
        .group_by(KudosLedger.reason)
    ).all()
    for reason, total in by_reason:
        details[KUDOS_DETAILS.get(reason, ACCUMULATED)] += float(total)
    tokens, jobs = session.execute(
        select(
            func.coalesce(func.sum(Worker.contributions), 0),
            func.coalesce(func.sum(Worker.fulfilments), 0),
        ).where(Worker.user_id == user.id)
    ).one()
    shown = {
        **_user_json(user, worker_count),
        "kudos_details": details,
        "records": {"contribution": {"tokens": int(tokens)}, "fulfillment": {"text": int(jobs)}},
    }
    if own:
        shown[SUSPICIOUS] = user.suspicion
    return shown


def user(id: str) -> Response:
    checked_headers("user")
    if not id.isdigit() or int(id) > INT32:
        raise UserNotFound(id=id)
    with transaction(native().sessions) as session:
        row = session.execute(_users_with_worker_counts().where(User.id == int(id))).first()
        if row is None:
            raise UserNotFound(id=id)
        own = _viewer(session) == row[0].id
        return jsonify(_user_details(session, row[0], row[1], own))


def find_user() -> Response:
    """The key's own user, with its workers' ids (upstream shows them to their owner); a
    shared key's owner, named with the key's name and without them, as upstream. No key is
    401 InvalidAPIKey, a key of no user 404 UserNotFound, as upstream."""
    checked_headers("find_user")
    api_key = request.headers.get(HEADER_APIKEY)
    if not api_key:
        raise InvalidAPIKey()
    with transaction(native().sessions) as session:
        shared = _shared_key_owner(session, api_key)
        owner = User.id == (KEY_OWNER if shared is None else shared[1].id)
        row = session.execute(
            _users_with_worker_counts().where(owner), {"key_hash": key_hash_of(api_key)}
        ).first()
        if row is None:
            raise UserNotFound("No user holds this API key.", id="")
        found = _user_details(
            session, row[0], row[1], own=shared is None and row[0].id != ANONYMOUS_USER_ID
        )
        if shared is not None:
            named = f": {shared[0].name}" if shared[0].name else ""
            return jsonify({**found, "username": f"{found['username']} (Shared Key{named})"})
        ids = session.scalars(select(Worker.id).where(Worker.user_id == row[0].id)).all()
        return jsonify({**found, "worker_ids": list(map(str, ids))})


def _shared_key_owner(session: Session, api_key: str) -> tuple[SharedKey, User] | None:
    """The shared key ``api_key`` names and its owner, or None (a user's own key)."""
    if shared_key_id(api_key) is None:
        return None
    try:
        return shared_keys.find(session, api_key)
    except InvalidAPIKey:
        return None


def users() -> Response:
    with transaction(native().sessions) as session:
        rows = session.execute(
            _users_with_worker_counts().order_by(User.kudos.desc(), User.id).limit(1000)
        ).all()
        return jsonify([_user_json(u, n) for u, n in rows])
