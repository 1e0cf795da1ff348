"""The rules no worker can farm (spec/pricing.yaml economy), on ``kudos.earned``: who served
whom, how fast, and a censored reply, against upstream's reward (``request_reward``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

import pytest

from generated.pricing import (
    CENSORED_UNTRUSTED_CAP,
    SELF_SERVING_REWARD,
    UNTRUSTED_BILLION_TOKENS_PER_SECOND,
)
from runtime.contract.pricing import speed_billions
from runtime.native.accounts import kudos
from runtime.native.accounts.keys import ANONYMOUS_USER_ID

MAGNUM = "anthracite-org/magnum-v4-123b"  # 123B in spec/models/text.yaml
BRIDGE = "horde-chat-worker:1.0:https://example.invalid"  # a validated backend


@dataclass(frozen=True)
class Request:
    prompt: str = "p" * 1200
    max_length: int = 512
    max_context_length: int = 4096


WP = Request()
HONEST = kudos.Serving(
    requester_id=7,
    owner_id=8,
    trusted=False,
    request_address="198.51.100.1",
    worker_address="192.0.2.1",
    seconds=20.0,
)
"""A registered requester elsewhere; 250 tokens in 20 s is 12.5 tokens/s (123B: 32.5)."""


def earned(tokens: int, serving: kudos.Serving) -> Decimal:
    return kudos.earned(WP, tokens, MAGNUM, bridge_agent=BRIDGE, serving=serving)


def upstream(tokens: int, trusted: bool = False) -> Decimal:
    return kudos.request_reward(WP, tokens, MAGNUM, trusted=trusted, bridge_agent=BRIDGE)


def test_an_honest_worker_earns_upstreams_reward() -> None:
    assert earned(250, HONEST) == upstream(250) > 300


@pytest.mark.parametrize(
    "serving",
    [
        replace(HONEST, requester_id=8),
        replace(HONEST, requester_id=ANONYMOUS_USER_ID, worker_address="198.51.100.1"),
        replace(
            HONEST,
            requester_id=ANONYMOUS_USER_ID,
            request_address="a" * 64,
            worker_address="a" * 70,  # a request row keeps 64 characters of its address
        ),
    ],
    ids=["its-owner", "anonymous-from-its-address", "anonymous-from-its-long-address"],
)
def test_a_self_serving_job_earns_nothing(serving: kudos.Serving) -> None:
    assert earned(250, serving) == SELF_SERVING_REWARD == 0


@pytest.mark.parametrize(
    "serving",
    [
        replace(HONEST, requester_id=ANONYMOUS_USER_ID),
        replace(HONEST, worker_address="198.51.100.1"),  # a registered requester
        replace(HONEST, requester_id=ANONYMOUS_USER_ID, worker_address=None),
    ],
    ids=["anonymous-elsewhere", "registered-from-its-address", "address-unknown"],
)
def test_other_requests_are_paid(serving: kudos.Serving) -> None:
    assert earned(250, serving) == upstream(250)


def test_an_instant_short_reply_is_paid_as_a_tiny_model() -> None:
    """The probe's reply: 20 tokens (the floor) in 10 ms is 2,000 tokens/s, paid as a model
    of 4000 / 2000 = 2 billions, not 123."""
    instant = replace(HONEST, seconds=0.01)
    assert speed_billions(20, 0.01) == pytest.approx(2.0)
    assert earned(20, instant) * 50 < upstream(20)
    assert earned(20, instant) == kudos.generation_kudos(
        20, MAGNUM, 300, trusted=False, validated=True, billions_cap=2.0
    )


def test_the_claimed_model_is_paid_up_to_the_speed_it_allows() -> None:
    limit_seconds = 250 * 123 / UNTRUSTED_BILLION_TOKENS_PER_SECOND  # 32.5 tokens/s
    assert earned(250, replace(HONEST, seconds=limit_seconds)) == upstream(250)
    assert earned(250, replace(HONEST, seconds=limit_seconds / 2)) < upstream(250)
    assert earned(250, replace(HONEST, seconds=0)) == 0


def test_a_trusted_worker_is_paid_as_it_claims_however_fast() -> None:
    assert earned(250, replace(HONEST, trusted=True, seconds=0.01)) == upstream(250, True)


def test_a_censored_reply_pays_an_untrusted_worker_the_tax_at_most() -> None:
    censored = replace(HONEST, censored=True)
    assert earned(250, censored) == CENSORED_UNTRUSTED_CAP
    assert earned(250, replace(censored, trusted=True)) == upstream(250, True)


@pytest.mark.parametrize("jobs", range(1, 21))  # a text request's n: 1 to 20
def test_an_n_job_requests_censored_replies_together_earn_the_cap_at_most(jobs: int) -> None:
    each = earned(250, replace(HONEST, censored=True, jobs=jobs))
    assert 0 < each * jobs <= CENSORED_UNTRUSTED_CAP
    assert each == kudos.censored_cap(jobs)


def test_a_generation_faster_than_its_claimed_model_is_a_suspicion() -> None:
    assert kudos.unreasonably_fast(250, MAGNUM, HONEST) is None
    reason = kudos.unreasonably_fast(20, MAGNUM, replace(HONEST, seconds=0.01))
    assert reason == "Generation unreasonably fast (2000.0 tokens/s for a 123B model)"
    assert kudos.unreasonably_fast(20, MAGNUM, replace(HONEST, trusted=True, seconds=0)) is None
    assert kudos.unreasonably_fast(20, "mint-99999999B", replace(HONEST, seconds=0)) is None
