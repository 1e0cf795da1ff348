"""Operation keys (X-Operation-Key, scoped to the user): the same key and body return the
existing request with 200 and charge nothing again; another body is 422; concurrent duplicates
never create a second row."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import func, select

from generated.chat.names import PARAM_MODELS
from generated.routes import HEADER_X_OPERATION_KEY
from runtime.native.db.tables import OperationKey, WaitingPrompt
from tests.integration.chat_flow import MODEL, chat_async, chat_body, chat_pop
from tests.integration.native_flow import ledger

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
