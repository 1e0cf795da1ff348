"""Chat requests: admission against the online pool, then a text request row with is_chat.

``create_chat_request`` takes a request ``validate_chat_request`` normalised and, in the
caller's transaction, replays or refuses its operation key, screens it, checks its models
and the online pool, plans it (``chat_plan``), quotes and holds its kudos, and writes the
row (the order is in its docstring; docs/design.md, "Routing"). With images, the checks that
need none run first (``admission_only``), then the images are taken in
(``chat_objects.take_in``). The apikey may be a shared key's id (``accounts.shared_keys``).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

from sqlalchemy import bindparam, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, defer

from generated.chat.names import (
    DECL_MODEL_ID,
    HORDE_CONFORMANCE,
    HORDE_DRY_RUN,
    HORDE_EXTRA_SLOW_WORKERS,
    HORDE_MAX_KUDOS,
    HORDE_SLOW_WORKERS,
    HORDE_TRUSTED_WORKERS,
    HORDE_VALIDATED_BACKENDS,
    HORDE_WEBHOOK,
    HORDE_WORKER_BLACKLIST,
    HORDE_WORKERS,
    PARAM_MAX_COMPLETION_TOKENS,
    PARAM_MAX_TOKENS,
    PARAM_MESSAGES,
    PARAM_MODEL,
    PARAM_MODELS,
    PARAM_SAFETY_IDENTIFIER,
    PARAM_USER,
)
from generated.errors import (
    KudosCapExceeded,
    ModelNotFound,
    NoEligibleWorker,
    OperationCancelled,
    OperationKeyMismatch,
    RequestNotFound,
)
from runtime.contract.conversation import flatten_messages
from runtime.contract.dispatch import operation_fingerprint
from runtime.contract.validator import horde_option, requested_models
from runtime.native.accounts import kudos, shared_keys
from runtime.native.accounts.keys import ANONYMOUS_API_KEY, KEY_OWNER, hash_key
from runtime.native.db.tables import AnyWorker, OperationKey, User, WaitingPrompt, Worker
from runtime.native.objects.lifecycle import ChatObjects
from runtime.native.queue.fit import VALIDATED_BACKENDS_KEY, chat_model, serving_declarations
from runtime.native.queue.policy import Policy
from runtime.native.requests.admission import Operation, read_admission
from runtime.native.requests.chat_plan import ChatPlan, plan_chat_request
from runtime.native.requests.chat_status import FirstStatus, first_status
from runtime.native.requests.countermeasures import Source
from runtime.native.requests.enqueue import enqueue_request
from runtime.native.requests.moderation import Screen
from runtime.native.requests.rows import (
    admit_jobs,
    find_request,
    queue_priority,
    request_uuid,
)
from runtime.observability import context

REQUEST_TYPE = "Chat Waiting Prompt"


@dataclass(frozen=True)
class ChatSubmitted:
    id: uuid.UUID | None
    kudos: Decimal
    existing: bool = False
    object_keys: tuple[str, ...] = ()
    """The objects the new row owns (none for a dry run or a recovered request)."""
    first: FirstStatus | None = None
    """A newly queued request's status as of its commit (``FirstStatus.read`` after it)."""
    unflushed: bool = False
    """Its commit did not wait for the disk (``enqueue_request``'s ``commit``): the caller
    flushes (``stores.database.flush_wal``) before it answers; ``first`` is then set."""


ANONYMOUS_KEY_SCOPE = "anonymous."
"""How a stored anonymous operation key begins (a key as sent cannot hold the dot)."""


def stored_operation_key(key: str, api_key: str | None, source: str) -> str:
    """An operation key as it is stored for the user of ``api_key``: as sent, but the
    anonymous user's bound to the submitter's address too (a digest of both). Every client
    without a key is the anonymous user, and a key belongs to its submitter alone: another
    keyless client that knows it can neither cancel that request by it nor retire it."""
    if api_key and api_key != ANONYMOUS_API_KEY:
        return key
    digest = hashlib.sha256(f"{source}\n{key}".encode()).hexdigest()
    return ANONYMOUS_KEY_SCOPE + digest


