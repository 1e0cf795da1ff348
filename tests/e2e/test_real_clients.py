"""The clients people point at the horde, each from its own package, against the
stack ``horde-chat up`` builds, at its shipped settings: the native API at the shipped rate
limits, the front with its default budgets, and ``horde-chat up``'s own demo worker (the demo
model on llama-cpp-python, runtime.worker.demo). One stack for the whole file.

The demo model answers one sentence, and under a grammar its output is the shortest that
conforms (``{"name":"","age":0}``), so these tests assert what a client gets: the reply's
shape, its validity against the client's schema or tool, its token counts; never content.

Each client keeps its default retries. Every 429 a client met is noted with its
``x-should-retry``: a client must never meet one after its request was queued, and the 429s
before queueing (a client's submissions above its 2 a second) are retried by the client.

Nothing phones home: LangSmith tracing, LiteLLM's telemetry and model cost map download and
openai-agents' tracing are off.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest
from pydantic import BaseModel

from runtime.config import Settings
from runtime.native.accounts.keys import create_user
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from runtime.stores.embedded import EmbeddedStores
from runtime.worker.demo import DemoWorkerService
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME
from tests.conftest import SERVICE_PASSKEY, reset_database
from tests.support.demo_model import UNIT_TOOL
from tests.support.front import route_requests, running_front
from tests.support.openai_schema import assert_response
from tests.support.workers import until_listed

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

OFFLINE = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # LiteLLM reads its bundled cost map, no download
    "LITELLM_TELEMETRY": "False",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "HF_HUB_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
}
QUESTION = "Who are you?"
MESSAGES: list[Any] = [{"role": "user", "content": QUESTION}]
FORCED = {"type": "function", "function": {"name": "get_weather"}}
UNITS = ("celsius", "fahrenheit")
TOO_MANY = 429
RESPONSES_AND_CHAT = ("/v1/responses", "/v1/chat/completions")
AFTER_SUBMISSION = "false"
"""The x-should-retry of an error once the horde may hold the request."""


class Person(BaseModel):
    name: str
    age: int


@dataclass
class Stack:
    base_url: str
    api_key: str
    refusals: list[tuple[str, str | None]] = field(default_factory=list)
    """(path, x-should-retry) of every 429 any client met."""

    def note(self, response: httpx.Response) -> None:
        if response.status_code == TOO_MANY:
            self.refusals.append((response.url.path, response.headers.get("x-should-retry")))

    async def anote(self, response: httpx.Response) -> None:
        self.note(response)

    def http(self) -> httpx.Client:
        return httpx.Client(timeout=600, event_hooks={"response": [self.note]})

    def ahttp(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=600, event_hooks={"response": [self.anote]})


@pytest.fixture(scope="module", autouse=True)
def _offline() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in OFFLINE}
    os.environ.update(OFFLINE)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def _shipped_limits(native_service: NativeService) -> Iterator[None]:
    # The session's native API may still run at the suite's x1000 scale: this file runs at 1.
    ctx = native_service.context
    before = ctx.settings
    ctx.settings = replace(before, rate_limit_scale=1)
    yield
    ctx.settings = before


@pytest.fixture(scope="module")
def stack(
    horde_stores: EmbeddedStores, native_service: NativeService, _shipped_limits: None
) -> Iterator[Stack]:
    """The front (default budgets) and ``horde-chat up``'s demo worker on a clean database."""
    sessions = native_service.context.sessions
    reset_database(sessions)
    native_service.context.redis.flushdb()
    with transaction(sessions) as session:
        _, worker_key = create_user(session, "demo-worker")
        _, api_key = create_user(session, "alice", kudos=100_000)
    data_dir = Path(tempfile.mkdtemp(prefix="horde-real-clients-"))
    settings = Settings(
        data_dir=data_dir, native_host=native_service.host, native_port=native_service.port
    )
    demo = DemoWorkerService.start(settings, worker_key)
    try:
        with httpx.Client(base_url=f"{native_service.url}/api/v2", timeout=30) as native:
            until_listed(native, "the demo worker's first pop", seconds=60)
        with running_front(
            horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY
        ) as front:
            yield Stack(f"{front.url}/v1", api_key)
    finally:
        demo.stop()


@pytest.fixture
def refusals(stack: Stack) -> Iterator[list[tuple[str, str | None]]]:
    """The 429s this test's clients met; none may come after submission."""
    stack.refusals.clear()
    yield stack.refusals
    assert all(retry != AFTER_SUBMISSION for _, retry in stack.refusals), stack.refusals


