"""schemathesis from generated/openapi/native.yaml against the live native API.

A fixed budget of examples per operation (derandomized, so a run is repeatable): no 5xx,
status codes, content types and bodies conform to the document. Every operation the app
serves (``VIEWS``) is fuzzed, the chat routes included.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance

from generated.signals import POP_MAX_WAIT_SECONDS
from runtime.native.api.app import VIEWS

pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.integration,
    pytest.mark.raised_limits(
        "text_async",
        "chat_async",
        "models",
        "workers",
        "user",
        "users",
        why=(
            "schemathesis sends 40 examples per operation as fast as it can from one address:"
            " the submits' 2 a second and the public reads' 90 a minute per address would"
            " answer 429 where the check expects the route's own refusal (the limits"
            " themselves are tested in tests/integration/test_native_rate_limits.py)"
        ),
    ),
]

DOCUMENT = Path(__file__).resolve().parents[2] / "generated" / "openapi" / "native.yaml"
EXAMPLES_PER_OPERATION = 40

schema = schemathesis.openapi.from_path(DOCUMENT).include(
    operation_id=sorted(VIEWS)  # what this service serves so far
)


@pytest.fixture(scope="module")
def fuzz_user(native_service, native_url):
    """One user for the whole module (the database is not reset between examples)."""
    from runtime.native.accounts.keys import create_user
    from runtime.stores.database import transaction
    from tests.conftest import reset_database

    reset_database(native_service.context.sessions)
    with transaction(native_service.context.sessions) as session:
        _user, api_key = create_user(session, "fuzzer", kudos=10**9, concurrency=10**6)
    return api_key


def _in_range_wait(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 < value <= POP_MAX_WAIT_SECONDS


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_native_api_conforms(case, native_url, fuzz_user):
    base_url = native_url.removesuffix("/api/v2")
    # Positive examples act as a real user so they reach the queue; negative ones keep the
    # generated (possibly invalid) key so its refusal is checked too.
    positive = case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE
    has_key = bool(case.headers) and "apikey" in case.headers
    headers = {"apikey": fuzz_user} if positive and has_key else None
    # A pop may long-poll up to POP_MAX_WAIT_SECONDS for work that never comes here (its
    # waiting is proven in tests/integration/test_native_long_poll.py): an in-range wait is
    # made 0 so each example answers at once; an out-of-range one is sent for its refusal.
    if isinstance(case.body, dict) and _in_range_wait(case.body.get("wait")):
        case.body["wait"] = 0
    # A schema-valid body may still break a documented business rule (an empty prompt is
    # MissingPrompt, max_context_length below max_length is TokenOverflow): a 400 there is
    # the contract, so positive-data acceptance is not checked; everything else is.
    case.call_and_validate(
        base_url=base_url, headers=headers, excluded_checks=[positive_data_acceptance]
    )
