"""schemathesis from generated/openapi/native.yaml against the live native API.

Every phase schemathesis has: per operation the examples phase (the schemas'
defaults filled in, as the document carries no examples), the coverage phase (each
constraint's boundaries and violations) and the fuzzing phase (a fixed, derandomized budget);
then the stateful phase, which follows the document's links (a submit's id to its status and
cancel, a pop's id to the submit). No 5xx; statuses, content types and bodies conform to the
document. Every operation the app serves (``VIEWS``) is fuzzed, the chat routes included.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance, use_after_free
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.stateful.state_machine import StepInput, StepOutput

from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY, HEADER_X_OPERATION_KEY
from generated.signals import POP_MAX_WAIT_SECONDS
from runtime.native.api.app import VIEWS
from tests.support.chat_worker import ChatTestWorker

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
        "kudos_transfer",
        "sharedkey_create",
        "sharedkey",
        "sharedkey_modify",
        "sharedkey_delete",
        "model",
        "stats_text_totals",
        "stats_text_history",
        "stats_text_models",
        "performance",
        "modes",
        "news",
        "worker_by_name",
        "find_user",
        why=(
            "schemathesis sends 40 examples per operation as fast as it can from one address:"
            " the submits' 2 a second, a transfer's 1 a second, a shared key's 5 a minute and"
            " the public reads' 90 a minute per address would"
            " answer 429 where the check expects the route's own refusal (the limits"
            " themselves are tested in tests/integration/test_native_rate_limits.py)"
        ),
    ),
]

DOCUMENT = Path(__file__).resolve().parents[2] / "generated" / "openapi" / "native.yaml"
EXAMPLES_PER_OPERATION = 40
STATEFUL_SCENARIOS = 120
"""Scenarios start at any operation; with the public reads (stats, models, find_user, ...)
40 of them no longer reached a chat cancel by its link, and 80 not always; 120 do."""
STATEFUL_STEPS = 6
PHASES = ("examples", "coverage", "fuzzing")
MODEL = "fuzz-chat-model"
CHAT_SUBMIT = "POST /api/v2/generate/chat/async"
TEXT_SUBMIT = "POST /api/v2/generate/text/async"
TEXT_BODY = {"prompt": "Once upon a time", "params": {"max_length": 16}}
"""A stateful text submit's body: a request any user may queue (no worker need be online)."""

schema = schemathesis.openapi.from_path(DOCUMENT).include(
    operation_id=sorted(VIEWS)  # what this service serves so far
)
schema.config.phases.update(phases=[*PHASES, "stateful"])
schema.config.phases.examples.fill_missing = True  # no examples in the document: its defaults


def _linked(document: Path) -> list[str]:
    """The operations a link of the document leaves from or leads to."""
    linked: set[str] = set()
    for item in yaml.safe_load(document.read_text("utf-8"))["paths"].values():
        for operation in item.values():
            for response in operation.get("responses", {}).values():
                for link in (response.get("links") or {}).values():
                    linked |= {operation["operationId"], link["operationId"]}
    return sorted(linked)


LINKED = schema.include(operation_id=_linked(DOCUMENT))
"""What the stateful phase walks: an operation no link touches only dilutes its scenarios
(with the shared key and kudos routes among them, the derandomized walk no longer reached a
text status read)."""

SEEN_PHASES: Counter[str] = Counter()


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
    if case.meta is not None:
        SEEN_PHASES[case.meta.phase.name.value] += 1
    # Positive examples act as a real user so they reach the queue; negative ones keep the
    # generated (possibly invalid) key so its refusal is checked too.
    positive = case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE
    has_key = bool(case.headers) and "apikey" in case.headers
    headers = {"apikey": fuzz_user} if positive and has_key else None
    _no_long_poll(case)
    # A schema-valid body may still break a documented business rule (an empty prompt is
    # MissingPrompt, max_context_length below max_length is TokenOverflow): a 400 there is
    # the contract, so positive-data acceptance is not checked; everything else is.
    case.call_and_validate(
        base_url=base_url, headers=headers, excluded_checks=[positive_data_acceptance]
    )


def _no_long_poll(case: Any) -> None:
    # A pop may long-poll up to POP_MAX_WAIT_SECONDS for work that never comes here (its
    # waiting is proven in tests/integration/test_native_long_poll.py): an in-range wait is
    # made 0 so each example answers at once; an out-of-range one is sent for its refusal.
    if isinstance(case.body, dict) and _in_range_wait(case.body.get("wait")):
        case.body["wait"] = 0


