"""A cancel that meets a worker's payment waits for it instead of deadlocking.

A payment (``horde_pay``), a fault and the sweep lock a job's row, then its request's; a
cancel locked the request, then its running jobs. A client's cancel and a worker's submit
of the same request at the same moment then each held the row the other waited for:
Postgres broke the deadlock after its deadlock_timeout (1 s) by aborting one of them, the
cancel answered 503 StoreUnavailable or the worker's submit did (the native stateful fuzz
met it in CI: a DELETE by operation key answered 503). A cancel now takes the running jobs
first, as the others do.

Each test holds a running job's row in a transaction of its own, as a payment's claim does,
starts the cancel, waits until it waits for that row, and then takes the request's lock as
the payment would next: it gets it at once, and the cancel goes on when it commits.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.db.tables import Generation, WaitingPrompt
from tests.integration.chat_flow import chat_async, chat_body, chat_pop
from tests.integration.native_flow import pop, submit_text
from tests.support.waiting import waiting_for_a_lock

pytestmark = pytest.mark.integration

LOCK_TIMEOUT = "10s"
"""How long the payment's stand-in waits for the request's lock: a deadlock is broken
after Postgres's deadlock_timeout (1 s), well before."""


def _cancel_beside_a_payment(
    client: httpx.Client, sessions: sessionmaker[Session], kind: str, request_id: str
) -> None:
    """Cancel (DELETE on the ``kind`` status route) while a transaction holds the request's
    running job as a payment's claim does; once the cancel waits, that transaction locks
    the request (the payment's next step) and commits. The cancel answers the ended
    status, and the job it reached still running is cancelled."""
    url = f"{str(client.base_url).rstrip('/')}/generate/{kind}/status/{request_id}"

    def cancel() -> httpx.Response:
        return httpx.delete(url, timeout=30)

    wp_id = uuid.UUID(request_id)
    answered: dict[str, Any] = {}
    with sessions() as payment:
        payment.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        payment.execute(  # the claim's row lock (it writes nothing the cancel reads)
            update(Generation).where(Generation.wp_id == wp_id).values(seed=Generation.seed)
        )
        thread = threading.Thread(target=lambda: answered.setdefault("response", cancel()))
        thread.start()
        deadline = time.monotonic() + 10
        while not waiting_for_a_lock(sessions):
            assert time.monotonic() < deadline, ("the cancel never waited for its job", answered)
            time.sleep(0.01)
        payment.execute(select(WaitingPrompt.id).where(WaitingPrompt.id == wp_id).with_for_update())
        payment.commit()
    thread.join(timeout=30)
    cancelled: httpx.Response = answered["response"]
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["done"] is True
    with sessions() as session:
        assert session.scalars(select(Generation)).one().cancelled


def test_a_text_cancel_waits_for_a_payment_of_its_job(native_client, native_db, make_user):
    requester, owner = make_user("requester", kudos=10), make_user("owner")
    request_id = submit_text(native_client, requester.api_key)
    assert pop(native_client, owner.api_key)["id"] is not None
    _cancel_beside_a_payment(native_client, native_db, "text", request_id)


def test_a_chat_cancel_waits_for_a_payment_of_its_job(native_client, native_db, make_user):
    requester, owner = make_user("requester", kudos=100), make_user("owner")
    chat_pop(native_client, owner.api_key)  # online, so the request is admitted
    queued = chat_async(native_client, requester.api_key, chat_body())
    assert queued.status_code == 202, queued.text
    assert chat_pop(native_client, owner.api_key)["id"] is not None
    _cancel_beside_a_payment(native_client, native_db, "chat", queued.json()["id"])