@pytest.fixture
def sdk(stack: Stack) -> Iterator[openai.OpenAI]:
    with (
        stack.http() as http,
        openai.OpenAI(base_url=stack.base_url, api_key=stack.api_key, http_client=http) as client,
    ):
        yield client


def is_unit_call(call: Any) -> bool:
    """A call of UNIT_TOOL whose arguments its schema accepts."""
    arguments = json.loads(call.function.arguments)
    return call.function.name == "get_weather" and arguments.get("unit") in UNITS


# --- the openai SDK -------------------------------------------------------------------------


def test_openai_sdk_tool_loop_over_two_turns_is_answered(
    sdk: openai.OpenAI, refusals: list[Any]
) -> None:
    messages: list[Any] = list(MESSAGES)
    first = sdk.chat.completions.create(
        model=MODEL_NAME,
        messages=messages,
        tools=[UNIT_TOOL],  # type: ignore[list-item]
        tool_choice=FORCED,  # type: ignore[arg-type]
    )
    asked = first.choices[0]
    assert asked.finish_reason == "tool_calls"
    assert asked.message.tool_calls is not None
    assert [is_unit_call(c) for c in asked.message.tool_calls] == [True]
    messages += [
        asked.message,
        {"role": "tool", "tool_call_id": asked.message.tool_calls[0].id, "content": "20"},
    ]
    second = sdk.chat.completions.create(model=MODEL_NAME, messages=messages, tools=[UNIT_TOOL])  # type: ignore[list-item]
    answer = second.choices[0]
    assert (answer.message.content, answer.finish_reason) == (DEMO_REPLY, "stop")
    assert second.usage is not None
    assert second.usage.prompt_tokens > first.usage.prompt_tokens  # type: ignore[union-attr]


def test_openai_sdk_parse_returns_the_pydantic_object(
    sdk: openai.OpenAI, refusals: list[Any]
) -> None:
    completion = sdk.chat.completions.parse(
        model=MODEL_NAME,
        messages=MESSAGES,
        response_format=Person,
    )
    message = completion.choices[0].message
    assert isinstance(message.parsed, Person)
    assert Person.model_validate_json(message.content or "") == message.parsed


def test_openai_sdk_streamed_usage_is_the_plain_replys_usage(
    sdk: openai.OpenAI, refusals: list[Any]
) -> None:
    plain = sdk.chat.completions.create(model=MODEL_NAME, messages=MESSAGES)
    stream = sdk.chat.completions.create(
        model=MODEL_NAME,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content == DEMO_REPLY
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1
    assert plain.usage is not None
    streamed = usages[0]
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (
        plain.usage.prompt_tokens,
        plain.usage.completion_tokens,
    )


def test_openai_sdk_eight_parallel_async_calls_are_all_answered_with_default_retries(
    stack: Stack, refusals: list[Any]
) -> None:
    async def everyone() -> list[Any]:
        async with (
            stack.ahttp() as http,
            openai.AsyncOpenAI(
                base_url=stack.base_url, api_key=stack.api_key, http_client=http
            ) as client,
        ):
            calls = [
                client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES)
                for _ in range(8)
            ]
            return list(await asyncio.gather(*calls, return_exceptions=True))

    results = asyncio.run(everyone())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    assert [r.choices[0].message.content for r in results] == [DEMO_REPLY] * 8
    assert len({r.id for r in results}) == 8
    # the front waits out the native submit limit (2 a second) itself: no client sees a 429
    assert refusals == []


# --- the openai SDK on the Responses API -----------------------------------------------------


def test_openai_sdk_responses_create_stream_and_parse(
    sdk: openai.OpenAI, refusals: list[Any]
) -> None:
    created = sdk.responses.create(model=MODEL_NAME, input=QUESTION, instructions="Be brief.")
    assert created.output_text == DEMO_REPLY
    assert created.status == "completed"
    assert created.usage is not None
    assert created.usage.output_tokens > 0
    assert_response(created.to_dict())
    with sdk.responses.stream(model=MODEL_NAME, input=QUESTION) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == DEMO_REPLY
    assert final.usage is not None
    assert final.usage.output_tokens == created.usage.output_tokens
    parsed = sdk.responses.parse(model=MODEL_NAME, input=QUESTION, text_format=Person)
    assert isinstance(parsed.output_parsed, Person)


