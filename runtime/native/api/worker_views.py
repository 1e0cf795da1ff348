"""Worker views: pop a job (text, or chat with a chat declaration), submit its result.

Served on the workers' lane (``runtime.native.api.lane``): each view is a function of a
``LaneRequest`` answering a ``Reply``, raising ``HordeError``. A chat job's payload is the
narrowed chat payload, never a prompt; its submit is the structured reply (``chat_submit``).
What must not hold the queue's row lock or a transaction (the completion signal, a chat
job's stored objects, a webhook) runs after the commit; a plain streamed chat job gets a
progress lease at pop, which its submit finishes and a fault ends.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy.orm import Session

from generated.chat.names import DECL_MODEL_ID, REPLY_USAGE
from generated.errors import InvalidPayload, UnservableJob
from generated.routes import HEADER_APIKEY
from generated.signals import CHAT_EVENT_GENERATION, CHAT_FIELD_GENERATION_ID
from generated.streaming import DELTA_RULE
from generated.wire import STATE_FAULTED
from generated.wire.native import WorkerLeft
from runtime.contract.declaration import parse_worker_declaration
from runtime.contract.dispatch import chat_job_payload
from runtime.native.accounts.keys import (
    ANONYMOUS_USER_ID,
    hash_key,
    key_hash_of,
    worker_owner_for_key,
)
from runtime.native.api.body import check_headers, int64, parsed_body
from runtime.native.api.context import NativeContext
from runtime.native.api.lane import LaneRequest, Reply
from runtime.native.api.observe import POP_CHAT, POP_TEXT, count_committed
from runtime.native.api.service_passkey import source_of
from runtime.native.objects.lifecycle import dispatch_messages, release_ended
from runtime.native.progress.protocol import (
    Relayed,
    finish,
    mark_ended,
    read_lease,
    relayed_to_client,
    write_lease,
)
from runtime.native.queue.chat_find import find_chat_job
from runtime.native.queue.chat_submit import (
    REPLY_KEYS,
    ChatSubmission,
    ChatSubmitOutcome,
    fault_chat_job,
    submit_chat_job,
)
from runtime.native.queue.jobs import (
    Popped,
    PoppedJob,
    job_payload,
    leave_pool,
    pop_text_job,
    register_and_pop,
    register_worker,
)
from runtime.native.queue.submit import Found, Owner, Submission, find_text_submit, submit_text_job
from runtime.native.queue.sweep import utcnow
from runtime.native.queue.wake import wake_workers
from runtime.native.queue.webhooks import SENDER, Delivery
from runtime.native.requests.chat import stored_request
from runtime.native.requests.signals import final_status, publish_chat_event, publish_chat_events
from runtime.observability import context as request_context
from runtime.stores.database import transaction

INT32 = 2**31 - 1
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatJob:
    """What a chat pop hands out, read under the row lock and sent after its commit."""

    wp_id: uuid.UUID
    generation_id: uuid.UUID
    model: str
    ttl: int
    payload: dict[str, Any]
    messages_object: str | None
    stream: bool
    origin_id: str | None


def _checked(req: LaneRequest) -> dict[str, Any]:
    """The request's headers checked, then its body parsed and checked (Flask's order)."""
    check_headers(req.operation_id, req.headers, req.header_values)
    return parsed_body(req.operation_id, req.data())


def text_leave(req: LaneRequest) -> Reply:
    """A worker that stops leaves the pool (``jobs.leave_pool``): offline at once."""
    body = _checked(req)
    ctx = req.ctx
    with transaction(ctx.sessions) as session:
        user = worker_owner_for_key(session, req.header(HEADER_APIKEY))
        request_context.set_user(user.id)
        leave_pool(session, ctx.policy, user, body["name"], utcnow())
    left: WorkerLeft = {"name": body["name"], "online": False}
    return Reply(dict(left))


@dataclass(frozen=True)
class PopRequest:
    """A pop's headers and body checked, and its chat declaration: a woken pop's runs use
    its first run's (the same request's bytes)."""

    body: dict[str, Any]
    declaration: dict[str, Any]


def _pop_request(req: LaneRequest) -> PopRequest:
    attempt = req.attempt
    if attempt is not None and isinstance(attempt.parsed, PopRequest):
        return attempt.parsed
    body = _checked(req)
    # The worker table stores lengths as INTEGER; a larger declaration means "any".
    body["max_length"] = min(body["max_length"], INT32)
    body["max_context_length"] = min(body["max_context_length"], INT32)
    parsed = PopRequest(body, parse_worker_declaration(body))
    if attempt is not None:
        attempt.parsed = parsed
    return parsed


def text_pop(req: LaneRequest) -> Reply:
    parsed = _pop_request(req)
    body, declaration = parsed.body, parsed.declaration
    attempt = req.attempt
    if attempt is not None:  # served by runtime.native.asgi: it waits when there is no job
        attempt.wait = body["wait"]
        attempt.models = frozenset([*body.get("models", []), *declared_model(body)])
    # an empty answer a long poll goes on waiting after is never sent: nothing to count
    count_skipped = attempt is None or attempt.last or attempt.wait <= 0
    ctx = req.ctx
    now = utcnow()
    api_key = req.header(HEADER_APIKEY)
    # A known worker's pop is one statement (its key, its registration and the pick, with
    # what a chat job's payload reads of its request), run without a transaction
    # (autocommit: no BEGIN and COMMIT round trips): nothing is read after the pick, so no
    # failure can leave a job taken but never sent. Anything else (a new name, another
    # user's, maintenance, a refused key) is the transaction below. A Core connection, not
    # an ORM session (less CPU a pop: docs/performance.md); its begin() sends nothing in
    # autocommit, and its rollback on an error reaches the driver, so a connection lost to a
    # restart is a 503 and invalidates the pool, as the session's rollback did.
    with ctx.autocommit.connect() as connection, connection.begin():
        key_hash = key_hash_of(api_key)
        known, popped = register_and_pop(
            connection, ctx.policy, key_hash, body, now, declaration, count_skipped=count_skipped
        )
        if known is not None and known.worker is not None:
            request_context.set_user(known.user_id)  # the access log's user id
            answer = _popped_answer(req, popped, declaration)
    if known is None or known.worker is None:
        with transaction(ctx.sessions) as session:
            user = worker_owner_for_key(session, api_key)  # refuses: no key, or anonymous
            worker = register_worker(session, ctx.policy, user, body, now, declaration)
            amount = body["amount"]
            popped = pop_text_job(
                session,
                ctx.policy,
                worker,
                user.trusted,
                amount,
                now,
                declaration,
                count_skipped=count_skipped,
            )
            answer = _popped_answer(req, popped, declaration)
    return answer if isinstance(answer, Reply) else _send_chat_job(req, answer, declaration)


def _popped_answer(
    req: LaneRequest, popped: Popped, declaration: dict[str, Any] | None
) -> Reply | ChatJob:
    """A pop's answer, or the chat job to send once its request's row is no longer locked."""
    if popped.job is None:
        return _no_job(req, popped.skipped)
    if popped.job.is_chat:
        assert declaration is not None
        return _chat_job(popped, declaration)
    req.pop_kind = POP_TEXT
    return _text_job(popped.job)


def declared_model(body: dict[str, Any]) -> list[str]:
    """The chat model a pop declares (its model_id), if any."""
    model = body.get(DECL_MODEL_ID)
    return [model] if isinstance(model, str) else []


def _no_job(req: LaneRequest, skipped: dict[str, int]) -> Reply:
    if req.attempt is not None:
        req.attempt.no_job = True
    return Reply(dict(payload={}, id=None, ids=[], model=None, ttl=None, skipped=skipped))


def _text_job(job: PoppedJob) -> Reply:
    ids = [str(i) for i in job.ids]
    return Reply(
        dict(
            payload=job_payload(job),
            id=ids[0],
            ids=ids,
            model=job.model,
            ttl=job.ttl,
            softprompt=job.softprompt,
            is_chat=False,
            origin_id=job.origin_id,
            skipped={},
        )
    )


def _chat_job(popped: Popped, declaration: dict[str, Any]) -> ChatJob:
    job, chat = popped.job, popped.chat
    assert job is not None
    assert chat is not None
    chat_request = stored_request(chat)
    payload = chat_job_payload(chat_request, declaration, max_tokens=chat.max_tokens_lowered_to)
    return ChatJob(
        wp_id=job.wp_id,
        generation_id=job.ids[0],
        model=job.model,
        ttl=job.ttl,
        payload=payload,
        messages_object=chat.messages_object,
        stream=DELTA_RULE.streams_deltas(chat_request),
        origin_id=job.origin_id,
    )


def _send_chat_job(req: LaneRequest, job: ChatJob, declaration: dict[str, Any]) -> Reply:
    ctx = req.ctx
    assert ctx.objects is not None
    try:
        payload = dispatch_messages(job.payload, job.messages_object, ctx.objects, declaration)
    except Exception as exc:  # a missing object or an unreachable store: fault, no job
        log.exception("chat job %s: its objects could not be sent", job.generation_id)
        reason = UnservableJob(detail=f"the horde could not send it ({exc})")
        _fault_unsendable(ctx, job, reason)
        return _no_job(req, {})
    if job.stream:
        owner = hash_key(req.header(HEADER_APIKEY) or "")
        popped_from = source_of(req.remote_addr, req.header, ctx.settings)  # kudos.Serving
        write_lease(ctx.redis, str(job.generation_id), str(job.wp_id), owner, job.ttl, popped_from)
    req.pop_kind = POP_CHAT
    return Reply(
        dict(
            payload=payload,
            id=str(job.generation_id),
            ids=[str(job.generation_id)],
            model=job.model,
            ttl=job.ttl,
            is_chat=True,
            stream=job.stream,
            origin_id=job.origin_id,
            skipped={},
        )
    )


def _fault_unsendable(ctx: NativeContext, job: ChatJob, reason: UnservableJob) -> None:
    note = [{"type": reason.code, "value": reason.message}]
    with transaction(ctx.sessions) as session:
        outcome = fault_chat_job(session, ctx.policy, job.generation_id, job.wp_id, note, utcnow())
    if not outcome.ended:
        wake_workers(ctx.redis)  # the request got its slot back
    if outcome.ended:
        publish_chat_event(ctx.redis, job.wp_id, outcome.ended)
        release_ended(ctx.sessions, ctx.objects, [job.wp_id])


def _relayed(ctx: NativeContext, generation_id: str) -> Relayed | None:
    """The text a streamed job's client received (``relayed_to_client``; None when not
    streamed, nothing so, or Redis does not answer: the reply is charged whole)."""
    redis = ctx.redis
    try:
        lease = read_lease(redis, generation_id)
        if lease is None:
            return None
        return relayed_to_client(redis, lease.request_id, generation_id)
    except RedisError:
        log.warning("chat submit %s: the relayed text could not be read", generation_id)
        return None


def _chat_submission(ctx: NativeContext, body: dict[str, Any]) -> ChatSubmission:
    return ChatSubmission(
        generation_id=body["id"],
        state=body["state"],
        reply={key: body.get(key) for key in REPLY_KEYS},
        usage=body.get(REPLY_USAGE),
        seed=int64(body.get("seed"), "seed"),
        gen_metadata=body.get("gen_metadata") or [],
        read_relayed=lambda: _relayed(ctx, str(body["id"])),
    )


def _chat_submitted(ctx: NativeContext, outcome: ChatSubmitOutcome) -> Reply:
    """What follows a chat submit's commit: the final status stored, the lease ended, the
    events published, the objects released, the webhook sent; then the answer."""
    # the status a woken front reads, stored under the outcome key before the events
    final = (
        final_status(ctx.autocommit, ctx.policy, outcome.wp_id, utcnow(), outcome.held)
        if outcome.ended
        else None
    )
    if outcome.streamed:  # no other request's job has a lease
        _end_lease(ctx, outcome)
    if not outcome.landed and not outcome.ended:
        wake_workers(ctx.redis)  # a fault gave the request its slot back
    events: list[tuple[str, dict[str, Any]]] = []
    if outcome.landed:
        landed = {CHAT_FIELD_GENERATION_ID: str(outcome.generation_id)}
        events.append((CHAT_EVENT_GENERATION, landed))
    if outcome.ended:
        events.append((outcome.ended, {}))
    publish_chat_events(ctx.redis, outcome.wp_id, events, final)  # the final status first
    if outcome.ended and outcome.owns_objects:
        release_ended(ctx.sessions, ctx.objects, [outcome.wp_id])
    _send_webhook(ctx, outcome.webhook)
    if outcome.refusal is not None:
        raise outcome.refusal
    return Reply(dict(reward=float(outcome.reward)))


def _end_lease(ctx: NativeContext, outcome: ChatSubmitOutcome) -> None:
    """End a streamed job's lease after its submit's commit, best effort as the events are:
    the reply is already stored and paid, so a Redis error here is logged, and the submit
    still answers and publishes (a relay that misses the end entry ends on the events or
    the front's fallback poll). It raised before, a 503 after the commit that skipped the
    events and made the worker repeat a submit that had landed."""
    end_lease = finish if outcome.landed else mark_ended
    try:
        end_lease(ctx.redis, str(outcome.generation_id))
    except (RedisError, OSError) as exc:
        log.warning("chat job %s: its lease not ended: %s", outcome.generation_id, exc)


def _send_webhook(ctx: NativeContext, delivery: Delivery | None) -> None:
    if delivery is not None:
        SENDER.send(delivery, allow_loopback=ctx.settings.image_fetch_allow_loopback)


def text_submit(req: LaneRequest) -> Reply:
    body = _checked(req)
    ctx = req.ctx
    api_key = req.header(HEADER_APIKEY)
    # The key and the job are read in one statement, outside any transaction (fewer round
    # trips):
    # a text job of the key's own worker with a result is then paid by one statement in
    # autocommit (``pay``: the database function horde_pay, a transaction of its own), two
    # round trips in all; a chat reply is read with the online pool its final status shows
    # (``find_chat_job``, one round trip) and paid the same way; anything else (a fault, an
    # unknown key, id or worker) is a transaction, as before. What the find read does not
    # change while the job runs, and the claim is the payment's compare-and-set. The
    # payload is checked before the key, as ever.
    key_hash = key_hash_of(api_key)
    # where the result came from: a self-serving job earns nothing (kudos.earned)
    source = source_of(req.remote_addr, req.header, ctx.settings)
    with ctx.autocommit.connect() as connection, connection.begin():
        chat = None
        if _chat_reply(body):  # else (or a text job's id) the find tells the job's kind
            chat = find_chat_job(connection, key_hash, body["id"], ctx.policy, utcnow())
        if chat is None or chat.job is None:
            found = find_text_submit(connection, key_hash, body["id"])
            if found.is_chat:  # a chat fault, or a reply without a reply's fields
                chat = find_chat_job(connection, key_hash, body["id"], ctx.policy, utcnow())
            else:
                chat = None
                submission = _text_submission(body)
                if _paid_here(found, submission):
                    request_context.set_user(found.owner.id)  # the access log's user id
                    moved: dict[str, Any] = {}
                    reward, webhook = submit_text_job(
                        connection, ctx.policy, found, submission, utcnow(), moved, source
                    )
                    count_committed(moved)  # committed with the statement that paid
                    _send_webhook(ctx, webhook)
                    return Reply(dict(reward=float(reward)))
        if chat is not None:
            reply = _chat_submission(ctx, body)  # the payload's checked before the key
            # Its payment on the find's connection (in autocommit), a fault in a transaction
            # of its own.
            with Session(connection, expire_on_commit=False) as session:
                owner = Owner(_registered(session, chat.owner_id, api_key), chat.trusted, source)
                outcome = submit_chat_job(
                    session, ctx.policy, owner, reply, utcnow(), ctx.sessions, chat
                )
                count_committed(session.info)  # what the payment moved, committed with it
    if chat is not None:
        return _chat_submitted(ctx, outcome)
    with transaction(ctx.sessions) as session:
        _registered(session, found.owner_id, api_key)
        reward, webhook = submit_text_job(
            session, ctx.policy, found, submission, utcnow(), session.info, source
        )
    if submission.state == STATE_FAULTED:
        wake_workers(ctx.redis)  # the request got its slot back (unless past its fault limit)
    _send_webhook(ctx, webhook)
    return Reply(dict(reward=float(reward)))


def _chat_reply(body: dict[str, Any]) -> bool:
    """The submit carries a chat reply's fields: its job is most likely a chat job, read
    first as one (a text job's id is then found by ``find_text_submit``)."""
    return any(body.get(key) is not None for key in REPLY_KEYS)


def _registered(session: Session, owner_id: int | None, api_key: str | None) -> int:
    """The key's user (``owner_id``), refused when it is no registered user's (no such key,
    or anonymous); its id is noted for the access log."""
    if owner_id is None or owner_id == ANONYMOUS_USER_ID:
        worker_owner_for_key(session, api_key)  # refuses
    assert owner_id is not None
    request_context.set_user(owner_id)
    return owner_id


def _paid_here(found: Found, submission: Submission) -> bool:
    """A text job of the key's own (registered) worker, with a result: paid in autocommit."""
    return (
        found.job is not None
        and found.owner_id is not None
        and found.owner_id != ANONYMOUS_USER_ID
        and found.job.worker_user_id == found.owner_id
        and submission.state != STATE_FAULTED
    )


def _text_submission(body: dict[str, Any]) -> Submission:
    text = body.get("generation")
    if text is None and body["state"] != STATE_FAULTED:
        raise InvalidPayload(
            field="generation", problem="is required for a text job", param="generation"
        )
    return Submission(
        generation_id=body["id"],
        text=text or "",
        state=body["state"],
        seed=int64(body.get("seed"), "seed"),
        gen_metadata=body.get("gen_metadata") or [],
    )
