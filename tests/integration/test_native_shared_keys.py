"""Shared keys as upstream's (horde/apis/v2/base.py SharedKey, SharedKeySingle, GenerateTemplate
.validate; horde/apis/v2/kobold.py TextAsyncGenerate; horde/classes/base/user.py
UserSharedKey): the routes and their shapes, and a key used as a requester's apikey on the
text and chat submits, within its own kudos limit, expiry and token limit."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from generated.accounts import SHARED_KEYS_PER_TRUSTED_USER, SHARED_KEYS_PER_USER
from generated.chat.names import PARAM_MAX_TOKENS
from generated.pricing import HORDE_TAX
from runtime.native.accounts.keys import ANONYMOUS_API_KEY, hash_key, ledger_balance
from runtime.native.db.tables import SharedKey, User, WaitingPrompt
from runtime.native.progress.protocol import write_lease
from runtime.native.progress.settlement import settle_cancelled_streams
from runtime.native.queue.sweep import utcnow
from runtime.native.requests.text import cancel_text_request, get_text_request
from runtime.stores.database import transaction
from tests.integration.chat_flow import chat_async, chat_body, chat_pop, submit_reply
from tests.integration.native_flow import ledger, pop, status, submit

pytestmark = pytest.mark.integration

KEYS = "/sharedkeys"
TEXT = "/generate/text/async"


def create(client: httpx.Client, api_key: str, **settings: Any) -> httpx.Response:
    return client.put(KEYS, headers={"apikey": api_key}, json=settings)


def new_key(client: httpx.Client, api_key: str, **settings: Any) -> dict[str, Any]:
    made = create(client, api_key, **settings)
    assert made.status_code == 200, made.text
    return dict(made.json())


def modify(client: httpx.Client, api_key: str, key_id: str, **changes: Any) -> httpx.Response:
    return client.patch(f"{KEYS}/{key_id}", headers={"apikey": api_key}, json=changes)


def text(client: httpx.Client, api_key: str, max_length: int = 80, **fields: Any) -> httpx.Response:
    body = {"prompt": "Once upon a time", "params": {"max_length": max_length}, **fields}
    return client.post(TEXT, headers={"apikey": api_key}, json=body)


def stored(sessions: Any, key_id: str) -> SharedKey:
    with sessions() as session:
        key = session.get(SharedKey, uuid.UUID(key_id))
        assert key is not None
        return key


def kudos_of(sessions: Any, user_id: int) -> Decimal:
    with sessions() as session:
        return session.get(User, user_id).kudos


def test_create_read_modify_delete_in_upstreams_shapes(native_client, make_user):
    owner, other = make_user("owner"), make_user("other")
    plain = new_key(native_client, owner.api_key)
    uuid.UUID(plain["id"])
    assert plain == {
        "id": plain["id"],
        "username": f"owner#{owner.id}",
        "name": "",
        "kudos": 5000,
        "utilized": 0,
        "max_image_pixels": -1,
        "max_image_steps": -1,
        "max_text_tokens": -1,
    }
    named = new_key(native_client, owner.api_key, name="Mutual Aid", kudos=100, expiry=30)
    expiry = parsedate_to_datetime(named["expiry"]).replace(tzinfo=UTC)  # "-0000", as upstream
    assert abs(expiry - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=5)
    assert (named["name"], named["kudos"]) == ("Mutual Aid", 100)
    read = native_client.get(f"{KEYS}/{named['id']}")  # no apikey: the id is enough
    assert (read.status_code, read.json()) == (200, named)

    not_owner = modify(native_client, other.api_key, named["id"], kudos=1)
    assert (not_owner.status_code, not_owner.json()["rc"]) == (403, "SharedKeyNotOwned")
    nothing = modify(native_client, owner.api_key, named["id"])
    assert (nothing.status_code, nothing.json()["rc"]) == (400, "NoSharedKeyModSelected")
    changed = modify(native_client, owner.api_key, named["id"], kudos=50, expiry=-1, name="New")
    assert changed.status_code == 200
    assert {k: changed.json().get(k) for k in ("kudos", "name", "expiry")} == {
        "kudos": 50, "name": "New", "expiry": None,
    }  # fmt: skip

    path = f"{KEYS}/{named['id']}"
    refused = native_client.delete(path, headers={"apikey": other.api_key})
    assert (refused.status_code, refused.json()["rc"]) == (403, "SharedKeyNotOwned")
    deleted = native_client.delete(path, headers={"apikey": owner.api_key})
    assert (deleted.status_code, deleted.json()) == (200, {"message": "OK"})
    for gone in (path, f"{KEYS}/not-a-key", f"{KEYS}/{uuid.uuid4()}"):
        answer = native_client.get(gone)
        assert (answer.status_code, answer.json()["rc"]) == (401, "InvalidAPIKey"), gone


@pytest.mark.raised_limits("sharedkey_create", why="a trusted user creates its ten keys at once")
def test_a_user_holds_a_few_keys_and_the_anonymous_user_none(native_client, make_user):
    anonymous = create(native_client, ANONYMOUS_API_KEY)
    assert (anonymous.status_code, anonymous.json()["rc"]) == (403, "AnonForbidden")
    for user, allowed in (
        (make_user("plain"), SHARED_KEYS_PER_USER),
        (make_user("trusted", trusted=True), SHARED_KEYS_PER_TRUSTED_USER),
    ):
        for _ in range(allowed):
            new_key(native_client, user.api_key)
        over = create(native_client, user.api_key)
        assert (over.status_code, over.json()["rc"]) == (403, "TooManySharedKeys")


@pytest.mark.raised_limits("text_async", why="a submit by the key right after the owner's")
def test_a_text_request_sent_with_a_key_spends_the_owner_and_the_key(
    native_client, native_db, make_user
):
    owner, worker = make_user("owner", kudos=1000), make_user("worker")
    key = new_key(native_client, owner.api_key, kudos=100)
    queued = text(native_client, key["id"])
    assert queued.status_code == 202, queued.text
    with native_db() as session:
        wp = session.get(WaitingPrompt, uuid.UUID(queued.json()["id"]))
        assert (wp.user_id, str(wp.sharedkey_id)) == (owner.id, key["id"])
    tax = Decimal(HORDE_TAX)
    assert (stored(native_db, key["id"]).kudos, stored(native_db, key["id"]).utilized) == (
        100 - tax,
        tax,
    )
    job = pop(native_client, worker.api_key)
    assert submit(native_client, worker.api_key, job["id"]).status_code == 200
    assert status(native_client, queued.json()["id"])["done"]
    charged = _charged(native_db, owner.id)  # the status shows it rounded, as upstream's
    assert charged > 0
    spent = stored(native_db, key["id"])
    assert (spent.kudos, spent.utilized) == (100 - tax - charged, tax + charged)
    assert kudos_of(native_db, owner.id) == 1000 - tax - charged
    with native_db() as session:
        assert ledger_balance(session, owner.id) == float(kudos_of(native_db, owner.id))
    # the owner's own key spends nothing of the shared key
    assert text(native_client, owner.api_key).status_code == 202
    assert stored(native_db, key["id"]).utilized == tax + charged


@pytest.mark.raised_limits("text_async", "sharedkey_modify", why="one key's refusals in a row")
def test_a_key_over_its_limits_is_refused_and_nothing_is_queued(
    native_client, native_db, make_user
):
    owner = make_user("owner", kudos=1000)
    key = new_key(native_client, owner.api_key, max_text_tokens=50)["id"]
    refusals = [
        ({}, 80, 400, "SharedKeyTokenLimit"),
        ({"kudos": 2}, 50, 403, "SharedKeyInsufficientKudos"),
        ({"kudos": 0}, 50, 403, "SharedKeyEmpty"),
        ({"kudos": 500, "expiry": 0}, 50, 403, "SharedKeyExpired"),
    ]
    for changes, length, code, rc in refusals:
        if changes:
            assert modify(native_client, owner.api_key, key, **changes).status_code == 200
        refused = text(native_client, key, max_length=length)
        assert (refused.status_code, refused.json()["rc"]) == (code, rc), rc
    token_limit = text(native_client, owner.api_key, max_length=80)  # the owner's own key
    assert token_limit.status_code == 202
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(WaitingPrompt)) == 1
    assert kudos_of(native_db, owner.id) == 1000 - HORDE_TAX
    unknown = text(native_client, str(uuid.uuid4()))
    assert (unknown.status_code, unknown.json()["rc"]) == (401, "InvalidAPIKey")


def test_a_dry_run_quote_is_held_to_the_key_too(native_client, make_user):
    owner = make_user("owner", kudos=1000)
    key = new_key(native_client, owner.api_key, kudos=1)["id"]
    quote = text(native_client, key, dry_run=True)
    assert (quote.status_code, quote.json()["rc"]) == (403, "SharedKeyInsufficientKudos")


def test_the_routes_upstream_keeps_from_a_shared_key_refuse_it(native_client, make_user):
    owner, bob = make_user("owner", kudos=1000), make_user("bob")
    key = new_key(native_client, owner.api_key)["id"]
    calls = [
        ("POST", "/generate/text/pop", {"name": "w", "models": ["m"]}),
        ("POST", "/generate/text/submit", {"id": str(uuid.uuid4()), "generation": "x"}),
        ("POST", "/kudos/transfer", {"username": str(bob.id), "amount": 5}),
        ("PUT", KEYS, {}),
        ("PATCH", f"{KEYS}/{key}", {"kudos": 1}),
        ("DELETE", f"{KEYS}/{key}", None),
    ]
    for method, path, body in calls:
        answer = native_client.request(method, path, headers={"apikey": key}, json=body)
        assert (answer.status_code, answer.json()["rc"]) == (401, "InvalidAPIKey"), path


@pytest.mark.raised_limits("chat_async", why="a refusal, then a request, by one key")
def test_a_chat_request_sent_with_a_key_spends_the_key(native_client, native_db, make_user):
    owner, worker = make_user("owner", kudos=1000), make_user("worker")
    key = new_key(native_client, owner.api_key, kudos=200, max_text_tokens=100)["id"]
    chat_pop(native_client, worker.api_key)
    over = chat_async(native_client, key, chat_body(**{PARAM_MAX_TOKENS: 150}))
    assert (over.status_code, over.json()["rc"], over.json()["param"]) == (
        400,
        "SharedKeyTokenLimit",
        PARAM_MAX_TOKENS,
    )
    queued = chat_async(native_client, key, chat_body(**{PARAM_MAX_TOKENS: 100}))
    assert queued.status_code == 202, queued.text
    job = chat_pop(native_client, worker.api_key)
    assert submit_reply(native_client, worker.api_key, job["id"]).status_code == 200
    answered = native_client.get(f"/generate/chat/status/{queued.json()['id']}").json()
    spent = Decimal(str(answered["kudos"]))
    assert stored(native_db, key).utilized == spent > HORDE_TAX
    assert stored(native_db, key).kudos == 200 - spent
    assert kudos_of(native_db, owner.id) == 1000 - spent


@pytest.mark.raised_limits("chat_async", why="the key's submit and its cancel right after")
def test_a_key_even_spent_cancels_its_request_by_operation_key(native_client, native_db, make_user):
    owner, worker = make_user("owner", kudos=1000), make_user("worker")
    key = new_key(native_client, owner.api_key)["id"]
    chat_pop(native_client, worker.api_key)
    sent = chat_async(native_client, key, chat_body(), **{"X-Operation-Key": "op-1"})
    assert sent.status_code == 202
    spent = modify(native_client, owner.api_key, key, kudos=0)  # a cancel spends nothing
    assert spent.status_code == 200
    cancelled = native_client.delete("/generate/chat/operation/op-1", headers={"apikey": key})
    assert cancelled.status_code == 200, cancelled.text
    with native_db() as session:
        assert session.get(WaitingPrompt, uuid.UUID(sent.json()["id"])).cancelled


def test_a_deleted_key_leaves_its_request_running_on_the_owner(native_client, native_db, make_user):
    owner, worker = make_user("owner", kudos=1000), make_user("worker")
    key = new_key(native_client, owner.api_key)["id"]
    queued = text(native_client, key).json()["id"]
    gone = native_client.delete(f"{KEYS}/{key}", headers={"apikey": owner.api_key})
    assert gone.status_code == 200
    job = pop(native_client, worker.api_key)
    assert submit(native_client, worker.api_key, job["id"]).status_code == 200
    done = status(native_client, queued)
    assert done["done"]
    assert kudos_of(native_db, owner.id) == 1000 - Decimal(HORDE_TAX) - _charged(
        native_db, owner.id
    )
    with native_db() as session:
        assert session.get(WaitingPrompt, uuid.UUID(queued)).sharedkey_id is None


@pytest.mark.raised_limits("kudos_transfer", "sharedkey_create", why="transfers to three keys")
def test_kudos_sent_to_a_key_reach_its_owner_and_raise_its_limit(
    native_client, native_db, make_user
):
    alice, owner = make_user("alice", kudos=1000), make_user("owner")
    limited = new_key(native_client, owner.api_key, kudos=10)["id"]
    unlimited = new_key(native_client, owner.api_key, kudos=-1)["id"]
    expired = new_key(native_client, owner.api_key, expiry=0)["id"]
    for key in (limited, unlimited):
        sent = native_client.post(
            "/kudos/transfer",
            headers={"apikey": alice.api_key},
            json={"username": key, "amount": 5},
        )
        assert sent.json() == {"transferred": 5.0}
    assert (stored(native_db, limited).kudos, stored(native_db, unlimited).kudos) == (15, -1)
    refused = native_client.post(
        "/kudos/transfer", headers={"apikey": alice.api_key}, json={"username": expired}
    )
    assert (refused.status_code, refused.json()["rc"]) == (403, "SharedKeyExpired")
    assert (kudos_of(native_db, alice.id), kudos_of(native_db, owner.id)) == (990, 10)


def test_a_cancelled_stream_settles_on_the_key_too(
    native_client, native_service, native_db, make_user
):
    """A streamed generation cancelled by its client is charged what it posted
    (``progress.settlement``): a request sent with a key spends that from the key too."""
    owner, worker = make_user("owner", kudos=1000), make_user("worker")
    key = new_key(native_client, owner.api_key)["id"]
    request_id = text(native_client, key, max_length=200).json()["id"]
    job = pop(native_client, worker.api_key)
    redis = native_service.context.redis
    write_lease(redis, job["id"], request_id, hash_key(worker.api_key), job["ttl"])
    progress = {"id": job["id"], "seq": 0, "delta": "The quick brown fox " * 6}
    posted = native_client.post(
        "/generate/text/progress", headers={"apikey": worker.api_key}, json=progress
    )
    assert posted.status_code == 200, posted.text
    with transaction(native_db) as session:
        wp = get_text_request(session, request_id, lock=True)
        settled = settle_cancelled_streams(session, redis, wp, utcnow())
        cancel_text_request(session, wp)
    assert len(settled) == 1
    assert settled[0].reward > 0
    assert stored(native_db, key).utilized == HORDE_TAX + settled[0].reward
    assert kudos_of(native_db, owner.id) == 1000 - HORDE_TAX - settled[0].reward


def _charged(native_db, user_id: int) -> Decimal:
    """What the user's requests were charged for their jobs (the ledger's charges)."""
    return -sum((d for reason, d in ledger(native_db, user_id) if reason == "charge"), Decimal(0))