def _fresh_operation_key(case: Any) -> None:
    # A derandomized run generates the same X-Operation-Key in many scenarios, and the native
    # API remembers every key it saw: a key another scenario (or the generating phases) used
    # replays that request, or answers 409 OperationCancelled after its cancel by key, so the
    # same draws met different answers and hypothesis stopped the run as flaky
    # (FlakyStrategyDefinition: a link's bundle filled in one scenario, empty in the next).
    # A schema-valid key is made unique per step; an invalid one is sent for its refusal.
    if (
        case.headers
        and HEADER_X_OPERATION_KEY in case.headers
        and not _negative(case, ParameterLocation.HEADER)
    ):
        case.headers[HEADER_X_OPERATION_KEY] = secrets.token_urlsafe(24)


def _negative(case: Any, location: ParameterLocation) -> bool:
    """The case's ``location`` was generated to break the schema (its refusal is checked)."""
    info = case.meta.components.get(location) if case.meta is not None else None
    return info is not None and info.mode == GenerationMode.NEGATIVE


def test_every_generating_phase_ran() -> None:
    """The examples, coverage and fuzzing phases each sent cases in the run above."""
    if not SEEN_PHASES:
        pytest.skip("runs after test_native_api_conforms, in the same session")
    print(f"cases by phase: {dict(SEEN_PHASES)}")
    assert set(PHASES) <= set(SEEN_PHASES), SEEN_PHASES


@pytest.fixture
def chat_worker(fuzz_user, native_service, native_url) -> Iterator[str]:
    """An online chat worker answering every job, so a chat submit queues and is served."""
    from runtime.native.accounts.keys import create_user
    from runtime.stores.database import transaction

    with transaction(native_service.context.sessions) as session:
        _owner, worker_key = create_user(session, "fuzz-chat-worker")
    with ChatTestWorker(native_url, worker_key, model=MODEL, respond=_answer):
        yield MODEL


def _answer(job: dict[str, Any]) -> dict[str, Any]:
    return {"content": "{}", "finish_reason": "stop"}


def test_native_api_stateful(native_url, fuzz_user, chat_worker):
    """Scenarios along the document's links; a linked text and chat status and cancel answer."""
    base_url = native_url.removesuffix("/api/v2")
    followed: Counter[tuple[str, int]] = Counter()

    class Workflow(LINKED.as_state_machine()):  # type: ignore[misc]
        def step(self, input: StepInput) -> StepOutput:
            case = input.case
            _no_long_poll(case)
            # No passkey (a generated one is refused 403: the generating phases check that),
            # and a submit's body is a plain request (a chat one to the served model): their
            # generated bodies mostly break a business rule, checked by the generating
            # phases, so a text status was reached in one run and not in another (CI); this
            # way a submit queues and its links lead to the request.
            if case.headers:
                case.headers.pop(HEADER_X_HORDE_SERVICE_PASSKEY, None)
            positive_body = not _negative(case, ParameterLocation.BODY)
            if case.operation.label == CHAT_SUBMIT and positive_body:
                case.body = {"model": chat_worker, "messages": [{"role": "user", "content": "hi"}]}
            if case.operation.label == TEXT_SUBMIT and positive_body:
                case.body = dict(TEXT_BODY)
            _fresh_operation_key(case)
            output = super().step(input)
            transition = input.transition
            if transition is not None and not transition.is_inferred and input.is_applied:
                followed[(input.case.operation.label, output.response.status_code)] += 1
            return output

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            # Every step acts as the fuzz user, so a submit queues and its linked reads and
            # cancels find the request; a step whose headers were made invalid keeps them.
            if _negative(case, ParameterLocation.HEADER):
                return {"base_url": base_url}
            return {"base_url": base_url, "headers": {"apikey": fuzz_user}}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            # A DELETE of a status cancels the request and answers its status; the status
            # stays readable (upstream's contract), so use_after_free's 404 is not expected.
            case.validate_response(
                response,
                excluded_checks=[positive_data_acceptance, use_after_free],
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
    reached = {label for (label, status), _ in followed.items() if status == 200}
    assert {
        "GET /api/v2/generate/text/status/{id}",
        "GET /api/v2/generate/chat/status/{id}",
        "DELETE /api/v2/generate/chat/status/{id}",
    } <= reached, followed
