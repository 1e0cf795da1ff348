"""Requester views of chat requests: submit, read the status, cancel.

The body goes through ``validate_chat_request`` (precise refusals, naming the key), then the
route's JSON Schema. Image parts are taken in before the transaction, after every refusal
that needs no image (a bad one is 400 with nothing queued), and objects the committed row
does not own are deleted again. The front, with the service passkey, has its forwarded
address trusted; a wrong passkey is 403 on every chat route. A queued request is answered
with its first status (``_first_status``), so the front decides gaps and fail_fast unread.
The submit is served without Flask, as the workers' lane is (``runtime.native.api.lane``),
on the clients' threads: it is on every completion's path.
"""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request

from generated.chat.names import PARAM_MESSAGES
from generated.errors import RequestNotFound
from generated.routes import (
    HEADER_APIKEY,
    HEADER_CLIENT_AGENT,
    HEADER_X_OPERATION_KEY,
)
from generated.signals import CHAT_EVENT_CANCELLED
from generated.wire.native import ChatAccepted, ChatStatus
from runtime.contract.messages import image_parts
from runtime.contract.validator import requested_models, validate_chat_request
from runtime.native.accounts.keys import ANONYMOUS_USER_ID, key_hash_of, user_for_hash
from runtime.native.accounts.shared_keys import requester
from runtime.native.api.body import check_headers, checked_headers, parse_json
from runtime.native.api.context import NativeContext, native
from runtime.native.api.lane import LaneRequest, Reply
from runtime.native.api.service_passkey import (
    refuse_wrong_passkey,
    source_address,
    source_of,
    trusted_service,
)
from runtime.native.api.text_views import DEFAULT_CLIENT_AGENT
from runtime.native.api.validation import validate_body
from runtime.native.objects.lifecycle import ChatObjects, release_ended, take_in
from runtime.native.objects.offload import offload_threshold
from runtime.native.progress.settlement import settle_cancelled_streams
from runtime.native.queue.sweep import utcnow
from runtime.native.queue.wake import publish_wake, wake_local
from runtime.native.requests.chat import (
    END_USER_FIELDS,
    REQUEST_TYPE,
    ChatSubmitted,
    OperationKeyRace,
    StatusRead,
    create_chat_request,
    get_chat_request,
    read_chat_request,
    retire_operation,
    stored_operation_key,
)
from runtime.native.requests.chat_status import chat_status
from runtime.native.requests.countermeasures import Source
from runtime.native.requests.moderation import Screen
from runtime.native.requests.signals import publish_chat_event
from runtime.native.requests.text import cancel_text_request
from runtime.observability import context as request_context
from runtime.stores.database import flush_wal, transaction

OPERATION_KEY_ATTEMPTS = 2
"""A lost race on a new operation key is retried once; the retry finds the winner's row."""


def chat_async(req: LaneRequest) -> Reply:
    """Queue a chat request (served without Flask, on the clients' threads)."""
    ctx = req.ctx
    refuse_wrong_passkey(req.header, ctx.settings)  # first: a wrong one is 403, even malformed
    check_headers(req.operation_id, req.headers, req.header_values)
    raw = parse_json(req.data())
    chat_request = validate_chat_request(raw)
    validate_body(req.operation_id, raw)
    source = Source(ctx.redis, source_of(req.remote_addr, req.header, ctx.settings))
    with source.counted():
        result = _admitted(req, chat_request, source)
    queued = result.id is not None and not result.existing
    models = requested_models(chat_request)
    if queued and not result.unflushed:
        wake_local(ctx.redis, models)  # committed: a pop takes it
    if result.id is None:
        return Reply({"kudos": float(result.kudos)})
    # A replay by operation key queues nothing: 200 with the first request's id and kudos
    # (docs/design.md, "Operation keys"); a new request is 202, queued.
    try:
        first = _first_status(ctx, result)
    finally:
        if queued:  # the other processes' pops: this one's had their start (``queue.wake``)
            publish_wake(ctx.redis, models)
    accepted: ChatAccepted = {"id": str(result.id), "kudos": float(result.kudos), "status": first}
    return Reply(dict(accepted), 200 if result.existing else 202)


def _admitted(req: LaneRequest, chat_request: dict[str, Any], source: Source) -> ChatSubmitted:
    """The request queued (or quoted, or recovered by its operation key), its images taken
    in. A wrong key fetches and stores nothing: with images, the admission before intake
    checks the key first; without, intake stores nothing and the transaction checks it."""
    ctx = req.ctx
    assert ctx.objects is not None
    replayed = _admitted_before_intake(req, chat_request, source)
    if replayed is not None:
        return replayed
    stored_request, objects = take_in(
        chat_request,
        ctx.objects,
        ctx.settings,
        offload_threshold(ctx.settings),
        source=_fetch_source(req, source),
    )
    try:
        result = _create(req, stored_request, chat_request, objects, source)
    except BaseException:
        objects.discard_unowned(())
        raise
    objects.discard_unowned(result.object_keys)
    return result


def _fetch_source(req: LaneRequest, source: Source) -> str:
    """Whose share of the image fetch pool a submit uses: its registered API key's (the
    key was admitted before any fetch); without one, its address's."""
    key_hash = key_hash_of(req.header(HEADER_APIKEY))
    if key_hash == key_hash_of(None):
        return f"address:{source.address}"
    return f"key:{key_hash}"