class OperationKeyRace(Exception):
    """Another transaction claimed the same (user, key) first: retry, and find it."""


def _replayed(operation: Operation, key: str, fingerprint: str) -> ChatSubmitted:
    """The request already queued under the user's operation key, or its refusal."""
    if operation.wp_id is None:  # retired by a cancel that came first
        raise OperationCancelled(key=key)
    if operation.fingerprint != fingerprint:
        raise OperationKeyMismatch(key=key)
    return ChatSubmitted(id=operation.wp_id, kudos=operation.kudos, existing=True)


def retire_operation(session: Session, user_id: int, key: str) -> uuid.UUID | None:
    """The request queued under the user's operation key, for its cancel; with none, the key
    is retired (claimed with no request) so a submit still on its way queues nothing.

    A submit holding the key uncommitted makes the claim wait for it: then its request is
    the one returned (or, if it rolled back, the key is retired)."""
    retired = session.execute(
        insert(OperationKey)
        .values(user_id=user_id, key=key, fingerprint="", wp_id=None, kudos=0)
        .on_conflict_do_nothing(constraint="uq_operation_keys_user_key")
        .returning(OperationKey.id)
    ).first()
    if retired is not None:
        return None
    return session.scalar(
        select(OperationKey.wp_id).where(OperationKey.user_id == user_id, OperationKey.key == key)
    )


def _unknown_model(session: Session, models: list[str]) -> str | None:
    """The first listed model that no registered worker serves by that exact name (the
    caller leaves out those an online worker serves)."""
    for name in models:
        known = session.scalar(
            select(Worker.id)
            .where(
                or_(
                    Worker.models.has_key(name),
                    Worker.chat_declaration[DECL_MODEL_ID].astext == name,
                )
            )
            .limit(1)
        )
        if known is None:
            return name
    return None


def _online_serves(online: list[tuple[AnyWorker, bool]], name: str) -> bool:
    """An online worker serves ``name`` by that exact name (so it is known: no query)."""
    return any(name in (w.models or []) or chat_model(w) == name for w, _ in online)


def _model_param(request: dict[str, Any], name: str) -> str:
    listed = request.get(PARAM_MODELS, [])
    return f"{PARAM_MODELS}.[{listed.index(name)}]" if name in listed else PARAM_MODEL


def _check_kudos_cap(request: dict[str, Any], cost: Decimal) -> None:
    cap = horde_option(request, HORDE_MAX_KUDOS)
    if cap is not None and cost > Decimal(str(cap)):
        raise KudosCapExceeded(quote=float(cost), max_kudos=cap)


def _output_param(request: dict[str, Any]) -> str:
    """Where the request named its output length (a shared key's token limit refers to it)."""
    return (
        PARAM_MAX_COMPLETION_TOKENS if PARAM_MAX_COMPLETION_TOKENS in request else PARAM_MAX_TOKENS
    )


