"""Publishing the completion signal of a chat request (best effort, never text).

Publish after the commit that made the change, so a woken front reads the new status; a
Redis failure is logged and swallowed (the front's fallback poll covers it). A request
ended by a worker's submit has its final status (``final_status``) stored under its outcome
key, which the events name (``publish_chat_events``: SET then PUBLISHes, one round trip),
so a woken front reads the status from Redis instead of the status route.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import Engine, bindparam, select
from sqlalchemy.orm import Session, defer

from generated.signals import (
    CHAT_FIELD_OUTCOME,
    CHAT_OUTCOME_SECONDS,
    CHAT_SIGNALS,
)
from generated.wire.native import ChatStatus
from runtime.native.db.tables import WaitingPrompt
from runtime.native.queue.policy import Policy
from runtime.native.requests.chat_status import EndedStatus, chat_status, held_status

log = logging.getLogger(__name__)


def publish_chat_event(redis: Redis, request_id: object, event: str, **fields: Any) -> bool:
    """Publish one event on the request's channel; False when Redis did not take it."""
    rid = str(request_id)
    try:
        redis.publish(CHAT_SIGNALS.channel(rid), CHAT_SIGNALS.event(event, rid, **fields))
    except (RedisError, OSError) as exc:
        log.warning("chat signal %s for %s not published: %s", event, rid, exc)
        return False
    return True


_ENDED = (
    select(WaitingPrompt)
    .options(defer(WaitingPrompt.prompt))
    .where(WaitingPrompt.id == bindparam("wp_id"))
)
"""An ended request for its final status (the flattened prompt left unread), built once."""


def final_status(
    autocommit: Engine,
    policy: Policy,
    wp_id: object,
    now: datetime,
    held: EndedStatus | None = None,
) -> ChatStatus | None:
    """The status of a request that just ended, after the commit that ended it, outside any
    transaction (``autocommit``: an engine in autocommit; no BEGIN, no COMMIT; each
    statement sees what was committed when it ran: unlike the status route, which reads in
    one snapshot, this needs none, as nothing moves a request once it ended). ``held``: its row,
    jobs and the online pool as the submit holds them, so nothing is read but a queue
    position while it has jobs left to hand out; without it, the row, jobs and pool are read
    (a session of its own: none of the submit's objects, which its UPDATEs left stale)."""
    if held is not None and (status := held_status(policy, held)) is not None:
        return status
    with Session(autocommit, expire_on_commit=False) as session:
        if held is not None:
            return chat_status(session, policy, held.wp, now, held.jobs)
        wp = session.execute(_ENDED, {"wp_id": wp_id}).scalar_one_or_none()
        return None if wp is None else chat_status(session, policy, wp, now)


def publish_chat_events(
    redis: Redis,
    request_id: object,
    events: list[tuple[str, dict[str, Any]]],
    final: ChatStatus | None = None,
) -> bool:
    """Store ``final`` under the request's outcome key (when given) and publish ``events``
    naming it, in one round trip; False when Redis did not take them."""
    if not events:
        return True
    rid = str(request_id)
    named: dict[str, Any] = {}
    try:
        pipe = redis.pipeline(transaction=False)
        if final is not None:
            key = CHAT_SIGNALS.outcome_key(rid)
            pipe.set(key, json.dumps(final, separators=(",", ":")), ex=CHAT_OUTCOME_SECONDS)
            named = {CHAT_FIELD_OUTCOME: key}
        for event, fields in events:
            pipe.publish(
                CHAT_SIGNALS.channel(rid), CHAT_SIGNALS.event(event, rid, **fields, **named)
            )
        pipe.execute()
    except (RedisError, OSError) as exc:
        log.warning("chat signals %s for %s not published: %s", [e for e, _ in events], rid, exc)
        return False
    return True
