"""Concurrency of the queue and the claim, bad input, and the migrations matching the models."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from alembic import command

from runtime.native.db.migrate import alembic_config
from tests.integration.native_flow import ledger, pop, submit, submit_text

pytestmark = pytest.mark.integration


@pytest.mark.raised_limits(
    "text_async",
    why="40 requests queued in a row from one address and key before the pops race",
)
def test_concurrent_pops_never_hand_out_the_same_job(native_client, native_url, make_user):
    requester = make_user("requester", kudos=100, concurrency=100)
    owners = [make_user(f"owner-{i}") for i in range(8)]
    for _ in range(40):
        submit_text(native_client, requester.api_key)

    def drain(index: int) -> list[str]:
        got = []
        with httpx.Client(base_url=native_url, timeout=30) as client:
            while (job := pop(client, owners[index].api_key, name=f"w{index}"))["id"]:
                got.extend(job["ids"])
        return got

    with ThreadPoolExecutor(8) as pool:
        handed_out = [job for jobs in pool.map(drain, range(8)) for job in jobs]
    assert len(handed_out) == 40
    assert len(set(handed_out)) == 40


def test_concurrent_resubmits_pay_once(native_client, native_url, native_db, make_user):
    requester = make_user("requester", kudos=10)
    owner = make_user("owner")
    submit_text(native_client, requester.api_key)
    job = pop(native_client, owner.api_key)

    def send(_: int) -> int:
        with httpx.Client(base_url=native_url, timeout=30) as client:
            return submit(client, owner.api_key, job["id"]).status_code

    with ThreadPoolExecutor(6) as pool:
        codes = sorted(pool.map(send, range(6)))
    assert codes == [200, 400, 400, 400, 400, 400]
    assert [reason for reason, _ in ledger(native_db, owner.id)] == ["reward"]


BAD_BODIES = [
    (b"{not json", "InvalidJSON"),
    (b"[1, 2]", "InvalidJSON"),
    (b'{"prompt": 12}', "InvalidPayload"),
    (b'{"params": {}}', "InvalidPayload"),
    (b'{"prompt": "a\\u0000b"}', "NulByteInPayload"),
    (b'{"prompt": "a", "params": {"max_length": 1e400}}', "InvalidPayload"),
    (b'{"prompt": "a", "params": {"max_length": ' + b"9" * 5000 + b"}}", "InvalidJSON"),
    (b'{"prompt": "a", "params": {"max_length": 999999999999999999999999}}', "InvalidPayload"),
    (b'{"prompt": "a", "params": {"temperature": NaN}}', "InvalidJSON"),
    (b'{"prompt": ""}', "MissingPrompt"),
    (b'{"prompt": "a", "params": {"max_length": 512, "max_context_length": 100}}', "TokenOverflow"),
    (b"\xff\xfe", "InvalidJSON"),
]


@pytest.mark.parametrize(("raw", "code"), BAD_BODIES)
def test_bad_request_bodies_get_a_clear_4xx(native_client, make_user, raw, code):
    user = make_user("fuzzy", kudos=10)
    response = native_client.post(
        "/generate/text/async",
        headers={"apikey": user.api_key, "content-type": "application/json"},
        content=raw,
    )
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["rc"] == code


def test_bad_worker_input_gets_a_clear_4xx(native_client, make_user):
    owner = make_user("owner")
    key = {"apikey": owner.api_key}
    cases = [
        ("/generate/text/pop", {"models": ["m"]}, "InvalidPayload"),
        ("/generate/text/submit", {"id": "not-a-uuid", "generation": "x"}, "InvalidJobID"),
        ("/generate/text/submit", {"id": "x", "generation": "x", "seed": 2**70}, "InvalidPayload"),
        ("/generate/text/submit", {"id": "x", "state": "bogus"}, "InvalidPayload"),
    ]
    for path, body, code in cases:
        response = native_client.post(path, headers=key, json=body)
        assert 400 <= response.status_code < 500, (body, response.text)
        assert response.json()["rc"] == code, (body, response.text)
    huge = native_client.post(
        "/generate/text/pop", headers=key, json={"name": "w", "max_length": 10**30}
    )
    assert huge.status_code == 200  # a declaration above any request is stored as the maximum
    assert native_client.get("/workers").json()[0]["max_length"] == 2**31 - 1
    assert native_client.get("/users/99999999999999999999").json()["rc"] == "UserNotFound"
    assert native_client.get("/workers/nope").json()["rc"] == "WorkerNotFound"
    unknown_key = native_client.post(
        "/generate/text/async", headers={"apikey": "wrong"}, json={"prompt": "a"}
    )
    assert unknown_key.status_code == 401
    assert unknown_key.json()["rc"] == "InvalidAPIKey"


def test_migrations_match_the_models(horde_stores):
    command.check(alembic_config(horde_stores.database_url))
