"""Worker views: pop a job (text, or chat with a chat declaration), submit its result.

A chat job's payload is the narrowed chat payload (``generated.chat.chat_job_payload``),
never a prompt; its submit is the structured reply (``runtime.native.chat_submit``), and a
landed generation or an ended request publishes the completion signal after the commit.

A plain streamed chat job (``generated.streaming.streams_deltas``) gets a progress lease at
pop (``stream: true`` in the answer); its submit finishes the lease, a fault ends it.
"""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request

from generated.chat import chat_job_payload, parse_worker_declaration
from generated.errors import InvalidPayload
from generated.routes import HEADER_APIKEY
from generated.signals import CHAT_EVENT_GENERATION
from generated.streaming import streams_deltas
from runtime.native.auth import hash_key, worker_owner_for_key
from runtime.native.body import checked_headers, int64, json_body
from runtime.native.chat_requests import stored_request
from runtime.native.chat_submit import (
    REPLY_KEYS,
    ChatSubmission,
    is_chat_job,
    submit_chat_job,
)
from runtime.native.context import native
from runtime.native.lifecycle import utcnow
from runtime.native.progress import finish, mark_ended, write_lease
from runtime.native.queue import (
    Popped,
    Submission,
    job_payload,
    pop_text_job,
    register_worker,
    submit_text_job,
)
from runtime.native.signals import publish_chat_event
from runtime.stores.database import transaction

INT32 = 2**31 - 1


def text_pop() -> Response:
    checked_headers("text_pop")
    body = json_body("text_pop")
    # The worker table stores lengths as INTEGER; a larger declaration means "any".
    body["max_length"] = min(body["max_length"], INT32)
    body["max_context_length"] = min(body["max_context_length"], INT32)
    declaration = parse_worker_declaration(body)
    ctx = native()
    now = utcnow()
    with transaction(ctx.sessions) as session:
        user = worker_owner_for_key(session, request.headers.get(HEADER_APIKEY))
        worker = register_worker(session, user, body, now, declaration)
    with transaction(ctx.sessions) as session:
        popped = pop_text_job(
            session, ctx.policy, worker, user.trusted, body["amount"], now, declaration
        )
        if popped.wp is None:
            return jsonify(
                payload={}, id=None, ids=[], model=None, ttl=None, skipped=popped.skipped
            )
        if popped.wp.is_chat:
            return _chat_job(popped, declaration)
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


def _chat_job(popped: Popped, declaration: dict[str, Any]) -> Response:
    assert popped.wp is not None
    gen = popped.generations[0]
    chat_request = stored_request(popped.wp)
    payload = chat_job_payload(
        chat_request, declaration, max_tokens=popped.wp.max_tokens_lowered_to
    )
    stream = streams_deltas(chat_request)
    if stream:
        owner = hash_key(request.headers.get(HEADER_APIKEY) or "")
        write_lease(native().redis, str(gen.id), str(popped.wp.id), owner, gen.ttl)
    return jsonify(
        payload=payload,
        id=str(gen.id),
        ids=[str(gen.id)],
        model=gen.model,
        ttl=gen.ttl,
        is_chat=True,
        stream=stream,
        skipped={},
    )


def _chat_submit(body: dict[str, Any]) -> Response:
    submission = ChatSubmission(
        generation_id=body["id"],
        state=body["state"],
        reply={key: body.get(key) for key in REPLY_KEYS},
        usage=body.get("usage"),
        seed=int64(body.get("seed"), "seed"),
        gen_metadata=body.get("gen_metadata") or [],
    )
    ctx = native()
    with transaction(ctx.sessions) as session:
        user = worker_owner_for_key(session, request.headers.get(HEADER_APIKEY))
        outcome = submit_chat_job(session, ctx.policy, user, submission, utcnow())
    end_lease = finish if outcome.landed else mark_ended
    end_lease(ctx.redis, str(outcome.generation_id))
    if outcome.landed:
        publish_chat_event(
            ctx.redis,
            outcome.wp_id,
            CHAT_EVENT_GENERATION,
            generation_id=str(outcome.generation_id),
        )
    if outcome.ended:
        publish_chat_event(ctx.redis, outcome.wp_id, outcome.ended)
    if outcome.refusal is not None:
        raise outcome.refusal
    return jsonify(reward=float(outcome.reward))


def text_submit() -> Response:
    checked_headers("text_submit")
    body = json_body("text_submit")
    with transaction(native().sessions) as session:
        chat = is_chat_job(session, body["id"])
    if chat:
        return _chat_submit(body)
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