def test_openai_sdk_responses_tool_loop_over_two_turns(
    sdk: openai.OpenAI, refusals: list[Any]
) -> None:
    tool = {
        "type": "function",
        "name": UNIT_TOOL["function"]["name"],
        "description": UNIT_TOOL["function"].get("description"),
        "parameters": UNIT_TOOL["function"]["parameters"],
        "strict": False,
    }
    forced = {"type": "function", "name": tool["name"]}
    first = sdk.responses.create(
        model=MODEL_NAME,
        input=QUESTION,
        tools=[tool],
        tool_choice=forced,  # type: ignore[list-item,arg-type]
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    assert json.loads(calls[0].arguments)["unit"] in UNITS
    history: list[Any] = [
        {"role": "user", "content": QUESTION},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "20"},
    ]
    second = sdk.responses.create(model=MODEL_NAME, input=history, tools=[tool])  # type: ignore[list-item]
    assert second.output_text == DEMO_REPLY
    assert second.usage is not None
    assert first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens


# --- LangChain ------------------------------------------------------------------------------


@pytest.fixture
def chat(stack: Stack) -> Iterator[Any]:
    from langchain_openai import ChatOpenAI

    with stack.http() as http:
        yield ChatOpenAI(
            model=MODEL_NAME,
            base_url=stack.base_url,
            api_key=stack.api_key,  # type: ignore[arg-type]
            http_client=http,
        )


def test_langchain_invoke_gets_the_reply_and_its_token_counts(
    chat: Any, refusals: list[Any]
) -> None:
    reply = chat.invoke(QUESTION)
    assert reply.content == DEMO_REPLY
    usage = reply.usage_metadata
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_langchain_stream_adds_up_to_the_reply(chat: Any, refusals: list[Any]) -> None:
    chunks = list(chat.stream(QUESTION))
    assert "".join(str(c.content) for c in chunks) == DEMO_REPLY


def test_langchain_bind_tools_loop_with_a_tool_message_is_answered(
    chat: Any, refusals: list[Any]
) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage

    forced = chat.bind_tools([UNIT_TOOL], tool_choice="get_weather")
    messages: list[Any] = [HumanMessage(QUESTION)]
    asked = forced.invoke(messages)
    assert [c["name"] for c in asked.tool_calls] == ["get_weather"]
    assert asked.tool_calls[0]["args"]["unit"] in UNITS
    messages += [asked, ToolMessage("20", tool_call_id=asked.tool_calls[0]["id"])]
    answer = chat.bind_tools([UNIT_TOOL]).invoke(messages)
    assert answer.content == DEMO_REPLY
    assert answer.tool_calls == []


@pytest.mark.parametrize("choice", ["any", "required"])
def test_langchain_bind_tools_forcing_one_of_two_gets_a_call(
    chat: Any, refusals: list[Any], choice: str
) -> None:
    """tool_choice "any" is OpenAI's "required": among several tools a strict request
    needs tool_choice_required_enforced, which the demo worker's grammar backs (it was 404
    no_worker_supports_features, which LangChain raises as OpenAIModelNotFoundError)."""
    clock = {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    }
    asked = chat.bind_tools([UNIT_TOOL, clock], tool_choice=choice).invoke(QUESTION)
    assert [c["name"] for c in asked.tool_calls] in (["get_weather"], ["get_time"])


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output_returns_the_pydantic_object(
    chat: Any, refusals: list[Any], method: str
) -> None:
    structured = chat.with_structured_output(Person, method=method, include_raw=True)
    result = structured.invoke(QUESTION)
    assert result["parsing_error"] is None
    assert isinstance(result["parsed"], Person)


# --- LiteLLM --------------------------------------------------------------------------------


def litellm_pydantic_warnings(test: Any) -> Any:
    """LiteLLM 1.110's own pydantic warnings, let through (LiteLLM's code, not ours; each
    comes once a process, so which test meets it depends on the order): its streaming builds
    TypeAdapters of TypedDicts with ReadOnly items, and its model_response_utils reads
    model_fields and model_computed_fields on instances (deprecated since pydantic 2.11)."""
    readonly = r"Item '\w+' on TypedDict class '\w+' is using the `ReadOnly` qualifier"
    on_instance = r"Accessing the 'model_\w*fields' attribute on the instance is deprecated"
    test = pytest.mark.filterwarnings(f"ignore:{readonly}:UserWarning")(test)
    return pytest.mark.filterwarnings(
        f"ignore:{on_instance}:pydantic.warnings.PydanticDeprecatedSince211:litellm\\."
    )(test)


