"""POST /api/v2/generate/text/progress: a worker posts the content of a streamed job.

Authenticated by the lease written at pop (the popping key's digest), so the route reads
Redis only, never Postgres. A post carries ``delta`` (content) and ``reasoning``. A 409 adds
``last_seq``, ``posted_chars`` and ``posted_reasoning_chars`` beside ``{message, rc}``, from
which the worker resumes (``runtime.worker.progress_poster``). Served on the workers' lane.
"""

from __future__ import annotations

import uuid

from generated.errors import AnonForbiddenWorker, InvalidJobID, ProgressOutOfOrder
from generated.routes import HEADER_APIKEY
from generated.wire import ANONYMOUS_API_KEY
from runtime.native.accounts.keys import hash_key
from runtime.native.api.body import check_headers, parsed_body
from runtime.native.api.lane import LaneRequest, Reply
from runtime.native.progress.protocol import post_progress

OPERATION = "text_progress"


def _generation_id(raw: str) -> str:
    """Generation ids are UUIDs; anything else names no job."""
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise InvalidJobID(id=raw[:100]) from None


def text_progress(req: LaneRequest) -> Reply:
    check_headers(OPERATION, req.headers, req.header_values)
    body = parsed_body(OPERATION, req.data())
    api_key = req.header(HEADER_APIKEY) or ANONYMOUS_API_KEY
    if api_key == ANONYMOUS_API_KEY:
        raise AnonForbiddenWorker()
    generation_id = _generation_id(body["id"])
    try:
        ack = post_progress(
            req.ctx.redis,
            generation_id,
            hash_key(api_key),
            body["seq"],
            body["delta"],
            body.get("reasoning") or "",
        )
    except ProgressOutOfOrder as gap:
        return Reply({**gap.native_body(), **(gap.metadata or {})}, gap.native_status or 409)
    return Reply(dict(last_seq=ack.last_seq, cancelled=ack.cancelled))
