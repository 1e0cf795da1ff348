"""A worker's structured chat submit: verified, stored once, charged on the output estimate.

The reply is checked against the stored request (``verify_chat_reply``); a refusal faults
the job on that worker (400 ChatReplyRejected) and the request is queued again. A kept
reply is claimed and paid as a text submit is, on ``output_estimate``, never on reported
counts. A streamed reply that does not extend what the client received ends as
``stream_diverged``; a censored one delivers no text (``content_filter``). The rules and
their reasons: docs/design.md ("Verification", "Streaming", "Pricing") and ``_land_reply``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from generated.chat.names import (
    FINISH_CONTENT_FILTER,
    FINISH_STOP,
    FINISH_TOOL_CALLS,
    REPLY_CONTENT,
    REPLY_FINISH_REASON,
    REPLY_REASONING_CONTENT,
    REPLY_TOOL_CALLS,
)
from generated.chat.tables_reply import CHARGE_BASIS
from generated.errors import ChatReplyRejected, HordeError, InvalidJobID, WrongCredentials
from generated.signals import CHAT_EVENT_CANCELLED, CHAT_EVENT_DONE, CHAT_EVENT_FAULTED
from generated.streaming import DELTA_RULE, STREAMED_REASONING_PART, STREAMED_REPLY_PART
from generated.wire import STATE_OK
from runtime.contract.pricing import output_estimate, reply_text
from runtime.contract.verification import verify_chat_reply
from runtime.native.db.tables import AnyWorker, Generation, User, WaitingPrompt
from runtime.native.progress.protocol import Relayed
from runtime.native.queue.chat_find import ChatJob, FoundChat
from runtime.native.queue.policy import Policy
from runtime.native.queue.submit import (
    FAULTED,
    JobWorker,
    Landed,
    Owner,
    fault_job,
    land_job,
)
from runtime.native.queue.sweep import count_worker_fault
from runtime.native.queue.webhooks import Delivery
from runtime.native.requests.chat_status import EndedStatus
from runtime.native.requests.status import Jobs
from runtime.observability.context import KIND_CHAT, note_worker_fault
from runtime.stores.database import transaction
from runtime.tables.route_schemas import DEFS

USAGE_KEYS = tuple(DEFS["native"]["ReportedUsage"]["properties"])
# The reply as stored; the reported usage is kept apart (reported_usage).
REPLY_KEYS = (REPLY_CONTENT, REPLY_REASONING_CONTENT, REPLY_TOOL_CALLS, REPLY_FINISH_REASON)


@dataclass(frozen=True)
class ChatSubmission:
    generation_id: str
    state: str
    reply: dict[str, Any]
    usage: dict[str, Any] | None
    seed: int | None
    gen_metadata: list[Any] = field(default_factory=list)
    read_relayed: Callable[[], Relayed | None] = lambda: None
    """What the client's stream received (an earlier worker's posts before it died, or this
    job's own), read (from Redis) only for a kept reply to a request that streams deltas: no
    other has a lease or a stream, so no other submit pays a Redis round trip for it."""


@dataclass
class ChatSubmitOutcome:
    wp_id: uuid.UUID
    generation_id: uuid.UUID
    reward: Decimal = Decimal(0)
    landed: bool = False
    ended: str | None = None
    """The completion-signal event when the request ended with this submit."""
    refusal: HordeError | None = None
    """Verification refused the reply: the job was faulted; answer with this after commit."""
    webhook: Delivery | None = None
    """The request's webhook call, to make after the commit."""
    held: EndedStatus | None = None
    """The ended request's row and its only job, for its final status without a reload."""
    streamed: bool = False
    """The request streams deltas (``DELTA_RULE.streams_deltas``): its job has a lease to end."""
    owns_objects: bool = False
    """The request owns stored objects (images, offloaded messages), which its end releases;
    a request stores them only at its submit, so one without any never needs the release's
    locked read (a transaction on every chat submit that ended a request)."""


def is_chat_job(session: Session, generation_id: str) -> bool | None:
    """Whether a job id is a chat job (None when no such job)."""
    try:
        gen_id = uuid.UUID(generation_id)
    except ValueError:
        return None
    return session.scalar(
        select(WaitingPrompt.is_chat)
        .join(Generation, Generation.wp_id == WaitingPrompt.id)
        .where(Generation.id == gen_id)
    )


