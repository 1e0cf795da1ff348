"""The error classes: bodies and headers on both surfaces, and the errors targets' output."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegen.spec import load_spec
from codegen.targets import docs_errors, errors
from generated import errors as generated
from tests.support.openai_schema import assert_error

REPO = Path(__file__).resolve().parents[2]
SPEC_ROOT_FILES = REPO / "spec"


FRONT = [cls for cls in generated.ERRORS.values() if cls.front_status is not None]


def _fields(cls: type[generated.HordeError]) -> dict[str, str]:
    import string

    names = {f for _, f, _, _ in string.Formatter().parse(cls.template) if f}
    return {name: f"<{name}>" for name in names}


@pytest.mark.parametrize("cls", FRONT, ids=lambda c: c.code)
def test_every_front_error_body_is_openais_error_response(cls: type[generated.HordeError]) -> None:
    err = cls(**_fields(cls))
    body = err.openai_body()
    assert_error(body)
    assert body["error"]["code"] == cls.code
    assert body["error"]["type"] == cls.openai_type
    assert "{" not in body["error"]["message"]


def test_native_body_is_upstreams_shape() -> None:
    err = generated.InvalidJobID(id="abc")
    assert err.native_body() == {
        "message": "Processing Job with ID abc does not exist.",
        "rc": "InvalidJobID",
    }
    assert err.native_status == 404


def test_x_should_retry_once_submitted_or_always_for_post_submission_errors() -> None:
    assert generated.InvalidAPIKey().front_headers() == {}
    assert generated.InvalidAPIKey().front_headers(submitted=True) == {"x-should-retry": "false"}
    assert generated.ChatRequestFaulted(reason="r").front_headers() == {"x-should-retry": "false"}


def test_retry_after_uses_the_spec_default_or_the_raisers_value() -> None:
    assert generated.FrontAtCapacity(scope="global").front_headers()["retry-after"] == "2"
    queue = generated.QueueUnavailable(reason="no threads").front_headers()
    assert queue == {"x-should-retry": "false", "retry-after": "30", "retry-after-ms": "30000"}
    assert "retry-after" not in generated.InvalidPayload(field="a", problem="b").front_headers()


def test_the_wait_is_sent_in_whole_seconds_rounded_up_and_in_milliseconds() -> None:
    # Retry-After never asks for less than the wait (a client back at 7 s of a 7.4 s wait
    # would be refused again); retry-after-ms, which OpenAI's SDKs read first, is the wait.
    seven = generated.FrontAtCapacity(scope="x", retry_after=7.4).front_headers()
    assert (seven["retry-after"], seven["retry-after-ms"]) == ("8", "7400")
    window_end = generated.RateLimited(limit="2 per 1 second", seconds="0.94", retry_after=0.9373)
    assert window_end.retry_headers() == {"retry-after": "1", "retry-after-ms": "938"}
    # a window that ended as the refusal was written still asks for a wait
    assert generated.RateLimited(limit="l", seconds="0", retry_after=0.0).retry_headers() == {
        "retry-after": "1",
        "retry-after-ms": "1",
    }
    assert generated.InvalidPayload(field="a", problem="b").retry_headers() == {}


def test_param_defaults_to_the_spec_and_the_raiser_may_override() -> None:
    assert generated.KudosCapExceeded(quote=9, max_kudos=1).param == "horde.max_kudos"
    assert generated.InvalidPayload(field="x", problem="y", param="x").param == "x"


def test_every_post_submission_front_error_never_retries() -> None:
    for cls in FRONT:
        if set(cls.front_when) <= {"first_status", "waiting", "stream"}:
            assert cls.no_retry, cls.code


SMALL_SPEC = """$schema: schema/errors.schema.json
errors:
  no_eligible_worker:
    message: "No online worker can serve this request: {reason}"
    description: No online chat worker serves the model.
    native: {status: 503, routes: [chat]}
    front: {status: 503, type: service_unavailable_error, when: [submission, waiting]}
    retry_after: true
    retry_after_seconds: 9
"""

GOLDEN_CLASS = '''class NoEligibleWorker(HordeError):
    """No online chat worker serves the model."""

    code = "no_eligible_worker"
    template = "No online worker can serve this request: {reason}"
    native_status = 503
    front_status = 503
    openai_type = "service_unavailable_error"
    sends_retry_after = True
    default_retry_after = 9
    front_when = ("submission", "waiting")
    native_routes = ("chat",)
'''

GOLDEN_ROW = (
    "| `no_eligible_worker` | 503 | `service_unavailable_error` |  | false once submitted | 9 "
    "| submission, waiting | No online chat worker serves the model. |"
)


@pytest.fixture
def small_spec(tmp_path: Path):
    (tmp_path / "schema").mkdir()
    schema = (SPEC_ROOT_FILES / "schema" / "errors.schema.json").read_text()
    (tmp_path / "schema" / "errors.schema.json").write_text(schema)
    (tmp_path / "errors.yaml").write_text(SMALL_SPEC)
    return load_spec(tmp_path)


def test_golden_error_class(small_spec) -> None:
    (out,) = errors.build(small_spec)
    assert out.path == "errors.py"
    assert GOLDEN_CLASS in out.text()
    assert '    "no_eligible_worker": NoEligibleWorker,\n' in out.text()


def test_golden_errors_table_row(small_spec) -> None:
    (out,) = docs_errors.build(small_spec)
    assert out.path == "docs/errors.md"
    assert GOLDEN_ROW in out.text().splitlines()
    assert (
        "| `no_eligible_worker` | 503 | chat | 503 |  | No online chat worker serves the model. |"
        in (out.text().splitlines())
    )
