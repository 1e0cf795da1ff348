"""Kudos through the live native API equal upstream AI Horde's formula to the cent.

The expected numbers are computed here from upstream's published code
(horde/classes/kobold/processing_generation.py get_gen_kudos for the reward,
waiting_prompt.py calculate_kudos for the quote), not from our pricing function. Model sizes
are the ones spec/models/text.yaml lists; a size in a model's name is never read.
"""

from __future__ import annotations

import math
import uuid
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import httpx
import pytest

from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY
from generated.wire import ANONYMOUS_API_KEY
from runtime.native.db.tables import WaitingPrompt
from tests.conftest import SERVICE_PASSKEY
from tests.integration.chat_flow import chat_async, chat_body, chat_pop, submit_reply
from tests.integration.native_flow import ledger, pop, submit, worked_for

pytestmark = pytest.mark.integration

KNOWN = "meta-llama/Meta-Llama-3-70B-Instruct"
KNOWN_BILLIONS = 70  # its size in spec/models/text.yaml
MINT = "mint-99999999B"
VALIDATED = "AI Horde Worker:24:https://github.com/Haidra-Org/AI-Horde-Worker"
UNVALIDATED = "my-own-bridge:1:https://example.invalid"


# Upstream's formula, transcribed.


def upstream_things(text: str, max_length: int) -> int:
    """get_things_count: ceil(len / 4), at least 20, at most the request's max_length."""
    return min(max(math.ceil(len(text) / 4), 20), max_length)


def upstream_multiplier(context: float) -> float:
    multiplier = 1.2 + (2.2 ** (math.log2(context / 1024)))
    return min(30, max(0.1, multiplier))


def upstream_reward(
    tokens: int, billions: float | None, context: int, *, trusted: bool, validated: bool
) -> float:
    multiplier = upstream_multiplier(context)
    if billions is None:
        if not trusted:
            return multiplier
        return tokens * multiplier * (2.7 / 100)
    parameter_bonus = (max(billions, 13) / 13) ** 0.20
    kudos = tokens * parameter_bonus * billions / 125
    if not validated:
        kudos *= 0.3
    return round(kudos * multiplier, 2)


def upstream_quote(max_length: int, max_context_length: int, billions: float | str | None) -> float:
    multiplier = upstream_multiplier(max_context_length)
    if billions == "no model":
        return round(max_length * 13 * multiplier / 100, 2)
    if billions is None:
        return max_length * (2.7 / 100) * multiplier
    assert isinstance(billions, (int, float))
    parameter_bonus = (max(billions, 13) / 13) ** 0.20
    return round(max_length * parameter_bonus * billions * multiplier / 100, 2)