@pytest.fixture
def litellm_call(stack: Stack) -> Iterator[Any]:
    import litellm

    litellm.telemetry = False
    with stack.http() as http:
        client = openai.OpenAI(base_url=stack.base_url, api_key=stack.api_key, http_client=http)

        def call(**kwargs: Any) -> Any:
            return litellm.completion(
                model=f"openai/{MODEL_NAME}",
                api_base=stack.base_url,
                api_key=stack.api_key,
                client=client,
                messages=MESSAGES,
                **kwargs,
            )

        yield call


@litellm_pydantic_warnings
def test_litellm_completion_gets_the_reply_and_its_usage(
    litellm_call: Any, refusals: list[Any]
) -> None:
    response = litellm_call()
    assert response.choices[0].message.content == DEMO_REPLY
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens > 0


@litellm_pydantic_warnings
def test_litellm_stream_adds_up_to_the_reply(litellm_call: Any, refusals: list[Any]) -> None:
    chunks = list(litellm_call(stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == DEMO_REPLY
    usages = [u for c in chunks if (u := getattr(c, "usage", None)) is not None]
    assert usages
    assert usages[-1].completion_tokens > 0


@litellm_pydantic_warnings
def test_litellm_tools_come_back_as_the_forced_call(litellm_call: Any, refusals: list[Any]) -> None:
    response = litellm_call(tools=[UNIT_TOOL], tool_choice=FORCED)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [is_unit_call(c) for c in choice.message.tool_calls] == [True]


@litellm_pydantic_warnings
def test_litellm_responses_gets_the_reply_and_its_usage(stack: Stack, refusals: list[Any]) -> None:
    import litellm

    litellm.telemetry = False
    front = stack.base_url.removesuffix("/v1")
    before = {path: route_requests(front, path) for path in RESPONSES_AND_CHAT}
    response = litellm.responses(
        model=f"openai/{MODEL_NAME}",
        input=QUESTION,
        api_base=stack.base_url,
        api_key=stack.api_key,
    )
    texts = [
        part.text
        for item in response.output
        if getattr(item, "type", None) == "message"
        for part in item.content
    ]
    assert texts == [DEMO_REPLY]
    assert response.usage.output_tokens > 0
    streamed = litellm.responses(
        model=f"openai/{MODEL_NAME}",
        input=QUESTION,
        api_base=stack.base_url,
        api_key=stack.api_key,
        stream=True,
    )
    events = list(streamed)
    deltas = [e.delta for e in events if getattr(e, "type", None) == "response.output_text.delta"]
    assert "".join(deltas) == DEMO_REPLY
    assert events[-1].type == "response.completed"
    after = {path: route_requests(front, path) for path in RESPONSES_AND_CHAT}
    # LiteLLM spoke the Responses API to the front, not its bridge onto chat completions
    assert {path: after[path] - before[path] for path in after} == {
        "/v1/responses": 2,
        "/v1/chat/completions": 0,
    }


# --- openai-agents --------------------------------------------------------------------------


def test_openai_agents_agent_calls_its_tool_and_answers(stack: Stack, refusals: list[Any]) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    called: list[str] = []

    @function_tool
    def get_weather(unit: Literal["celsius", "fahrenheit"]) -> str:
        """The temperature where the user is."""
        called.append(unit)
        return "20"

    async def run() -> Any:
        async with (
            stack.ahttp() as http,
            openai.AsyncOpenAI(
                base_url=stack.base_url, api_key=stack.api_key, http_client=http
            ) as client,
        ):
            agent = Agent(
                name="weather",
                instructions="Answer with the weather.",
                model=OpenAIChatCompletionsModel(model=MODEL_NAME, openai_client=client),
                tools=[get_weather],
                model_settings=ModelSettings(tool_choice="get_weather"),
            )
            return await Runner.run(agent, QUESTION)

    result = asyncio.run(run())
    assert len(called) == 1
    assert called[0] in UNITS
    assert result.final_output == DEMO_REPLY


def test_openai_agents_default_model_path_calls_its_tool_over_responses(
    stack: Stack, refusals: list[Any]
) -> None:
    """The agents SDK's default model (the Responses API, no set_default_openai_api) against
    the front's /v1/responses: a forced tool call, then the answer to its output."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIProvider,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    called: list[str] = []
    paths: list[str] = []

    @function_tool
    def get_weather(unit: Literal["celsius", "fahrenheit"]) -> str:
        """The temperature where the user is."""
        called.append(unit)
        return "20"

    async def run() -> Any:
        async def seen(request: httpx.Request) -> None:
            paths.append(request.url.path)

        async with (
            stack.ahttp() as http,
            openai.AsyncOpenAI(
                base_url=stack.base_url, api_key=stack.api_key, http_client=http
            ) as client,
        ):
            http.event_hooks["request"].append(seen)
            provider = OpenAIProvider(openai_client=client)
            assert isinstance(provider.get_model(MODEL_NAME), OpenAIResponsesModel)
            agent = Agent(
                name="weather",
                instructions="Answer with the weather.",
                model=MODEL_NAME,
                tools=[get_weather],
                model_settings=ModelSettings(tool_choice="get_weather"),
            )
            config = RunConfig(model_provider=provider)
            result = await Runner.run(agent, QUESTION, run_config=config)
            plain = Agent(name="plain", instructions="Answer.", model=MODEL_NAME)
            streamed = Runner.run_streamed(plain, QUESTION, run_config=config)
            kinds = [event.type async for event in streamed.stream_events()]
            return result, streamed, kinds

    result, streamed, kinds = asyncio.run(run())
    assert len(called) == 1
    assert called[0] in UNITS
    assert result.final_output == DEMO_REPLY
    assert streamed.final_output == DEMO_REPLY
    assert "raw_response_event" in kinds
    assert set(paths) == {"/v1/responses"}
    assert len(paths) == 3  # the call, the answer to its output, the streamed run


# --- pydantic-ai ----------------------------------------------------------------------------


def run_pydantic_agent(stack: Stack, **agent_options: Any) -> Any:
    """A pydantic-ai agent on the front with output_type Person (and ``agent_options``),
    run on QUESTION; its result."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def run() -> Any:
        async with (
            stack.ahttp() as http,
            openai.AsyncOpenAI(
                base_url=stack.base_url, api_key=stack.api_key, http_client=http
            ) as client,
        ):
            model = OpenAIChatModel(MODEL_NAME, provider=OpenAIProvider(openai_client=client))
            agent = Agent(model, output_type=Person, **agent_options)
            return await agent.run(QUESTION)

    return asyncio.run(run())


def test_pydantic_ai_agent_returns_the_structured_output(stack: Stack, refusals: list[Any]) -> None:
    result = run_pydantic_agent(stack)
    assert isinstance(result.output, Person)
    assert result.usage.output_tokens > 0


def test_pydantic_ai_agent_with_a_tool_returns_the_structured_output(
    stack: Stack, refusals: list[Any]
) -> None:
    """An agent with a tool and an output type sends tool_choice "required" among its tool
    and the output tool: served (it was 404, which pydantic-ai raises as ModelNotFoundError)."""

    def local_time(city: str) -> str:
        """The local time in a city."""
        return "noon"

    result = run_pydantic_agent(stack, tools=[local_time])
    assert isinstance(result.output, Person)


# --- instructor -----------------------------------------------------------------------------

INSTRUCTOR_PYTHON = Path(sys.prefix) / "clients" / "instructor" / "bin" / "python"
"""instructor's own environment, inside the test one (``make install`` makes it): instructor
1.14-1.17 caps jiter below 0.15 while the openai of this environment needs jiter 0.16 or
later, so instructor brings its own openai there."""
INSTRUCTOR_CLIENT = Path(__file__).with_name("instructor_client.py")
# TOOLS (a forced tool call) and JSON_SCHEMA (response_format json_schema) are grammar-bound
# on the demo model. instructor's JSON mode (json_object) gets the demo's `{}` and MD_JSON (no
# constraint) its one sentence, neither a Person: limits of the demo model, not of the horde.


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor_returns_the_response_model(stack: Stack, mode: str) -> None:
    if not INSTRUCTOR_PYTHON.exists():
        pytest.fail(f"{INSTRUCTOR_PYTHON} is missing: `make install` makes instructor's venv")
    run = subprocess.run(
        [INSTRUCTOR_PYTHON, INSTRUCTOR_CLIENT, stack.base_url, stack.api_key, MODEL_NAME, mode],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **OFFLINE},
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    # instructor validated the reply against Person (a tool call's arguments in TOOLS, the
    # content under response_format json_schema in JSON_SCHEMA), with no retry
    assert set(result["person"]) == {"name", "age"}
    assert isinstance(result["person"]["age"], int)
    assert result["finish_reason"] == ("tool_calls" if mode == "TOOLS" else "stop")
    assert result["usage"]["completion_tokens"] > 0
