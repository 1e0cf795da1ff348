"""Requester views: submit a text request, read its status, cancel it."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request

from generated.errors import StyleNotFound
from generated.routes import HEADER_APIKEY, HEADER_CLIENT_AGENT
from runtime.native.accounts.shared_keys import requester
from runtime.native.api.body import checked_headers, json_body
from runtime.native.api.context import native
from runtime.native.api.service_passkey import source_address
from runtime.native.queue.sweep import utcnow
from runtime.native.queue.wake import wake_workers
from runtime.native.requests.admission import read_admission
from runtime.native.requests.countermeasures import Source
from runtime.native.requests.moderation import Screen
from runtime.native.requests.text import (
    cancel_text_request,
    create_text_request,
    get_text_request,
    text_status,
    whole_kudos,
)
from runtime.stores.database import transaction

DEFAULT_CLIENT_AGENT = "unknown:0:unknown"
STYLE = "style"
STYLE_SHOWN_CHARS = 200


def refuse_style(body: dict[str, Any]) -> None:
    """This horde stores no styles: a request naming one is refused as upstream refuses a
    style it does not hold, before its key is read (upstream applies a style first)."""
    style = body.get(STYLE)
    if style is not None:
        raise StyleNotFound(style=str(style)[:STYLE_SHOWN_CHARS])


def text_async() -> tuple[Response, int]:
    checked_headers("text_async")
    body = json_body("text_async")
    refuse_style(body)
    ctx = native()
    now = utcnow()
    source = Source(ctx.redis, source_address(ctx.settings))
    with source.counted(), transaction(ctx.sessions) as session:
        # a shared key's owner, or the key's user; then that user, locked, and its queued
        # jobs: one round trip (requests.admission)
        asker = requester(session, request.headers.get(HEADER_APIKEY), now)
        admission = read_admission(session, ctx.policy, asker.key_hash, None, now, pool=False)
        result = create_text_request(
            session,
            ctx.policy,
            admission.user,
            body,
            client_agent=request.headers.get(HEADER_CLIENT_AGENT, DEFAULT_CLIENT_AGENT),
            ipaddr=source.address,  # the forwarded one behind a trusted front, as chat
            now=now,
            counted=admission.queued,
            moderation=Screen.of(ctx.settings),
            source=source,
            shared_key=asker.shared_key,
        )
    if result.id is None:
        return jsonify(kudos=whole_kudos(result.kudos)), 200
    wake_workers(ctx.redis, body.get("models") or [])  # committed: a waiting pop takes it
    return jsonify(id=str(result.id), kudos=whole_kudos(result.kudos)), 202


def text_status_view(id: str) -> Response:
    """A request's status, read in one snapshot (``chat_status_view`` says why)."""
    checked_headers("text_status")
    ctx = native()
    with transaction(ctx.snapshots) as session:
        wp = get_text_request(session, id)
        return jsonify(text_status(session, ctx.policy, wp, utcnow()))


def text_cancel(id: str) -> Response:
    checked_headers("text_cancel")
    ctx = native()
    with transaction(ctx.sessions) as session:
        wp = get_text_request(session, id, lock=True)
        cancel_text_request(session, wp)
        return jsonify(text_status(session, ctx.policy, wp, utcnow()))
