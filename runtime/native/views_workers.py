"""Worker views: pop a text job, submit its result."""

from __future__ import annotations

from flask import Response, jsonify, request

from generated.errors import InvalidPayload
from generated.routes import HEADER_APIKEY
from runtime.native.auth import worker_owner_for_key
from runtime.native.body import checked_headers, int64, json_body
from runtime.native.context import native
from runtime.native.lifecycle import utcnow
from runtime.native.queue import (
    Submission,
    job_payload,
    pop_text_job,
    register_worker,
    submit_text_job,
)
from runtime.stores.database import transaction

INT32 = 2**31 - 1


def text_pop() -> Response:
    checked_headers("text_pop")
    body = json_body("text_pop")
    # The worker table stores lengths as INTEGER; a larger declaration means "any".
    body["max_length"] = min(body["max_length"], INT32)
    body["max_context_length"] = min(body["max_context_length"], INT32)
    ctx = native()
    now = utcnow()
    with transaction(ctx.sessions) as session:
        user = worker_owner_for_key(session, request.headers.get(HEADER_APIKEY))
        worker = register_worker(session, user, body, now)
    with transaction(ctx.sessions) as session:
        popped = pop_text_job(session, ctx.policy, worker, user.trusted, body["amount"], now)
        if popped.wp is None:
            return jsonify(
                payload={}, id=None, ids=[], model=None, ttl=None, skipped=popped.skipped
            )
        ids = [str(g.id) for g in popped.generations]
        return jsonify(
            payload=job_payload(popped.wp, len(ids)),
            id=ids[0],
            ids=ids,
            model=popped.generations[0].model,
            ttl=popped.generations[0].ttl,
            softprompt=popped.wp.softprompt,
            is_chat=False,
            skipped={},
        )


def text_submit() -> Response:
    checked_headers("text_submit")
    body = json_body("text_submit")
    text = body.get("generation")
    if text is None and body["state"] != "faulted":
        raise InvalidPayload(
            field="generation", problem="is required for a text job", param="generation"
        )
    submission = Submission(
        generation_id=body["id"],
        text=text or "",
        state=body["state"],
        seed=int64(body.get("seed"), "seed"),
        gen_metadata=body.get("gen_metadata") or [],
    )
    ctx = native()
    with transaction(ctx.sessions) as session:
        user = worker_owner_for_key(session, request.headers.get(HEADER_APIKEY))
        reward = submit_text_job(session, ctx.policy, user, submission, utcnow())
    return jsonify(reward=float(reward))