def create_chat_request(
    session: Session,
    policy: Policy,
    api_key: str | None,
    request: dict[str, Any],
    *,
    moderation: Screen,
    source: Source,
    operation_key: str | None,
    client_agent: str,
    ipaddr: str,
    now: datetime,
    original: dict[str, Any] | None = None,
    objects: ChatObjects | None = None,
    admission_only: bool = False,
) -> ChatSubmitted:
    """Queue (or quote, or recover) a chat request of ``api_key``'s user, in the session's
    transaction, which locks the user's row FOR UPDATE first (``requests.admission``).

    In order: an operation key already used returns its request (nothing charged again),
    or 422 when the body's fingerprint differs (the anonymous user's keys are bound to the
    submitter's address: every keyless client is that one user); a source in timeout is
    refused, then moderation screens the full messages; every model must be known (404
    model_not_found) and served online (503 no_eligible_worker); the plan (``chat_plan``;
    a pool gap is 404 for features, 400 for limits); the dry-run quote against
    horde.max_kudos and a shared key's limits, then dry_run, concurrency and upfront kudos
    as for text; the row, the horde tax, the hold and the operation key. With images,
    ``request`` holds references and ``original`` the body as sent (the fingerprint is over
    it, so fresh object keys never change it); ``objects`` lends the images' limit measures
    and offloads kept messages above the threshold.

    ``admission_only``: run every refusal that needs no image (operation key, moderation,
    model and pool, features, kudos cap, concurrency, upfront kudos) and stop before the
    row: the caller does it before fetching or decoding any image, so a request refused
    anyway costs no fetch. The result's id is None unless an operation key was replayed."""
    asker = shared_keys.requester(session, api_key, now)
    stored_key = stored_operation_key(operation_key, api_key, ipaddr) if operation_key else None
    with source.ask_timeout() as timeout:  # its Redis round trip beside the admission's
        admission = read_admission(session, policy, asker.key_hash, stored_key, now)
        user, online, counted = admission.user, admission.online, admission.queued
        fingerprint = operation_fingerprint(original or request) if operation_key else ""
        if operation_key and admission.operation is not None:
            return _replayed(admission.operation, operation_key, fingerprint)
        timeout.refuse()
    full_prompt = flatten_messages(request[PARAM_MESSAGES])
    moderation.check(full_prompt)
    models = requested_models(request)
    unknown = _unknown_model(session, [m for m in models if not _online_serves(online, m)])
    if unknown is not None:
        raise ModelNotFound(model=unknown, param=_model_param(request, unknown))
    declarations = serving_declarations(online, models)
    if not declarations:
        raise NoEligibleWorker(reason=f"no online chat worker serves {', '.join(models)}")
    measured = objects.limit_measures() if objects is not None else None
    plan = plan_chat_request(request, declarations, measured)
    cost = kudos.quote(plan.max_length, plan.max_context_length, 1, models, policy.horde_tax)
    _check_kudos_cap(request, cost)
    shared_keys.check_request(asker.shared_key, cost, plan.max_length, _output_param(request))
    if horde_option(request, HORDE_DRY_RUN):
        return ChatSubmitted(id=None, kudos=cost)
    slow = bool(horde_option(request, HORDE_SLOW_WORKERS))
    needs_upfront = admit_jobs(
        session,
        policy,
        user,
        1,
        plan.max_length,
        cost,
        source=ipaddr,
        slow_workers=slow,
        counted=counted,
    )
    if admission_only:
        return ChatSubmitted(id=None, kudos=cost)
    wp = _row(policy, user, request, plan, models, full_prompt, cost, now)
    wp.client_agent, wp.ipaddr = client_agent[:255], ipaddr[:64]
    wp.sharedkey_id = asker.shared_key.id if asker.shared_key is not None else None
    if objects is not None:
        wp.messages_object = objects.offload(plan.messages)
        owned = [*objects.image_keys, *([wp.messages_object] if wp.messages_object else [])]
        wp.object_keys = owned
    operation = (stored_key, fingerprint) if stored_key else None
    # its COMMIT rides with it when nothing follows (no shared key to spend, no hold)
    last = wp.sharedkey_id is None and not needs_upfront
    if not enqueue_request(session, wp, Decimal(policy.horde_tax), operation, commit=last):
        raise OperationKeyRace(operation_key)
    shared_keys.spend(session, wp.sharedkey_id, Decimal(policy.horde_tax))
    if needs_upfront:
        kudos.hold_upfront(session, user.id, wp.id, cost)
    return ChatSubmitted(
        id=wp.id,
        kudos=cost,
        object_keys=tuple(wp.object_keys or ()),
        first=first_status(policy, wp, online),
        unflushed=last,
    )


