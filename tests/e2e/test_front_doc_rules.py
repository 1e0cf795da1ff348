"""Design-doc rules where an OpenAI client meets them: the official openai SDK
against the live front, the live native API (embedded Postgres and Redis) and a test worker.

* A native refusal that names a parameter names it in OpenAI's envelope too.
* A whole-reply stream (tools) refused at the first status read is a plain HTTP error
  raised at create(), before any SSE headers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from sqlalchemy.orm import Session, sessionmaker

from generated.chat.names import GUARANTEE_PROMPT_OVERFLOW_REFUSED
from runtime.config import Settings
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import MadeUser
from tests.support.chat_worker import ChatTestWorker
from tests.support.front import running_front
from tests.support.native import running_native
from tests.support.openai_schema import refused

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

PASSKEY = "e2e-doc-rules-passkey"
MODEL = "doc-rules-model-7B"
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
FAST = {"poll_interval": 0.5, "grace": 2.0, "queue_info_wait": 0.5}
"""Shortened poll and grace; the deadline stays the shipped one."""
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def trusted_native(horde_stores: EmbeddedStores) -> Iterator[NativeService]:
    with running_native(horde_stores, Settings(service_passkey=PASSKEY)) as service:
        yield service


@pytest.fixture
def native_url(trusted_native: NativeService, native_db: sessionmaker[Session]) -> str:
    return f"{trusted_native.url}/api/v2"


@pytest.fixture
def client(
    horde_stores: EmbeddedStores,
    trusted_native: NativeService,
    native_url: str,
    requester: MadeUser,
) -> Iterator[openai.OpenAI]:
    with (
        running_front(
            horde_stores.redis_url, [trusted_native.url], service_passkey=PASSKEY, **FAST
        ) as front,
        openai.OpenAI(base_url=front.url + "/v1", api_key=requester.api_key, max_retries=0) as sdk,
    ):
        yield sdk


@pytest.fixture
def worker_key(make_user: Callable[..., MadeUser]) -> str:
    return make_user("worker-owner").api_key


def test_a_native_refusal_names_its_param_in_the_openai_envelope(
    client: openai.OpenAI, native_url: str, worker_key: str
) -> None:
    """The native API refuses the unknown second entry of models naming models.[1]; the
    front refuses with the same param (it used to map the refusal by its code alone)."""
    with ChatTestWorker(native_url, worker_key, model=MODEL):
        error = refused(
            lambda: client.chat.completions.create(
                model=MODEL, messages=MESSAGES, extra_body={"models": [MODEL, "no-such-model"]}
            ),
            openai.NotFoundError,
        )
    assert isinstance(error, openai.NotFoundError)
    assert (error.code, error.param) == ("model_not_found", "models.[1]")


def test_a_whole_reply_stream_refused_for_a_missing_feature_is_an_http_error_at_create(
    client: openai.OpenAI, native_url: str, worker_key: str
) -> None:
    """A streamed tool request (a whole-reply stream) that no worker can serve: the SDK's
    create() raises NotFoundError, no SSE headers, no keep-alive and no error event, as
    for a plain stream (docs/design.md, "The front": a gap found at the first status is a plain
    HTTP error, sent before any SSE headers)."""
    with ChatTestWorker(
        native_url, worker_key, model=MODEL, features=[GUARANTEE_PROMPT_OVERFLOW_REFUSED]
    ):
        for stream in (True, False):
            error = refused(
                lambda stream=stream: client.chat.completions.create(
                    model=MODEL,
                    messages=MESSAGES,
                    tools=[WEATHER],
                    tool_choice="required",
                    stream=stream,
                ),
                openai.NotFoundError,
            )
            assert error.status_code == 404
            assert error.code == "no_worker_supports_features"
            assert "tools" in error.message
            assert not error.response.headers["content-type"].startswith("text/event-stream")
