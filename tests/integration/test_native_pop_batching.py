"""What one pop takes and which model it names (the pop is one SQL statement)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.native_flow import pop

pytestmark = pytest.mark.integration


def _queue(client: httpx.Client, api_key: str, **body: Any) -> str:
    params = {"max_length": 80, **body.pop("params", {})}
    response = client.post(
        "/generate/text/async",
        headers={"apikey": api_key},
        json={"prompt": "Once upon a time", "params": params, **body},
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_a_pop_takes_up_to_its_amount_of_a_request_s_jobs(native_client, make_user):
    requester = make_user("requester", kudos=1000)
    owner = make_user("owner")
    _queue(native_client, requester.api_key, params={"n": 3})
    first = pop(native_client, owner.api_key, amount=2)
    assert len(first["ids"]) == 2
    assert first["id"] == first["ids"][0]
    assert first["payload"]["n"] == 2
    rest = pop(native_client, owner.api_key, amount=5)
    assert len(rest["ids"]) == 1
    assert rest["payload"]["n"] == 1
    assert not set(rest["ids"]) & set(first["ids"])
    assert pop(native_client, owner.api_key, amount=5)["id"] is None


def test_disable_batching_hands_out_one_job_a_pop(native_client, make_user):
    requester = make_user("requester", kudos=1000)
    owner = make_user("owner")
    _queue(native_client, requester.api_key, params={"n": 2, "disable_batching": True})
    job = pop(native_client, owner.api_key, amount=2)
    assert len(job["ids"]) == 1
    assert job["payload"]["n"] == 1


def test_a_job_names_the_worker_s_first_model_the_request_accepts(native_client, make_user):
    requester = make_user("requester", kudos=1000)
    owner = make_user("owner")
    models = ["first-model-7B", "second-model-7B"]
    _queue(native_client, requester.api_key, models=["second-model-7B"])
    assert pop(native_client, owner.api_key, models=models)["model"] == "second-model-7B"
    _queue(native_client, requester.api_key)  # any model
    assert pop(native_client, owner.api_key, models=models)["model"] == "first-model-7B"