def _row(
    policy: Policy,
    user: User,
    request: dict[str, Any],
    plan: ChatPlan,
    models: list[str],
    full_prompt: str,
    cost: Decimal,
    now: datetime,
) -> WaitingPrompt:
    stored = {k: v for k, v in request.items() if k != PARAM_MESSAGES}
    return WaitingPrompt(
        id=uuid.uuid4(),
        is_chat=True,
        user_id=user.id,
        prompt=flatten_messages(plan.messages),
        submitted_prompt=full_prompt,
        messages=plan.messages,
        chat_request=stored,
        required_features=plan.required_features,
        required_limits=plan.required_limits,
        conformance=horde_option(request, HORDE_CONFORMANCE),
        max_tokens_lowered_to=plan.max_tokens_lowered_to,
        params={VALIDATED_BACKENDS_KEY: bool(horde_option(request, HORDE_VALIDATED_BACKENDS))},
        n=1,
        jobs=1,
        max_length=plan.max_length,
        max_context_length=plan.max_context_length,
        models=models,
        workers=[str(w) for w in horde_option(request, HORDE_WORKERS) or []],
        worker_blacklist=bool(horde_option(request, HORDE_WORKER_BLACKLIST)),
        trusted_workers=bool(horde_option(request, HORDE_TRUSTED_WORKERS)),
        slow_workers=bool(horde_option(request, HORDE_SLOW_WORKERS)),
        extra_slow_workers=bool(horde_option(request, HORDE_EXTRA_SLOW_WORKERS)),
        webhook=horde_option(request, HORDE_WEBHOOK),
        origin_id=context.request_id.get(),
        extra_priority=queue_priority(policy, user),
        kudos_estimate=cost,
        created=now,
        expiry=now + timedelta(seconds=policy.waiting_expiry_seconds),
    )


def get_chat_request(session: Session, request_id: str, *, lock: bool = False) -> WaitingPrompt:
    """A chat request by id; a text request's id is not found here (and the reverse)."""
    return find_request(session, request_id, is_chat=True, request_type=REQUEST_TYPE, lock=lock)


END_USER_FIELDS = (PARAM_USER, PARAM_SAFETY_IDENTIFIER)
"""The request's fields naming its end user, which only its owner's status read shows."""
_STATUS_READ = (
    select(
        WaitingPrompt,
        KEY_OWNER,
        *(WaitingPrompt.chat_request[name] for name in END_USER_FIELDS),
    )
    .options(defer(WaitingPrompt.prompt))
    .where(WaitingPrompt.id == bindparam("wp_id"), WaitingPrompt.is_chat.is_(True))
)
"""A chat request for its status (the flattened prompt left unread), the user id of the
reader's key and the request's end-user fields as stored: one statement, built once."""


@dataclass(frozen=True)
class StatusRead:
    wp: WaitingPrompt
    reader_id: int | None
    """The user whose apikey reads (None: no key, or one no user has)."""
    end_user: dict[str, Any]
    """The request's stored end-user fields (``user``, ``safety_identifier``) that are set."""


def read_chat_request(session: Session, request_id: str, api_key: str | None) -> StatusRead:
    """``get_chat_request`` for a status read, with the reader's user id and the request's
    end-user fields (``StatusRead``) in the same statement."""
    wp_id = request_uuid(request_id, REQUEST_TYPE)
    key_hash = hash_key(api_key) if api_key else ""  # no key's digest is empty: no reader
    row = session.execute(_STATUS_READ, {"wp_id": wp_id, "key_hash": key_hash}).first()
    if row is None:
        raise RequestNotFound(request_type=REQUEST_TYPE, id=request_id)
    wp, reader_id, *fields = row
    given = zip(END_USER_FIELDS, fields, strict=True)
    end_user = {name: value for name, value in given if value is not None}
    return StatusRead(wp, reader_id, end_user)


class StoredChat(Protocol):
    """A chat request's stored request and kept messages: its row's, or a pop's
    (``queue.jobs.PoppedChat``, read by the pop's statement)."""

    @property
    def chat_request(self) -> dict[str, Any] | None: ...
    @property
    def messages(self) -> list[Any] | None: ...


def stored_request(wp: StoredChat) -> dict[str, Any]:
    """The validated request as stored (client's values) with the kept messages."""
    return {**(wp.chat_request or {}), PARAM_MESSAGES: list(wp.messages or [])}
