"""Through the front: x_horde.kudos is what the request cost, the horde tax included (the
native status's number), and a body with a non-finite number is refused before it is sent."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest

from runtime.front.server import FrontService
from tests.conftest import MadeUser
from tests.integration.native_flow import ledger
from tests.support.chat_worker import ChatTestWorker

pytestmark = pytest.mark.e2e

MODEL = "kudos-model"
MESSAGES = [{"role": "user", "content": "Say hello"}]


def completion(front: FrontService, api_key: str, raw: str) -> httpx.Response:
    return httpx.post(
        f"{front.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
        content=raw,
        timeout=60,
    )


def test_x_horde_kudos_is_what_the_request_cost_tax_included(
    front: FrontService, native_url: str, native_client: httpx.Client, native_db: Any, make_user
) -> None:
    requester: MadeUser = make_user("alice", kudos=1000)
    owner: MadeUser = make_user("bob")
    with ChatTestWorker(native_url, owner.api_key, model=MODEL):
        response = httpx.post(
            f"{front.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {requester.api_key}"},
            json={"model": MODEL, "messages": MESSAGES},
            timeout=60,
        )
    assert response.status_code == 200, response.text
    x_horde = response.json()["x_horde"]
    status = native_client.get(f"/generate/chat/status/{x_horde['request_id']}").json()
    debits = [-delta for _, delta in ledger(native_db, requester.id) if delta < 0]
    assert sorted(r for r, d in ledger(native_db, requester.id) if d < 0) == ["charge", "horde_tax"]
    assert Decimal(str(x_horde["kudos"])) == sum(debits, Decimal(0))
    assert x_horde["kudos"] == status["kudos"]
    assert x_horde["kudos"] > status["generations"][0]["kudos"]  # the tax is not left out


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ('{"model": "m", "messages": MESSAGES, "temperature": NaN}', None),
        ('{"model": "m", "messages": MESSAGES, "horde": {"max_kudos": Infinity}}', None),
        ('{"model": "m", "messages": MESSAGES, "horde": {"max_kudos": 1e999}}', "horde.max_kudos"),
    ],
    ids=["nan-temperature", "infinity-max-kudos", "overflowing-max-kudos"],
)
def test_a_non_finite_number_is_refused_by_the_front(
    front: FrontService, make_user, body: str, param: str | None
) -> None:
    requester: MadeUser = make_user("alice", kudos=10)
    raw = body.replace("MESSAGES", '[{"role": "user", "content": "Hi"}]')
    response = completion(front, requester.api_key, raw)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert "finite" in error["message"]