def _first_status(ctx: NativeContext, result: ChatSubmitted) -> ChatStatus:
    """The status right after the commit that queued (or found) the request. A new one's
    is what its submit had in hand and its queue position, one statement outside any
    transaction (no BEGIN, no COMMIT), after its commit reached the disk when it did not
    wait for it (``flush_wal`` on the same connection: nothing is answered before it is
    durable); a found one's (an operation-key replay) is read, in one snapshot as the
    status route reads it."""
    if result.first is not None:
        with ctx.autocommit.connect() as connection:
            driver = connection.connection.driver_connection
            assert driver is not None
            if result.unflushed:  # its pops were woken already (``_create``)
                flush_wal(driver)
            with driver.cursor() as cursor:
                return result.first.read(cursor)
    with transaction(ctx.snapshots) as session:
        wp = get_chat_request(session, str(result.id))
        return chat_status(session, ctx.policy, wp, utcnow())


def _admitted_before_intake(
    req: LaneRequest, chat_request: dict[str, Any], source: Source
) -> ChatSubmitted | None:
    """With image parts, every refusal that needs no image runs before any fetch or decode
    (a request refused anyway costs no fetch); an operation-key replay is answered from here,
    its images not taken in again. None: go on and take the images in."""
    if not image_parts(chat_request[PARAM_MESSAGES]):
        return None
    early = _create(req, chat_request, chat_request, None, source, admission_only=True)
    return early if early.existing else None


def _create(
    req: LaneRequest,
    stored_request: dict[str, Any],
    original: dict[str, Any],
    objects: ChatObjects | None,
    source: Source,
    *,
    admission_only: bool = False,
) -> ChatSubmitted:
    ctx = req.ctx
    for attempt in range(OPERATION_KEY_ATTEMPTS):
        try:
            with transaction(ctx.sessions) as session:
                result = create_chat_request(
                    session,
                    ctx.policy,
                    req.header(HEADER_APIKEY),
                    stored_request,
                    moderation=Screen.of(ctx.settings),
                    source=source,
                    operation_key=req.header(HEADER_X_OPERATION_KEY),
                    client_agent=_client_agent(req),
                    ipaddr=source.address,
                    now=utcnow(),
                    original=original,
                    objects=objects,
                    admission_only=admission_only,
                )
        except OperationKeyRace:
            if attempt + 1 == OPERATION_KEY_ATTEMPTS:
                raise
            continue
        if result.unflushed:  # committed with its writes: a pop takes it from now
            wake_local(ctx.redis, requested_models(stored_request))
        return result
    raise AssertionError("unreachable")


def _client_agent(req: LaneRequest) -> str:
    agent = req.header(HEADER_CLIENT_AGENT)
    return DEFAULT_CLIENT_AGENT if agent is None else agent


def chat_status_view(id: str) -> Response:
    """One request's status, read in one snapshot (a read-only REPEATABLE READ
    transaction): the request with its reader's user id and end-user fields, its jobs, the
    online workers, its queue position. Not statement by statement: a fault, pop or payment
    committed between the request's read and its jobs' would be read half (a request back
    in the queue read as done with no generation)."""
    ctx = native()
    trusted_service(ctx.settings)  # first: any wrong passkey is 403, even a malformed one
    checked_headers("chat_status")
    with transaction(ctx.snapshots) as session:
        read = read_chat_request(session, id, request.headers.get(HEADER_APIKEY))
        body: dict[str, Any] = dict(chat_status(session, ctx.policy, read.wp, utcnow()))
    if read.reader_id is not None:
        request_context.set_user(read.reader_id)  # the access log's user id
    end_user = _end_user(read)
    if end_user:
        body["end_user"] = end_user
    return jsonify(body)


def _end_user(read: StatusRead) -> dict[str, str]:
    """The request's end-user identifiers, for a read with the apikey of the registered user
    who submitted it (there is no moderator role); {} for any other read."""
    reader = read.reader_id
    if reader is None or reader == ANONYMOUS_USER_ID or reader != read.wp.user_id:
        return {}
    return {name: str(read.end_user[name]) for name in END_USER_FIELDS if name in read.end_user}


def chat_cancel(id: str) -> Response:
    ctx = native()
    trusted_service(ctx.settings)  # first: any wrong passkey is 403, even a malformed one
    checked_headers("chat_cancel")
    with transaction(ctx.sessions) as session:
        wp = get_chat_request(session, id, lock=True)
        was_active, wp_id = wp.active, wp.id
        settle_cancelled_streams(session, ctx.redis, wp, utcnow())  # streamed: posted text
        cancel_text_request(session, wp)
        body = chat_status(session, ctx.policy, wp, utcnow())
    if was_active:
        publish_chat_event(ctx.redis, wp_id, CHAT_EVENT_CANCELLED)
    release_ended(ctx.sessions, ctx.objects, [wp_id])
    return jsonify(body)


def chat_cancel_operation(key: str) -> Response:
    """Cancel the request that the caller's submit with operation key ``key`` queued (a
    front whose every submit response was lost has no id to cancel it by). With none, the
    key is retired: a submit with it still on its way queues nothing (409). The caller's key
    is the caller's own (``stored_operation_key``): another user's, or another keyless
    client's, is not found here."""
    ctx = native()
    trusted_service(ctx.settings)  # first: any wrong passkey is 403, even a malformed one
    checked_headers("chat_cancel_operation")
    api_key = request.headers.get(HEADER_APIKEY)
    stored_key = stored_operation_key(key, api_key, source_address(ctx.settings))
    with transaction(ctx.sessions) as session:
        # a shared key cancels its owner's request (even when spent: a cancel spends nothing)
        asker = requester(session, api_key, utcnow(), spending=False)
        user = user_for_hash(session, asker.key_hash)
        wp_id = retire_operation(session, user.id, stored_key)
    if wp_id is None:
        raise RequestNotFound(request_type=REQUEST_TYPE, id=key)
    return chat_cancel(str(wp_id))
