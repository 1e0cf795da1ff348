"""Account views: a kudos transfer, and a user's shared keys (create, read, modify,
delete), as upstream's routes answer them."""

from __future__ import annotations

from flask import Response, jsonify, request

from generated.routes import HEADER_APIKEY, HEADER_IDEMPOTENCY_KEY
from runtime.native.accounts import shared_keys, transfers
from runtime.native.accounts.keys import user_for_key
from runtime.native.api.body import checked_headers, json_body
from runtime.native.api.context import native
from runtime.native.queue.sweep import utcnow
from runtime.stores.database import transaction

DELETED = "OK"
"""Upstream's SimpleResponse message of a deleted key."""


def kudos_transfer() -> Response:
    checked_headers("kudos_transfer")
    body = json_body("kudos_transfer")
    ctx = native()
    with transaction(ctx.sessions) as session:
        done = transfers.transfer(
            session,
            ctx.redis,
            request.headers.get(HEADER_APIKEY),
            body["username"],
            body["amount"],
            request.headers.get(HEADER_IDEMPOTENCY_KEY),
            utcnow(),
        )
    if not done.replayed:  # committed: its reverse wait starts
        transfers.mark_sent(ctx.redis, done.source, done.dest)
    return jsonify(transferred=float(done.amount))


def sharedkey_create() -> Response:
    checked_headers("sharedkey_create")
    body = json_body("sharedkey_create")
    ctx = native()
    with transaction(ctx.sessions) as session:
        user = user_for_key(session, request.headers.get(HEADER_APIKEY))
        key = shared_keys.create(session, user, body, utcnow())
        return jsonify(shared_keys.details(key, user))


def sharedkey(sharedkey_id: str) -> Response:
    checked_headers("sharedkey")
    ctx = native()
    with transaction(ctx.sessions) as session:
        key, owner = shared_keys.find(session, sharedkey_id)
        return jsonify(shared_keys.details(key, owner))


def sharedkey_modify(sharedkey_id: str) -> Response:
    checked_headers("sharedkey_modify")
    body = json_body("sharedkey_modify")
    ctx = native()
    with transaction(ctx.sessions) as session:
        key, owner = shared_keys.find(session, sharedkey_id, lock=True)
        shared_keys.owned(key, user_for_key(session, request.headers.get(HEADER_APIKEY)))
        shared_keys.modify(key, body, utcnow())
        session.flush()
        return jsonify(shared_keys.details(key, owner))


def sharedkey_delete(sharedkey_id: str) -> Response:
    checked_headers("sharedkey_delete")
    ctx = native()
    with transaction(ctx.sessions) as session:
        key, _owner = shared_keys.find(session, sharedkey_id, lock=True)
        shared_keys.owned(key, user_for_key(session, request.headers.get(HEADER_APIKEY)))
        session.delete(key)
    return jsonify(message=DELETED)
