"""schemathesis from generated/openapi/front.yaml against the live chat front.

The front runs over the live native API with an online test worker that answers every job,
so positive examples travel the whole way (submit, signal, reply) and negative ones are
refused in OpenAI's envelope. A fixed, derandomized budget per operation: no 5xx other
than the documented ones, and statuses, content types and bodies conform to the document.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance

from generated.rate_limits import RATE_LIMITS
from runtime.config import Settings
from runtime.native.queue.policy import Policy
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.support.chat_worker import ChatTestWorker
from tests.support.front import running_front
from tests.support.native import raised

pytestmark = [pytest.mark.fuzz, pytest.mark.integration]

DOCUMENT = Path(__file__).resolve().parents[2] / "generated" / "openapi" / "front.yaml"
EXAMPLES_PER_OPERATION = 30
MODEL = "fuzz-model"
PASSKEY = "fuzz-front-passkey"

schema = schemathesis.openapi.from_path(DOCUMENT)


@pytest.fixture(scope="module")
def fuzz_front(horde_stores: EmbeddedStores, native_service: NativeService) -> Iterator[str]:
    from runtime.native.accounts.keys import create_user
    from runtime.stores.database import transaction
    from tests.conftest import reset_database

    reset_database(native_service.context.sessions)
    with transaction(native_service.context.sessions) as session:
        _requester, requester_key = create_user(session, "fuzz-req", kudos=10**9, concurrency=10**6)
        _owner, worker_key = create_user(session, "fuzz-worker")
    # Schemathesis sends many chat requests a second from one address and one key; what it
    # checks is the front's answers, not the submit limits, so only those are raised.
    native = NativeService.start(
        Settings(service_passkey=PASSKEY),
        policy=Policy(rate_limits=raised(RATE_LIMITS, "chat_async")),
        database_url=horde_stores.database_url,
        redis_url=horde_stores.redis_url,
        host="127.0.0.1",
        port=0,
        sweep=False,
    )
    budgets = {"deadline": 5.0, "grace": 2.0, "poll_interval": 0.5, "queue_info_wait": 0.3}
    try:
        with (
            running_front(
                horde_stores.redis_url, [native.url], service_passkey=PASSKEY, **budgets
            ) as front,
            ChatTestWorker(f"{native.url}/api/v2", worker_key, model=MODEL, respond=_answer),
        ):
            yield f"{front.url}|{requester_key}"
    finally:
        native.stop()


def _answer(job: dict[str, Any]) -> dict[str, Any]:
    return {"content": "{}", "finish_reason": "stop"}


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_front_conforms(case: Any, fuzz_front: str) -> None:
    url, key = fuzz_front.split("|")
    positive = case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE
    headers = {"Authorization": f"Bearer {key}"} if positive else None
    if positive and isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = MODEL  # a served model, so positive requests reach the worker
    # A schema-valid body may still break a business rule (an unknown model, a gap, the
    # deadline): those refusals are the contract, so positive-data acceptance is not checked.
    case.call_and_validate(
        base_url=url, headers=headers, excluded_checks=[positive_data_acceptance]
    )