def cents(value: float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


# Driving the API.


def text_request(client: httpx.Client, api_key: str, prompt: str, **fields: Any) -> httpx.Response:
    params = {"max_length": 512, "max_context_length": 4096, **fields.pop("params", {})}
    body = {"prompt": prompt, "params": params, **fields}
    return client.post("/generate/text/async", headers={"apikey": api_key}, json=body)


SECONDS = 10.0
"""How long each worker here takes for its reply (``worked_for``): 250 tokens in 10 s is
25 tokens/s, what a 70B model allows an untrusted worker (57 tokens/s), so upstream's
reward is paid; the test doubles answer at once."""


def serve(
    client: httpx.Client,
    sessions: Any,
    worker_key: str,
    model: str,
    reply: str,
    bridge_agent: str,
) -> Decimal:
    job = pop(
        client,
        worker_key,
        name=f"w-{uuid.uuid4().hex[:8]}",
        models=[model],
        max_context_length=8192,
        bridge_agent=bridge_agent,
    )
    assert job["id"], job
    worked_for(sessions, job["id"], SECONDS)
    response = submit(client, worker_key, job["id"], reply)
    assert response.status_code == 200, response.text
    return Decimal(str(response.json()["reward"]))


REPLY = "y" * 1000  # 250 tokens by upstream's count


@pytest.mark.parametrize(
    ("prompt_chars", "context"),
    [(200, 50), (1200, 300), (2400, 512)],  # the last is capped at max_length, as upstream
    ids=["short-prompt", "medium-prompt", "prompt-over-max-length"],
)
def test_a_known_models_reward_is_upstreams_at_three_context_lengths(
    native_client, native_db, make_user, prompt_chars, context
):
    requester, owner = make_user("req", kudos=10_000), make_user("owner")
    prompt = "p" * prompt_chars
    assert text_request(native_client, requester.api_key, prompt, models=[KNOWN]).status_code == 202
    reward = serve(native_client, native_db, owner.api_key, KNOWN, REPLY, VALIDATED)
    assert upstream_things(prompt, 512) == context
    expected = cents(upstream_reward(250, KNOWN_BILLIONS, context, trusted=False, validated=True))
    assert reward == expected
    assert ledger(native_db, owner.id) == [("reward", expected)]
    assert ("charge", -expected) in ledger(native_db, requester.id)


@pytest.mark.parametrize(
    ("model", "billions", "trusted", "bridge_agent", "validated"),
    [
        (KNOWN, KNOWN_BILLIONS, False, UNVALIDATED, False),
        (KNOWN, KNOWN_BILLIONS, False, "", False),
        (KNOWN, KNOWN_BILLIONS, True, VALIDATED, True),
        (MINT, None, False, VALIDATED, True),
        (MINT, None, True, VALIDATED, True),
        ("koboldcpp/Meta-Llama-3-70B-Instruct.i1-Q4_K_M", KNOWN_BILLIONS, False, VALIDATED, True),
    ],
    ids=[
        "known-unvalidated-backend",
        "known-no-bridge-agent",
        "known-trusted",
        "unknown-untrusted",
        "unknown-trusted",
        "known-under-a-koboldcpp-quantised-name",
    ],
)
def test_rewards_for_unknown_models_and_unvalidated_backends_are_upstreams(
    native_client, native_db, make_user, model, billions, trusted, bridge_agent, validated
):
    requester, owner = make_user("req", kudos=10_000), make_user("owner", trusted=trusted)
    prompt = "p" * 1200
    assert text_request(native_client, requester.api_key, prompt, models=[model]).status_code == 202
    reward = serve(native_client, native_db, owner.api_key, model, REPLY, bridge_agent)
    expected = upstream_reward(250, billions, 300, trusted=trusted, validated=validated)
    assert reward == cents(expected)


def test_minting_by_naming_a_huge_model_earns_at_most_an_unknown_models_reward(
    native_client, native_db, make_user
):
    """A worker declaring ``mint-99999999B`` serving an anonymous request. The request comes
    through the front from another address: one from the worker's own address earns it
    nothing at all (tests/integration/test_kudos_farming.py)."""
    owner = make_user("minter")
    prompt = "p" * 4000
    body = {"max_length": 512, "max_context_length": 4096}
    elsewhere = {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, "X-Forwarded-For": "203.0.113.9"}
    response = native_client.post(
        "/generate/text/async",
        headers={"apikey": ANONYMOUS_API_KEY, **elsewhere},
        json={"prompt": prompt, "params": body, "models": [MINT]},
    )
    assert response.status_code == 202, response.text
    reward = serve(native_client, native_db, owner.api_key, MINT, "m" * 2048, VALIDATED)
    # an unknown model earns an untrusted worker the context multiplier alone
    assert reward == cents(upstream_multiplier(512))
    assert reward <= 30  # the multiplier's clamp: the most an unknown model ever earns it
    assert ledger(native_db, owner.id) == [("reward", reward)]


@pytest.mark.parametrize("max_context_length", [1024, 2048, 4096])
@pytest.mark.parametrize(
    ("models", "billions"),
    [([KNOWN], KNOWN_BILLIONS), ([MINT], None), ([], "no model")],
    ids=["known", "unknown", "no-model"],
)
def test_quotes_are_upstreams_per_job_plus_the_horde_tax(
    native_client, make_user, max_context_length, models, billions
):
    """The dry run's kudos: upstream's calculate_kudos per job, times n, plus the horde
    tax of 1, rounded (upstream's dry run also adds a per-generation burn of 1, which this
    horde does not charge: a request costs what its generations earn plus the tax, see
    docs/pricing.md)."""
    requester = make_user("req", kudos=10_000)
    for n in (1, 3):
        response = text_request(
            native_client,
            requester.api_key,
            "Once upon a time",
            params={"max_length": 400, "max_context_length": max_context_length, "n": n},
            models=models,
            dry_run=True,
        )
        assert response.status_code == 200, response.text
        per_job = cents(upstream_quote(400, max_context_length, billions))
        # rounded to whole kudos, as upstream's answer (its dry run: round(self.kudos))
        assert response.json()["kudos"] == round(per_job * n + 1)


def test_a_chat_generation_is_rewarded_by_the_same_formula(native_client, native_db, make_user):
    requester, owner = make_user("req", kudos=10_000), make_user("owner")
    chat_pop(native_client, owner.api_key, model=KNOWN, bridge_agent=UNVALIDATED)
    body = chat_body("Tell me a story. " * 20, model=KNOWN, max_tokens=400)
    response = chat_async(native_client, requester.api_key, body)
    assert response.status_code == 202, response.text
    job = chat_pop(native_client, owner.api_key, model=KNOWN, bridge_agent=UNVALIDATED)
    worked_for(native_db, job["id"], SECONDS)
    submitted = submit_reply(native_client, owner.api_key, job["id"], "z" * 600)
    assert submitted.status_code == 200, submitted.text
    with native_db() as session:
        wp = session.get(WaitingPrompt, uuid.UUID(response.json()["id"]))
        assert wp is not None
        context = upstream_things(wp.prompt, wp.max_length)
    expected = upstream_reward(150, KNOWN_BILLIONS, context, trusted=False, validated=False)
    assert Decimal(str(submitted.json()["reward"])) == cents(expected)


def test_validated_backends_keeps_a_request_from_unvalidated_workers(native_client, make_user):
    requester, owner = make_user("req", kudos=10_000), make_user("owner")
    response = text_request(native_client, requester.api_key, "Hi", validated_backends=True)
    assert response.status_code == 202, response.text
    body = {
        "name": "unvalidated",
        "models": ["m"],
        "max_length": 512,
        "max_context_length": 8192,
        "bridge_agent": UNVALIDATED,
    }
    skipped = native_client.post(
        "/generate/text/pop", headers={"apikey": owner.api_key}, json=body
    ).json()
    assert skipped["id"] is None
    assert skipped["skipped"] == {"bridge_version": 1}
    job = pop(
        native_client,
        owner.api_key,
        name="validated",
        models=["m"],
        max_context_length=8192,
        bridge_agent=VALIDATED,
    )
    assert job["id"]
    assert "validated_backends" not in job["payload"]


def test_a_request_without_validated_backends_is_served_by_any_backend(native_client, make_user):
    requester, owner = make_user("req", kudos=10_000), make_user("owner")
    assert text_request(native_client, requester.api_key, "Hi").status_code == 202
    job = pop(
        native_client,
        owner.api_key,
        name="any",
        models=["m"],
        max_context_length=8192,
        bridge_agent=UNVALIDATED,
    )
    assert job["id"]


def test_a_chat_request_with_validated_backends_waits_for_a_validated_worker(
    native_client, make_user
):
    requester, owner = make_user("req", kudos=10_000), make_user("owner")
    chat_pop(native_client, owner.api_key, name="unvalidated", bridge_agent=UNVALIDATED)
    response = chat_async(
        native_client, requester.api_key, chat_body(horde={"validated_backends": True})
    )
    assert response.status_code == 202, response.text
    refused = chat_pop(native_client, owner.api_key, name="unvalidated", bridge_agent=UNVALIDATED)
    assert refused["id"] is None
    served = chat_pop(native_client, owner.api_key, name="validated", bridge_agent=VALIDATED)
    assert served["id"]


@pytest.mark.parametrize(
    ("number", "code"),
    [
        ("NaN", "InvalidJSON"),
        ("Infinity", "InvalidJSON"),
        ("-Infinity", "InvalidJSON"),
        ("1e999", "InvalidPayload"),
    ],
)
def test_a_body_with_a_non_finite_number_is_refused(native_client, make_user, number, code):
    requester = make_user("req", kudos=100)
    raw = '{"prompt": "Hi", "params": {"max_length": 80, "top_k": 5, "rep_pen_slope": NUMBER}}'
    response = native_client.post(
        "/generate/text/async",
        headers={"apikey": requester.api_key, "Content-Type": "application/json"},
        content=raw.replace("NUMBER", number),
    )
    assert response.status_code == 400, response.text
    assert response.json()["rc"] == code


def test_an_overflowing_number_where_the_schema_has_no_maximum_is_refused(native_client, make_user):
    """horde.max_kudos has a minimum only: 1e999 (infinity once parsed) would pass the schema
    and could not be stored as JSON."""
    requester, owner = make_user("req", kudos=100), make_user("owner")
    chat_pop(native_client, owner.api_key)
    raw = '{"model": "chat-model-7B", "messages": [{"role": "user", "content": "Hi"}], '
    raw += '"horde": {"max_kudos": 1e999}}'
    response = native_client.post(
        "/generate/chat/async",
        headers={"apikey": requester.api_key, "Content-Type": "application/json"},
        content=raw,
    )
    assert response.status_code == 400, response.text
    assert response.json()["rc"] == "InvalidPayload"
    assert response.json()["param"] == "horde.max_kudos"
