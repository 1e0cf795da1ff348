"""A text submit's payment (one statement, the database function horde_pay):
the request finishes with its last job, its upfront hold is released then and not before
(also when its last two jobs are submitted at once), and a worker serving its own owner's
request is paid and charged in order."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import select

from generated.pricing import HORDE_TAX, SELF_SERVING_REWARD
from runtime.native.accounts.keys import ledger_balance
from runtime.native.db.tables import Worker, WorkerPerformance
from tests.conftest import MadeUser
from tests.integration.native_flow import ledger, pop, status, submit, submit_text

pytestmark = pytest.mark.integration


def test_the_hold_is_released_when_the_last_job_lands(native_client, native_db, make_user):
    rich = make_user("rich", kudos=1000)
    owner = make_user("owner")
    request_id = submit_text(native_client, rich.api_key, max_length=1024, n=2)
    first = pop(native_client, owner.api_key, max_length=1024)
    second = pop(native_client, owner.api_key, name="worker-2", max_length=1024)
    assert submit(native_client, owner.api_key, first["id"]).status_code == 200
    reasons = [reason for reason, _ in ledger(native_db, rich.id)]
    assert reasons == ["grant", "horde_tax", "upfront_hold", "charge"]
    assert status(native_client, request_id)["done"] is False
    assert submit(native_client, owner.api_key, second["id"]).status_code == 200
    reasons = [reason for reason, _ in ledger(native_db, rich.id)]
    assert reasons == ["grant", "horde_tax", "upfront_hold", "charge", "charge", "upfront_release"]
    done = status(native_client, request_id)
    assert done["done"] is True
    assert done["finished"] == 2
    with native_db() as session:
        assert ledger_balance(session, rich.id) == float(
            sum(delta for _, delta in ledger(native_db, rich.id))
        )
    user = native_client.get(f"/users/{rich.id}").json()
    assert Decimal(str(user["kudos"])) == sum(delta for _, delta in ledger(native_db, rich.id))


def test_a_worker_serving_its_owner_s_request_earns_and_costs_nothing(
    native_client, native_db, make_user
):
    # Upstream pays the owner and charges it the same; here a self-serving job moves no
    # kudos at all (spec/pricing.yaml economy, tests/integration/test_kudos_farming.py).
    both = make_user("both", kudos=100)
    submit_text(native_client, both.api_key)
    before = ledger(native_db, both.id)
    job = pop(native_client, both.api_key)
    paid = submit(native_client, both.api_key, job["id"], "x" * 200)
    assert paid.status_code == 200, paid.text
    assert Decimal(str(paid.json()["reward"])) == SELF_SERVING_REWARD
    rows = ledger(native_db, both.id)
    assert sum(delta for _, delta in rows[len(before) :]) == 0
    user = native_client.get(f"/users/{both.id}").json()
    assert Decimal(str(user["kudos"])) == sum(delta for _, delta in rows) == 100 - HORDE_TAX
    again = submit(native_client, both.api_key, job["id"], "x" * 200)
    assert again.status_code == 400
    assert again.json()["rc"] == "DuplicateGen"
    assert ledger(native_db, both.id) == rows


def test_the_worker_s_counters_and_speed_follow_its_submits(native_client, native_db, make_user):
    requester = make_user("requester", kudos=1000)
    owner = make_user("owner")
    submit_text(native_client, requester.api_key, n=3)
    rewards = []
    for _ in range(3):
        job = pop(native_client, owner.api_key)
        landed = submit(native_client, owner.api_key, job["id"], "x" * 200)
        assert landed.status_code == 200, landed.text
        rewards.append(Decimal(str(landed.json()["reward"])))
    with native_db() as session:
        worker = session.scalars(select(Worker)).one()
        samples = session.scalars(select(WorkerPerformance.performance)).all()
    assert worker.fulfilments == 3
    assert worker.contributions == 150  # 50 tokens each
    assert worker.kudos == sum(rewards)
    assert len(samples) == 3
    assert worker.speed == pytest.approx(sum(samples) / 3)


def test_two_submits_at_once_end_their_request_once(native_client, native_db, make_user):
    """The last two jobs of a request, submitted at the same moment by two owners' workers:
    whichever pays second counts the other's job as landed (its count runs after the
    request's row lock, in a snapshot of its own: ``horde_pay``), so every request ends,
    and its hold (a request of this size has one) is released and credited once. The
    results are censored: nothing is charged, so the requester's row, which a charge locks,
    does not order the two payments; only the request's lock does."""
    rich = make_user("rich", kudos=5000)
    owners = [make_user("owner-1"), make_user("owner-2")]
    rounds = 6
    for _ in range(rounds):
        request_id = submit_text(native_client, rich.api_key, max_length=1024, n=2)
        jobs = [
            pop(native_client, owner.api_key, name=f"worker-{i}", max_length=1024)
            for i, owner in enumerate(owners)
        ]
        start = threading.Barrier(2)

        def send(owner: MadeUser, job: dict[str, Any], start: threading.Barrier = start) -> int:
            start.wait(5)
            return submit(native_client, owner.api_key, job["id"], state="censored").status_code

        with ThreadPoolExecutor(2) as pool:
            codes = list(pool.map(send, owners, jobs))
        assert codes == [200, 200]
        done = status(native_client, request_id)
        assert done["done"] is True, done
        assert done["finished"] == 2
        time.sleep(0.5)  # the shipped text_async limit: 2 a second per client
    reasons = [reason for reason, _ in ledger(native_db, rich.id)]
    assert reasons.count("upfront_release") == rounds
    assert reasons.count("charge") == 0
    user = native_client.get(f"/users/{rich.id}").json()
    assert Decimal(str(user["kudos"])) == sum(delta for _, delta in ledger(native_db, rich.id))
