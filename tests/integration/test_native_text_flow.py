"""Full text flows against the live native API on the embedded Postgres and Redis."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from runtime.native.accounts.keys import ledger_balance
from runtime.native.accounts.kudos import context_multiplier, money
from runtime.native.queue.policy import Policy
from runtime.native.queue.sweep import sweep, utcnow
from tests.integration.native_flow import ledger, pop, status, submit, submit_text

pytestmark = pytest.mark.integration


def test_async_pop_submit_status_with_reward_and_charge_in_the_ledger(
    native_client, native_db, make_user
):
    requester = make_user("requester", kudos=100)
    owner = make_user("worker-owner")
    request_id = submit_text(native_client, requester.api_key, max_length=80)
    job = pop(native_client, owner.api_key)
    assert job["id"]
    assert job["payload"]["prompt"] == "Once upon a time"
    assert job["payload"]["n"] == 1
    assert job["model"] == "test-model-7B"
    reply = "x" * 200  # 50 tokens by upstream's count
    response = submit(native_client, owner.api_key, job["id"], reply, seed=42)
    assert response.status_code == 200, response.text
    # test-model-7B is not in the model reference, so (as upstream) the untrusted worker earns
    # the context multiplier of the prompt's token count (16 characters: the floor of 20).
    expected = money(context_multiplier(20))
    assert Decimal(str(response.json()["reward"])) == expected

    done = status(native_client, request_id)
    assert done["done"] is True
    assert done["finished"] == 1
    assert done["waiting"] == 0
    assert done["generations"][0]["text"] == reply
    assert done["generations"][0]["seed"] == 42
    assert ledger(native_db, owner.id) == [("reward", expected)]
    assert ledger(native_db, requester.id) == [
        ("grant", Decimal("100.00")),
        ("horde_tax", Decimal("-1.00")),
        ("charge", -expected),
    ]
    user = native_client.get(f"/users/{requester.id}").json()
    with native_db() as session:
        assert Decimal(str(user["kudos"])) == Decimal(str(ledger_balance(session, requester.id)))


def test_cancel_returns_the_status_and_takes_the_request_off_the_queue(native_client, make_user):
    requester = make_user("requester", kudos=10)
    owner = make_user("owner")
    request_id = submit_text(native_client, requester.api_key)
    cancelled = native_client.delete(f"/generate/text/status/{request_id}")
    assert cancelled.status_code == 200
    assert cancelled.json()["done"] is True
    assert cancelled.json()["waiting"] == 0
    assert pop(native_client, owner.api_key)["id"] is None


def test_a_job_past_its_ttl_is_aborted_and_handed_out_again(native_client, native_db, make_user):
    requester = make_user("requester", kudos=10)
    owner = make_user("owner")
    request_id = submit_text(native_client, requester.api_key)
    first = pop(native_client, owner.api_key)
    ttl = first["ttl"]
    report = sweep(native_db, Policy(), now=utcnow() + timedelta(seconds=ttl + 1))
    assert report.aborted == 1
    assert status(native_client, request_id)["restarted"] == 1
    second = pop(native_client, owner.api_key)
    assert second["id"] not in (None, first["id"])
    late = submit(native_client, owner.api_key, first["id"])
    assert late.status_code == 400
    assert late.json()["rc"] == "AbortedGen"
    assert submit(native_client, owner.api_key, second["id"]).status_code == 200


def test_more_than_two_faulted_generations_fault_the_request(native_client, make_user):
    requester = make_user("requester", kudos=10)
    owner = make_user("owner")
    request_id = submit_text(native_client, requester.api_key)
    for attempt in range(3):
        job = pop(native_client, owner.api_key)
        assert job["id"], f"attempt {attempt} found no job"
        faulted = submit(native_client, owner.api_key, job["id"], state="faulted")
        assert faulted.json() == {"reward": 0}
    final = status(native_client, request_id)
    assert final["faulted"] is True
    assert final["done"] is True
    assert pop(native_client, owner.api_key)["id"] is None


@pytest.mark.raised_limits(
    "text_async",
    why="21 submits in a row from one address and key, each popped and aborted",
)
def test_more_than_twenty_aborts_in_an_hour_put_the_worker_in_maintenance(
    native_client, native_db, make_user
):
    requester = make_user("requester", kudos=100, concurrency=100)
    owner = make_user("owner")
    for _ in range(21):
        submit_text(native_client, requester.api_key)
        assert pop(native_client, owner.api_key)["id"]
    sweep(native_db, Policy(), now=utcnow() + timedelta(seconds=151))
    refused = native_client.post(
        "/generate/text/pop",
        headers={"apikey": owner.api_key},
        json={"name": "worker-1", "models": ["test-model-7B"]},
    )
    assert refused.status_code == 403
    assert refused.json()["rc"] == "WorkerMaintenance"


def test_a_resubmit_is_refused_and_paid_once(native_client, native_db, make_user):
    requester = make_user("requester", kudos=10)
    owner = make_user("owner")
    submit_text(native_client, requester.api_key)
    job = pop(native_client, owner.api_key)
    assert submit(native_client, owner.api_key, job["id"]).status_code == 200
    again = submit(native_client, owner.api_key, job["id"])
    assert again.status_code == 400
    assert again.json()["rc"] == "DuplicateGen"
    assert [reason for reason, _ in ledger(native_db, owner.id)] == ["reward"]


def test_worker_credentials_are_checked(native_client, make_user):
    requester = make_user("requester", kudos=10)
    owner, other = make_user("owner"), make_user("other")
    submit_text(native_client, requester.api_key)
    anon = native_client.post(
        "/generate/text/pop", headers={"apikey": "0000000000"}, json={"name": "anon-worker"}
    )
    assert anon.status_code == 403
    assert anon.json()["rc"] == "AnonForbiddenWorker"
    job = pop(native_client, owner.api_key)
    stolen = submit(native_client, other.api_key, job["id"])
    assert stolen.status_code == 403
    assert stolen.json()["rc"] == "WrongCredentials"
    taken_name = native_client.post(
        "/generate/text/pop", headers={"apikey": other.api_key}, json={"name": "worker-1"}
    )
    assert taken_name.status_code == 403
    assert taken_name.json()["rc"] == "WrongCredentials"
    unknown = submit(native_client, owner.api_key, "00000000-0000-0000-0000-000000000000")
    assert unknown.status_code == 404
    assert unknown.json()["rc"] == "InvalidJobID"


def test_large_requests_hold_kudos_upfront_and_release_them(native_client, native_db, make_user):
    poor = make_user("poor", kudos=1)
    refused = native_client.post(
        "/generate/text/async",
        headers={"apikey": poor.api_key},
        json={"prompt": "long", "params": {"max_length": 1024}},
    )
    assert refused.status_code == 403
    assert refused.json()["rc"] == "KudosUpfront"
    rich = make_user("rich", kudos=1000)
    request_id = submit_text(native_client, rich.api_key, max_length=1024)
    native_client.delete(f"/generate/text/status/{request_id}")
    reasons = [reason for reason, _ in ledger(native_db, rich.id)]
    assert reasons == ["grant", "horde_tax", "upfront_hold", "upfront_release"]
    with native_db() as session:
        assert ledger_balance(session, rich.id) == 999.0


def test_concurrency_limit_refuses_with_too_many_prompts(native_client, make_user):
    user = make_user("busy", kudos=10, concurrency=2)
    submit_text(native_client, user.api_key, n=2)
    refused = native_client.post(
        "/generate/text/async", headers={"apikey": user.api_key}, json={"prompt": "one more"}
    )
    assert refused.status_code == 429
    assert refused.json()["rc"] == "TooManyPrompts"


def test_dry_run_quotes_without_queueing(native_client, make_user):
    user = make_user("quoter", kudos=10)
    quote = native_client.post(
        "/generate/text/async",
        headers={"apikey": user.api_key},
        json={"prompt": "hi", "dry_run": True},
    )
    assert quote.status_code == 200
    assert quote.json()["kudos"] > 0
    assert "id" not in quote.json()
    assert pop(native_client, make_user("owner").api_key)["id"] is None
