"""Operation keys (X-Operation-Key, scoped to the user): the same key and body return the
existing request with 200 and charge nothing again; another body is 422; concurrent duplicates
never create a second row. A cancel by key with no request under it retires the key, so a
submit still on its way queues and charges nothing (409). The anonymous user's keys are
also its submitter's address's: another keyless client can neither cancel by one nor
retire it."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import func, select

from generated.chat.names import PARAM_MODELS
from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY, HEADER_X_OPERATION_KEY
from generated.wire import ANONYMOUS_API_KEY, HEADER_FORWARDED_FOR
from runtime.contract.dispatch import operation_fingerprint
from runtime.contract.validator import validate_chat_request
from runtime.native.db.tables import OperationKey, User, WaitingPrompt
from runtime.native.queue.policy import Policy
from runtime.native.queue.sweep import sweep, utcnow
from tests.conftest import SERVICE_PASSKEY
from tests.integration.chat_flow import MODEL, chat_async, chat_body, chat_pop
from tests.integration.native_flow import ledger
from tests.support.waiting import until, waiting_for_a_lock

pytestmark = pytest.mark.integration

CONCURRENT_SUBMITS = 50


def _keyed(client: httpx.Client, api_key: str, key: str, body: dict) -> httpx.Response:
    return chat_async(client, api_key, body, **{HEADER_X_OPERATION_KEY: key})


def _rows(native_db) -> int:
    with native_db() as session:
        return int(session.scalar(select(func.count()).select_from(WaitingPrompt)))


def test_same_key_and_body_return_the_request_without_a_second_charge(
    native_client, native_db, make_user
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    first = _keyed(native_client, requester.api_key, "op-1", chat_body())
    again = _keyed(native_client, requester.api_key, "op-1", chat_body())
    # The replay queues nothing: 200, the first request's id and kudos (the doc's diagram).
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == first.json()
    assert _rows(native_db) == 1
    assert [r for r, _ in ledger(native_db, requester.id)] == ["grant", "horde_tax"]


def test_same_key_with_another_body_is_422(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    assert _keyed(native_client, requester.api_key, "op-1", chat_body("a")).status_code == 202
    other = _keyed(native_client, requester.api_key, "op-1", chat_body("b"))
    assert other.status_code == 422
    assert other.json()["rc"] == "OperationKeyMismatch"
    assert _rows(native_db) == 1


@pytest.mark.raised_limits(
    "chat_async",
    why="several keyed submits in a row from one address; the keys' scope is under test",
)
def test_keys_are_scoped_to_the_user_and_models_count_as_a_set(native_client, native_db, make_user):
    alice, bob, worker = make_user("alice", 1000), make_user("bob", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    chat_pop(native_client, worker.api_key, "second", model="other-model")
    body = {**chat_body(), PARAM_MODELS: [MODEL, "other-model"]}
    reordered = {**chat_body(), PARAM_MODELS: ["other-model", MODEL]}
    a = _keyed(native_client, alice.api_key, "shared", body).json()
    assert _keyed(native_client, alice.api_key, "shared", reordered).json() == a
    b = _keyed(native_client, bob.api_key, "shared", body).json()
    assert b["id"] != a["id"]
    assert _rows(native_db) == 2


def test_a_malformed_key_is_refused(native_client, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    response = _keyed(native_client, requester.api_key, "no spaces allowed", chat_body())
    assert response.status_code == 400
    assert response.json()["rc"] == "InvalidOperationKey"


@pytest.mark.raised_limits(
    "chat_async",
    why="identical submits sent at once from one address and key, to race the operation key",
)
def test_concurrent_identical_submits_give_one_request_and_one_charge(
    native_client, native_db, native_url, make_user
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)

    def submit(_: int) -> httpx.Response:
        with httpx.Client(base_url=native_url, timeout=60) as client:
            return _keyed(client, requester.api_key, "burst", chat_body())

    with ThreadPoolExecutor(max_workers=CONCURRENT_SUBMITS) as pool:
        responses = list(pool.map(submit, range(CONCURRENT_SUBMITS)))
    assert sorted(r.status_code for r in responses) == [200] * (CONCURRENT_SUBMITS - 1) + [202]
    assert len({r.json()["id"] for r in responses}) == 1
    assert len({r.json()["kudos"] for r in responses}) == 1
    assert _rows(native_db) == 1
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(OperationKey)) == 1
    taxes = [r for r, _ in ledger(native_db, requester.id) if r == "horde_tax"]
    assert taxes == ["horde_tax"]


def test_a_key_claimed_while_the_submit_waits_for_its_lock_is_replayed(
    native_client, native_db, make_user
):
    # A submit reads its operation key with the statement that locks its user
    # (requests.admission): a claim committed while it waited for that lock is not in
    # what it read, so its own claim finds the key taken and it is retried. The client gets
    # the claimed request, and nothing of the second attempt is kept or charged.
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    queued = _keyed(native_client, requester.api_key, "op-1", chat_body()).json()
    body = chat_body("again")
    with native_db() as holder, ThreadPoolExecutor(1) as pool:
        holder.get(User, requester.id, with_for_update=True)  # the user's row lock
        late = pool.submit(_keyed, native_client, requester.api_key, "op-2", body)
        until(lambda: waiting_for_a_lock(native_db), "the submit to wait for the user's row")
        assert not late.done()
        fingerprint = operation_fingerprint(validate_chat_request(body))
        holder.add(
            OperationKey(
                user_id=requester.id, key="op-2", fingerprint=fingerprint,
                wp_id=uuid.UUID(queued["id"]), kudos=queued["kudos"],
            )
        )  # fmt: skip
        holder.commit()
        answer = late.result(timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == queued["id"]
    assert _rows(native_db) == 1
    taxes = [r for r, _ in ledger(native_db, requester.id) if r == "horde_tax"]
    assert taxes == ["horde_tax"]


def _cancel_by_key(client: httpx.Client, api_key: str, key: str) -> httpx.Response:
    return client.delete(f"/generate/chat/operation/{key}", headers={"apikey": api_key})


def _cancelled(native_db, wp_id: str) -> bool:
    with native_db() as session:
        return bool(session.get(WaitingPrompt, uuid.UUID(wp_id)).cancelled)


def test_a_cancel_before_its_submit_retires_the_key(native_client, native_db, make_user):
    # A front whose submit answers were all lost cancels by key; its last submit may reach
    # the native API only after that cancel. It must queue and charge nothing.
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    cancel = _cancel_by_key(native_client, requester.api_key, "op-late")
    assert cancel.status_code == 404
    late = _keyed(native_client, requester.api_key, "op-late", chat_body())
    assert late.status_code == 409
    assert late.json()["rc"] == "OperationCancelled"
    assert _rows(native_db) == 0
    assert [r for r, _ in ledger(native_db, requester.id)] == ["grant"]
    # The key is the user's: another user's submit under the same key is queued.
    other = make_user("other", 1000)
    assert _keyed(native_client, other.api_key, "op-late", chat_body()).status_code == 202


def test_a_cancel_after_its_submit_cancels_the_request(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    queued = _keyed(native_client, requester.api_key, "op-1", chat_body()).json()
    assert _cancel_by_key(native_client, requester.api_key, "op-1").status_code == 200
    assert _cancelled(native_db, queued["id"])
    # Another user holds no request under the key: theirs is retired, the first stays.
    assert _cancel_by_key(native_client, make_user("x").api_key, "op-1").status_code == 404


@pytest.mark.parametrize("submit_commits", [True, False])
def test_a_cancel_racing_an_uncommitted_submit_waits_for_it(
    native_client, native_db, make_user, submit_commits
):
    # The submit holds its key uncommitted; the cancel's claim waits on it, then cancels the
    # request the submit committed, or retires the key if the submit rolled back.
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    queued = _keyed(native_client, requester.api_key, "op-1", chat_body()).json()
    with native_db() as submit, ThreadPoolExecutor(1) as pool:
        submit.add(
            OperationKey(
                user_id=requester.id, key="op-2", fingerprint="f", wp_id=queued["id"], kudos=1
            )
        )
        submit.flush()
        cancel = pool.submit(_cancel_by_key, native_client, requester.api_key, "op-2")
        until(lambda: waiting_for_a_lock(native_db), "the cancel to wait for the submit's key")
        assert not cancel.done()
        if submit_commits:
            submit.commit()
        else:
            submit.rollback()
        answer = cancel.result(timeout=30)
    if submit_commits:
        assert answer.status_code == 200
        assert _cancelled(native_db, queued["id"])
    else:
        assert answer.status_code == 404
        late = _keyed(native_client, requester.api_key, "op-2", chat_body("late"))
        assert late.json()["rc"] == "OperationCancelled"


def test_the_sweep_forgets_a_retired_key_once_a_request_would_have_expired(
    native_client, native_db, make_user
):
    requester = make_user("req", 1000)
    assert _cancel_by_key(native_client, requester.api_key, "op-old").status_code == 404
    policy = Policy()
    sweep(native_db, policy, now=utcnow() + timedelta(seconds=policy.waiting_expiry_seconds - 5))
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(OperationKey)) == 1
    sweep(native_db, policy, now=utcnow() + timedelta(seconds=policy.waiting_expiry_seconds + 5))
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(OperationKey)) == 0


def _from_address(native_url: str, address: str, forwarded: bool) -> httpx.Client:
    """A client at ``address``: its own connection's, or (``forwarded``) named by a front's
    X-Forwarded-For beside the service passkey, as the front sends for its clients."""
    if forwarded:
        headers = {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, HEADER_FORWARDED_FOR: address}
        return httpx.Client(base_url=native_url, headers=headers, timeout=30)
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=native_url, transport=transport, timeout=30)


@pytest.mark.raised_limits(
    "chat_async", why="two keyed submits in a row from one address; the key's owner is under test"
)
@pytest.mark.parametrize("forwarded", [False, True], ids=["direct", "through-a-front"])
def test_an_anonymous_key_belongs_to_the_address_that_submitted_under_it(
    native_url, native_db, make_user, forwarded
):
    # Every keyless client is the anonymous user: a stranger who learnt another's key must
    # neither cancel that request by it nor retire the key before its owner uses it.
    worker = make_user("wk")
    with (
        _from_address(native_url, "127.0.0.2", forwarded) as owner,
        _from_address(native_url, "127.0.0.3", forwarded) as stranger,
    ):
        chat_pop(owner, worker.api_key)
        queued = _keyed(owner, ANONYMOUS_API_KEY, "op-1", chat_body()).json()
        assert _cancel_by_key(stranger, ANONYMOUS_API_KEY, "op-1").status_code == 404
        assert not _cancelled(native_db, queued["id"])
        assert _cancel_by_key(stranger, ANONYMOUS_API_KEY, "op-2").status_code == 404
        mine = _keyed(owner, ANONYMOUS_API_KEY, "op-2", chat_body("another"))
        assert mine.status_code == 202, mine.text
        # its owner's cancel by the key still finds it, and its replay still answers
        again = _keyed(owner, ANONYMOUS_API_KEY, "op-1", chat_body())
        assert (again.status_code, again.json()["id"]) == (200, queued["id"])
        assert _cancel_by_key(owner, ANONYMOUS_API_KEY, "op-1").status_code == 200
        assert _cancelled(native_db, queued["id"])