def reported_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Every reported count, null where the worker did not report it."""
    usage = usage or {}
    return {key: usage.get(key) for key in USAGE_KEYS}


def ended_event(wp: WaitingPrompt) -> str | None:
    if wp.active:
        return None
    if wp.faulted:
        return CHAT_EVENT_FAULTED
    return CHAT_EVENT_CANCELLED if wp.cancelled else CHAT_EVENT_DONE


def _fault(
    session: Session,
    policy: Policy,
    gen: Generation,
    wp_id: uuid.UUID,
    now: datetime,
    metadata: list[Any],
    *,
    worker_fault: bool = True,
) -> ChatSubmitOutcome:
    values = {"state": FAULTED, "gen_metadata": metadata}
    fault_job(session, policy, gen.id, now, values, worker_fault=worker_fault, kind=KIND_CHAT)
    wp = session.scalars(select(WaitingPrompt).where(WaitingPrompt.id == wp_id)).one()
    return ChatSubmitOutcome(
        wp_id=wp_id,
        generation_id=gen.id,
        ended=ended_event(wp),
        owns_objects=bool(wp.object_keys),
    )


def fault_chat_job(
    session: Session,
    policy: Policy,
    generation_id: uuid.UUID,
    wp_id: uuid.UUID,
    metadata: list[Any],
    now: datetime,
) -> ChatSubmitOutcome:
    """Fault a handed-out job the horde itself could not send: it counts toward the request's
    fault limit, not toward the worker's abort limit."""
    gen = session.scalars(select(Generation).where(Generation.id == generation_id)).one()
    return _fault(session, policy, gen, wp_id, now, metadata, worker_fault=False)


def submit_chat_job(
    session: Session,
    policy: Policy,
    user: User | Owner,
    sub: ChatSubmission,
    now: datetime,
    faults: sessionmaker[Session],
    found: FoundChat,
) -> ChatSubmitOutcome:
    """A chat job's submit. ``found``: its job and the online pool, read with its key
    (``chat_find.find_chat_job``); the job must be ``user``'s worker's (else
    WrongCredentials). ``session``: in autocommit (no BEGIN or COMMIT round trips on the
    happy path): a kept or censored reply is paid by one statement (``pay``: a transaction
    of its own), its kudos noted in ``session.info`` for the caller to count. A fault (the
    worker's, or a refused reply) is several writes: it takes a transaction of ``faults``."""
    job, online = found.job, found.online
    if job is None:
        raise InvalidJobID(id=sub.generation_id)
    gen, worker, wp = job.gen, job.worker, job.wp
    if worker.user_id != user.id:
        raise WrongCredentials()
    request = dict(wp.chat_request or {})  # its parameters: the job was read without messages
    streamed = DELTA_RULE.streams_deltas(request)
    if sub.state == FAULTED:
        with transaction(faults) as tx:
            outcome = _fault(tx, policy, gen, wp.id, now, sub.gen_metadata)
    elif sub.state != STATE_OK:
        outcome = _land_censored(session, policy, user, sub, now, job, online)
    else:
        outcome = _land_reply(
            session, policy, user, sub, now, job, online, request, streamed, faults
        )
    outcome.streamed = streamed
    return outcome


def _land_reply(
    session: Session,
    policy: Policy,
    user: User | Owner,
    sub: ChatSubmission,
    now: datetime,
    job: ChatJob,
    online: list[tuple[AnyWorker, bool]],
    request: dict[str, Any],
    streamed: bool,
    faults: sessionmaker[Session],
) -> ChatSubmitOutcome:
    """A kept reply verified against ``request`` (the stored one), landed and charged; a
    refused one faults the job (the refusal is the outcome's, answered after the commit)."""
    gen, worker, wp = job.gen, job.worker, job.wp
    try:
        reply = verify_chat_reply(request, sub.reply, max_length=wp.max_length)
    except ChatReplyRejected as refusal:
        note = [*sub.gen_metadata, {"type": refusal.code, "value": str(refusal)}][-50:]
        with transaction(faults) as tx:
            outcome = _fault(tx, policy, gen, wp.id, now, note)
        outcome.refusal = refusal
        return outcome
    reply = _shaped(reply)
    tokens = output_estimate(reply, wp.max_length)
    stored = {
        "generation": reply_text(reply),
        "reply": reply,
        "reported_usage": reported_usage(sub.usage),
        "charge_basis": CHARGE_BASIS,
        "seed": sub.seed,
        "gen_metadata": sub.gen_metadata,
    }
    relayed = sub.read_relayed() if streamed else None
    received = _diverged_from(relayed, reply, wp.max_length)
    broke_its_stream = received is not None and relayed is not None and relayed.own
    if received is not None and broke_its_stream:
        tokens = min(tokens, received)  # paid, as charged, for what its client received
    landed = land_job(
        session, policy, user, worker, wp, gen, tokens, sub.state, now, stored, received
    )
    if broke_its_stream:
        with transaction(faults) as tx:
            count_worker_fault(tx, policy, gen.id, worker.id, now)
            note_worker_fault(tx.info, KIND_CHAT)  # /metrics counts it at the commit
    return _landed_outcome(landed, gen, worker, online)


