"""Messages offload (docs/design.md, "Images").

At submit, a request whose messages (images inlined as data URLs) serialise above the
configured size is stored whole as one JSON object; the row keeps its key. At pop, a
worker declaring messages_url receives one signed URL valid for
``generated.storage.MESSAGES_URL_TTL_SECONDS`` in place of the messages; other workers
receive messages inline by their image transport, as for any request.
"""

from __future__ import annotations

import json
from typing import Any

from generated.storage import MESSAGES_URL_TTL_SECONDS, OFFLOAD_THRESHOLD_BYTES
from runtime.config import Settings
from runtime.native.objects.transport import with_inline_images
from runtime.stores.objects import JSON, ObjectStore, new_key

MESSAGES_KIND = "msg"


def offload_threshold(settings: Settings) -> int:
    return settings.messages_offload_bytes or OFFLOAD_THRESHOLD_BYTES


def serialised(messages: list[dict[str, Any]]) -> bytes:
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()


def offload_if_large(
    messages: list[dict[str, Any]], store: ObjectStore, threshold: int
) -> str | None:
    """Store the messages (references resolved to inline images) when their JSON is over
    ``threshold`` bytes; the object key, or None when they stay in the row only."""
    body = serialised(with_inline_images(messages, store))
    if len(body) <= threshold:
        return None
    key = new_key(MESSAGES_KIND, "json")
    store.put(key, body, JSON)
    return key


def messages_url(store: ObjectStore, key: str) -> str:
    """The one short-lived signed URL a messages_url worker receives."""
    return store.signed_url(key, MESSAGES_URL_TTL_SECONDS)
