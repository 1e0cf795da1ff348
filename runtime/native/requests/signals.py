"""Publishing the completion signal of a chat request (best effort, never text).

The channel name and event kinds come from ``generated.signals`` (spec/signals.yaml).
Publish after the transaction that made the change commits, so a woken front reads the
new status. A Redis failure is logged and swallowed: the front's fallback poll covers a
lost event.
"""

from __future__ import annotations

import logging
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from generated.signals import chat_channel, chat_event

log = logging.getLogger(__name__)


def publish_chat_event(redis: Redis, request_id: object, event: str, **fields: Any) -> bool:
    """Publish one event on the request's channel; False when Redis did not take it."""
    rid = str(request_id)
    try:
        redis.publish(chat_channel(rid), chat_event(event, rid, **fields))
    except (RedisError, OSError) as exc:
        log.warning("chat signal %s for %s not published: %s", event, rid, exc)
        return False
    return True
