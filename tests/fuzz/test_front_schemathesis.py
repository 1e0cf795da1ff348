"""schemathesis from generated/openapi/front.yaml against the live chat front.

The front runs over the live native API with an online test worker that answers every job,
so positive examples travel the whole way (submit, signal, reply) and negative ones are
refused in OpenAI's envelope. Every phase schemathesis has: per operation the
examples phase (the schemas' defaults filled in, as the document carries no examples), the
coverage phase and the fuzzing phase (a fixed, derandomized budget); then the stateful phase
along the document's links (a listed model to its retrieval). No 5xx other than the
documented ones, and statuses, content types and bodies conform to the document.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.stateful.state_machine import StepInput, StepOutput

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
STATEFUL_SCENARIOS = 20
STATEFUL_STEPS = 4
PHASES = ("examples", "coverage", "fuzzing")

schema = schemathesis.openapi.from_path(DOCUMENT)
schema.config.phases.update(phases=[*PHASES, "stateful"])
schema.config.phases.examples.fill_missing = True  # no examples in the document: its defaults

SEEN_PHASES: Counter[str] = Counter()


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
    if case.meta is not None:
        SEEN_PHASES[case.meta.phase.name.value] += 1
    positive = case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE
    headers = {"Authorization": f"Bearer {key}"} if positive else None
    if positive and isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = MODEL  # a served model, so positive requests reach the worker
    # A schema-valid body may still break a business rule (an unknown model, a gap, the
    # deadline): those refusals are the contract, so positive-data acceptance is not checked.
    case.call_and_validate(
        base_url=url, headers=headers, excluded_checks=[positive_data_acceptance]
    )


def _negative(case: Any, location: ParameterLocation) -> bool:
    """The case's ``location`` was generated to break the schema (its refusal is checked)."""
    info = case.meta.components.get(location) if case.meta is not None else None
    return info is not None and info.mode == GenerationMode.NEGATIVE


def test_every_generating_phase_ran() -> None:
    """The examples, coverage and fuzzing phases each sent cases in the run above."""
    if not SEEN_PHASES:
        pytest.skip("runs after test_front_conforms, in the same session")
    print(f"cases by phase: {dict(SEEN_PHASES)}")
    assert set(PHASES) <= set(SEEN_PHASES), SEEN_PHASES


def test_front_stateful(fuzz_front: str) -> None:
    """Scenarios along the document's links; a listed model is retrieved by its id."""
    url, key = fuzz_front.split("|")
    followed: Counter[tuple[str, int]] = Counter()

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def step(self, input: StepInput) -> StepOutput:
            case = input.case
            positive_body = not _negative(case, ParameterLocation.BODY)
            if positive_body and isinstance(case.body, dict) and "model" in case.body:
                case.body["model"] = MODEL  # a served model, so a completion reaches the worker
            output = super().step(input)
            transition = input.transition
            if transition is not None and not transition.is_inferred and input.is_applied:
                followed[(case.operation.label, output.response.status_code)] += 1
            return output

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            # The requester's key, unless the step's headers were made invalid (kept, refused).
            if _negative(case, ParameterLocation.HEADER):
                return {"base_url": url}
            return {"base_url": url, "headers": {"Authorization": f"Bearer {key}"}}

        def validate_response(self, response, case, additional_checks=None, **kwargs):  # type: ignore[no-untyped-def]
            case.validate_response(
                response,
                excluded_checks=[positive_data_acceptance],
                transport_kwargs=kwargs,
                recorder=getattr(self, "recorder", None),
            )

    Workflow.run(
        settings=settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=STATEFUL_STEPS,
            derandomize=True,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
    )
    print(f"links followed (operation, status): {dict(followed)}")
    assert ("GET /v1/models/{model}", 200) in followed, followed