def _diverged_from(relayed: Relayed | None, reply: dict[str, Any], max_length: int) -> int | None:
    """The output estimate of the relayed text when ``reply`` does not extend it (the
    client's stream then ends with stream_diverged); None when it does.

    The requester is then charged for the relayed text at most. When that text was an
    earlier worker's (it died mid-stream and this one took the job over), this worker is
    paid for its reply; when it was this worker's own posts, it broke its own stream: as a
    cancel's settlement, it is paid for what the client received and the job counts as its
    fault (toward maintenance)."""
    if relayed is None:
        return None
    sent = relayed.posted
    content = reply.get(REPLY_CONTENT) or ""
    reasoning = reply.get(REPLY_REASONING_CONTENT) or ""
    if content.startswith(sent.content) and reasoning.startswith(sent.reasoning):
        return None
    received = {STREAMED_REPLY_PART: sent.content, STREAMED_REASONING_PART: sent.reasoning}
    return output_estimate(received, max_length)


def _shaped(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply's stored keys; tool_calls a list; finish_reason filled when absent."""
    reply = {key: reply.get(key) for key in REPLY_KEYS}
    reply[REPLY_TOOL_CALLS] = list(reply[REPLY_TOOL_CALLS] or [])
    if not reply[REPLY_FINISH_REASON]:
        reply[REPLY_FINISH_REASON] = FINISH_TOOL_CALLS if reply[REPLY_TOOL_CALLS] else FINISH_STOP
    return reply


def _landed_outcome(
    landed: Landed, gen: Generation, worker: JobWorker, online: list[tuple[AnyWorker, bool]]
) -> ChatSubmitOutcome:
    ended = ended_event(landed.wp)
    only_job = Jobs([(gen, worker.name)]) if landed.jobs == 1 else None
    return ChatSubmitOutcome(
        wp_id=landed.wp.id,
        generation_id=gen.id,
        reward=landed.reward,
        landed=True,
        ended=ended,
        webhook=landed.webhook,
        held=EndedStatus(landed.wp, only_job, online) if ended and only_job else None,
        owns_objects=bool(landed.wp.object_keys),
    )


def _land_censored(
    session: Session,
    policy: Policy,
    user: User | Owner,
    sub: ChatSubmission,
    now: datetime,
    job: ChatJob,
    online: list[tuple[AnyWorker, bool]],
) -> ChatSubmitOutcome:
    """A censored reply: paid on its output estimate, charged nothing, its text withheld."""
    gen, worker, wp = job.gen, job.worker, job.wp
    tokens = output_estimate(_shaped(sub.reply), wp.max_length)
    withheld: dict[str, Any] = {
        REPLY_CONTENT: None,
        REPLY_REASONING_CONTENT: None,
        REPLY_TOOL_CALLS: [],
        REPLY_FINISH_REASON: FINISH_CONTENT_FILTER,
    }
    stored = {
        "generation": "",
        "reply": withheld,
        "reported_usage": reported_usage(sub.usage),
        "charge_basis": CHARGE_BASIS,
        "seed": sub.seed,
        "gen_metadata": sub.gen_metadata,
    }
    landed = land_job(session, policy, user, worker, wp, gen, tokens, sub.state, now, stored)
    return _landed_outcome(landed, gen, worker, online)
