"""The chat worker against the scripted OpenAI backend double (tests/doubles: not a model).

Covers the startup probe and declaration, the counter checks, every mapping the worker
sends, overflow faults, backend errors and timeouts, streaming's progress seam, and the
loop faulting a job through the real native API.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from generated.chat.names import (
    FEATURE_JSON_OBJECT,
    FEATURE_JSON_SCHEMA,
    FEATURE_PENALTIES,
    FEATURE_REASONING,
    FEATURE_SEED,
    FEATURE_TOOLS,
    GUARANTEE_JSON_OUTPUT_ENFORCED,
    GUARANTEE_JSON_SCHEMA_ENFORCED,
    GUARANTEE_PROMPT_OVERFLOW_REFUSED,
    GUARANTEE_TOOL_CHOICE_ENFORCED,
    GUARANTEE_TOOL_CHOICE_REQUIRED_ENFORCED,
    SCOPE_PROMPT_OVERFLOW_REFUSED_EXCEPT_TOOLS,
)
from generated.chat.tables import PAYLOAD_FIT_MAX_TOKENS, REPLY_RESERVE_TOKENS
from generated.errors import (
    BackendError,
    BackendInvalidReply,
    BackendTimeout,
    BackendUnreachable,
    PromptOverflow,
    UnservableJob,
)
from runtime.worker.backend import BackendClient
from runtime.worker.config import WorkerConfig, add_worker_arguments, config_from_args
from runtime.worker.counter import PROBE_MESSAGES
from runtime.worker.declaration import Probed, WorkerStartupError, pop_declaration, probe
from runtime.worker.horde import HordeClient, PopsCut
from runtime.worker.job import Job, JobRunner
from runtime.worker.tiny_model import build_tiny_model
from tests.conftest import MadeUser
from tests.doubles.backend_script import Failure, Hang, Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.integration.native_flow import status, submit_text
from tests.support.waiting import until
from tests.support.workers import until_listed

pytestmark = pytest.mark.integration

JSON_REPLY = Reply(content='{"ok": true}')
ROOT = Path(__file__).resolve().parents[2]
CONTEXT = 4096
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def demo_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("models") / "demo.gguf")


@pytest.fixture
def make_backend() -> Iterator[Callable[..., OpenAIBackendDouble]]:
    started: list[OpenAIBackendDouble] = []

    def make(**options: Any) -> OpenAIBackendDouble:
        options.setdefault("default_reply", JSON_REPLY)
        backend = OpenAIBackendDouble(**options).start()
        started.append(backend)
        return backend

    yield make
    for backend in started:
        backend.close()


def _config(backend: OpenAIBackendDouble, **options: Any) -> WorkerConfig:
    options.setdefault("context", CONTEXT)
    return WorkerConfig("http://unused", "key", backend.openai_base_url, **options)


def _probe(backend: OpenAIBackendDouble, **options: Any) -> Probed:
    config = _config(backend, **options)
    with BackendClient(config.backend_base, timeout=10) as client:
        return probe(client, config)


def _runner(
    backend: OpenAIBackendDouble, timeout: float = 10, **options: Any
) -> tuple[JobRunner, BackendClient]:
    config = _config(backend, **options)
    client = BackendClient(config.backend_base, timeout=timeout)
    probed = probe(client, config)
    return JobRunner(client, HordeClient("http://127.0.0.1:9", "unused"), probed, timeout), client


def _job(payload: dict[str, Any], *, stream: bool = False, ttl: float | None = None) -> Job:
    return Job("job-1", payload, is_chat=True, stream=stream, ttl=ttl)


# -- declaration -------------------------------------------------------------------------


def test_generic_backend_declares_what_its_replies_showed(make_backend: Callable) -> None:
    backend = make_backend()
    probed = _probe(backend)
    assert probed.kind.name == "openai"
    assert probed.model_id == "double-model"
    assert probed.counter.kind == "byte-bound"
    assert set(probed.features) == {
        FEATURE_JSON_OBJECT,
        FEATURE_JSON_SCHEMA,
        GUARANTEE_JSON_SCHEMA_ENFORCED,
        GUARANTEE_JSON_OUTPUT_ENFORCED,
        FEATURE_SEED,
        GUARANTEE_PROMPT_OVERFLOW_REFUSED,
    }
    declaration = pop_declaration(probed, _config(backend, chat_only=True))
    assert declaration["chat_jobs"] is True
    assert declaration["prompt_jobs"] is False
    assert declaration["model_id"] == "double-model"
    assert declaration["chat_limits"] == {"max_context_length": CONTEXT, "max_length": 512}


def test_plain_text_replies_declare_no_json_features(make_backend: Callable) -> None:
    probed = _probe(make_backend(default_reply=Reply(content="not json")))
    assert not {FEATURE_JSON_OBJECT, FEATURE_JSON_SCHEMA} & set(probed.features)


def test_tools_are_declared_only_when_the_forced_calls_come_back(make_backend: Callable) -> None:
    backend = make_backend()
    backend.script(
        Reply(content=None, tool_calls=[{"name": "probe_flag", "arguments": '{"ok": true}'}]),
        Reply(content=None, tool_calls=[{"name": "probe_other_flag", "arguments": "{}"}]),
    )
    probed = _probe(backend, template_overhead=64)
    assert {FEATURE_TOOLS, GUARANTEE_TOOL_CHOICE_ENFORCED} <= set(probed.features)
    sent = backend.chat_requests()[0].body
    assert sent["tool_choice"] == "required"
    assert len(sent["tools"]) == 1


def test_a_forced_call_without_required_among_two_is_tool_choice_enforced_alone(
    make_backend: Callable,
) -> None:
    backend = make_backend()
    backend.script(
        Reply(content=None, tool_calls=[{"name": "probe_flag", "arguments": "{}"}]),
        Reply(content="no call"),
    )
    features = set(_probe(backend, template_overhead=64).features)
    assert {FEATURE_TOOLS, GUARANTEE_TOOL_CHOICE_ENFORCED} <= features
    assert GUARANTEE_TOOL_CHOICE_REQUIRED_ENFORCED not in features


def test_json_output_enforced_covers_the_one_format_that_parsed(make_backend: Callable) -> None:
    # No forced call (so no second tool probe); the json_object probe's reply parses, the
    # schema probe's does not validate.
    backend = make_backend()
    backend.script(Reply(content="no call"), Reply(content="[1]"), Reply(content="[]"))
    features = set(_probe(backend).features)
    assert {FEATURE_JSON_OBJECT, GUARANTEE_JSON_OUTPUT_ENFORCED} <= features
    assert not {FEATURE_JSON_SCHEMA, GUARANTEE_JSON_SCHEMA_ENFORCED} & features


def test_a_backend_refusing_a_tool_result_turn_declares_no_tools(make_backend: Callable) -> None:
    call = Reply(content=None, tool_calls=[{"name": "probe_flag", "arguments": '{"ok": true}'}])
    backend = make_backend(default_reply=call)
    assert FEATURE_TOOLS in _probe(backend, template_overhead=64).features
    sent = [r.body["messages"] for r in backend.chat_requests()]
    turn = next(i for i, messages in enumerate(sent) if messages[-1]["role"] == "tool")
    assert sent[turn][-2]["content"] is None  # the second turn as the OpenAI SDK sends it
    backend.script(*[call] * turn, Failure(500, "content: Input should be a valid string"))
    probed = _probe(backend, template_overhead=64)
    assert not {FEATURE_TOOLS, GUARANTEE_TOOL_CHOICE_ENFORCED} & set(probed.features)
    assert any("refused a tool-result turn" in note for note in probed.notes)


def test_byte_bound_without_template_overhead_keeps_tools_and_scopes_the_guarantee(
    make_backend: Callable,
) -> None:
    # Without --template-overhead the byte bound does not back the guarantee for tool requests
    # only, so tools stay declared (best_effort tool requests still come) and the guarantee is
    # declared with its scope (strict tool requests go to other workers).
    backend = make_backend()
    backend.script(
        Reply(content=None, tool_calls=[{"name": "probe_flag", "arguments": "{}"}]),
        Reply(content="no call"),
    )
    probed = _probe(backend)
    assert FEATURE_TOOLS in probed.features
    assert GUARANTEE_PROMPT_OVERFLOW_REFUSED in probed.features
    assert SCOPE_PROMPT_OVERFLOW_REFUSED_EXCEPT_TOOLS in probed.features
    assert any("--template-overhead" in note for note in probed.notes)


def test_a_template_overhead_measured_as_zero_backs_the_guarantee_for_tools(
    make_backend: Callable,
) -> None:
    """``--template-overhead 0`` is a measurement (check.py's "tool preamble: 0 tokens", the
    worker guide's example), not the option left out: no scope withholds the guarantee."""
    backend = make_backend()
    backend.script(
        Reply(content=None, tool_calls=[{"name": "probe_flag", "arguments": "{}"}]),
        Reply(content="no call"),
    )
    parser = argparse.ArgumentParser()
    add_worker_arguments(parser)
    required = ["--horde", "h", "--api-key", "k", "--backend", backend.openai_base_url]
    assert config_from_args(parser.parse_args(required)).template_overhead is None
    measured = config_from_args(parser.parse_args([*required, "--template-overhead", "0"]))
    assert measured.template_overhead == 0
    probed = _probe(backend, template_overhead=measured.template_overhead)
    assert {FEATURE_TOOLS, GUARANTEE_PROMPT_OVERFLOW_REFUSED} <= set(probed.features)
    assert SCOPE_PROMPT_OVERFLOW_REFUSED_EXCEPT_TOOLS not in probed.features


def test_reasoning_is_declared_when_the_reply_carries_it(make_backend: Callable) -> None:
    probed = _probe(make_backend(default_reply=Reply(content="x", reasoning_content="hmm")))
    assert FEATURE_REASONING in probed.features


def test_penalties_are_declared_only_for_known_samplers(make_backend: Callable) -> None:
    assert FEATURE_PENALTIES not in _probe(make_backend()).features
    backend = make_backend(model_fields={"owned_by": "vllm"})
    assert FEATURE_PENALTIES in _probe(backend).features


def test_context_must_be_told_when_no_route_reports_it(make_backend: Callable) -> None:
    with pytest.raises(WorkerStartupError, match="--context"):
        _probe(make_backend(), context=None)
    vllm = make_backend(model_fields={"owned_by": "vllm", "max_model_len": 8192})
    assert _probe(vllm, context=None).context == 8192


def test_an_unserved_model_is_refused_at_startup(make_backend: Callable) -> None:
    with pytest.raises(WorkerStartupError, match="does not serve"):
        _probe(make_backend(), model="other")


# -- the counter -------------------------------------------------------------------------


def test_exact_counter_equals_the_backends_prompt_tokens(
    make_backend: Callable, demo_gguf: Path
) -> None:
    backend = make_backend(model_fields={"owned_by": "me"})
    probed = _probe(backend, gguf=demo_gguf)
    assert probed.counter.kind == "exact"
    assert probed.calibration.probe_count == probed.calibration.probe_usage
    assert probed.calibration.probe_usage == backend.prompt_tokens_for(PROBE_MESSAGES)
    assert GUARANTEE_PROMPT_OVERFLOW_REFUSED in probed.features


def test_a_short_exact_counter_falls_back_to_the_byte_bound(
    make_backend: Callable, demo_gguf: Path
) -> None:
    backend = make_backend(model_fields={"owned_by": "me"}, prompt_tokens_offset=2)
    probed = _probe(backend, gguf=demo_gguf)
    assert probed.counter.kind == "byte-bound"
    assert "short" in probed.calibration.note
    assert GUARANTEE_PROMPT_OVERFLOW_REFUSED in probed.features


def test_no_guarantee_when_even_the_bound_is_short(make_backend: Callable) -> None:
    # Two tokens per byte: no constant fixed part makes one byte per token an upper bound.
    probed = _probe(make_backend(counter=lambda text: 2 * len(text.encode())))
    assert GUARANTEE_PROMPT_OVERFLOW_REFUSED not in probed.features


def test_no_guarantee_when_the_backend_reports_no_usage(make_backend: Callable) -> None:
    backend = make_backend(default_reply=Reply(content='{"ok": true}', include_usage=False))
    assert GUARANTEE_PROMPT_OVERFLOW_REFUSED not in _probe(backend).features


# -- jobs: mapping, fit, errors ------------------------------------------------------------


def test_llama_cpp_python_job_mapping_and_reasoning_split(
    make_backend: Callable, demo_gguf: Path
) -> None:
    backend = make_backend(model_fields={"owned_by": "me"})
    runner, client = _runner(backend, gguf=demo_gguf)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    payload = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "temperature": 0.3,
        "top_p": 0.9,
        "frequency_penalty": 0.1,
        "presence_penalty": 0.2,
        "seed": 5,
        "stop": ["END"],
        "tools": [TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
        "reasoning_effort": "medium",
    }
    backend.script(Reply(content="<think>weighing</think>The answer"))
    reply = runner.chat_reply(_job(payload), None)
    client.close()
    sent = backend.chat_requests()[-1].body
    for key in ("max_tokens", "temperature", "top_p", "frequency_penalty", "presence_penalty"):
        assert sent[key] == payload[key]
    assert (sent["seed"], sent["stop"], sent["model"]) == (5, ["END"], "double-model")
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert sent["response_format"] == {"type": "json_object", "schema": schema}
    assert "reasoning_effort" not in sent
    assert "parallel_tool_calls" not in sent
    assert reply is not None
    assert (reply.content, reply.reasoning_content) == ("The answer", "weighing")
    assert reply.usage["prompt_tokens"] == backend.prompt_tokens_for(sent["messages"])


def test_tool_call_replies_are_submitted_structured(make_backend: Callable) -> None:
    backend = make_backend()
    runner, client = _runner(backend)
    backend.script(Reply(content=None, tool_calls=[{"name": "lookup", "arguments": '{"q": 1}'}]))
    payload = {
        "messages": [{"role": "user", "content": "x"}],
        "tools": [TOOL],
        "tool_choice": "auto",
    }
    reply = runner.chat_reply(_job(payload), None)
    client.close()
    assert reply is not None
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls[0]["function"] == {"name": "lookup", "arguments": '{"q": 1}'}


def test_a_conversation_that_does_not_fit_is_faulted_before_the_backend(
    make_backend: Callable,
) -> None:
    backend = make_backend()
    runner, client = _runner(backend, context=512)
    asked = len(backend.chat_requests())
    long = {"messages": [{"role": "user", "content": "x" * 600}]}
    with pytest.raises(PromptOverflow, match="byte-bound"):
        runner.chat_reply(_job(long), None)
    short_but_long_reply = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 500}
    with pytest.raises(PromptOverflow):
        runner.chat_reply(_job(short_but_long_reply), None)
    fits = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 100}
    assert runner.chat_reply(_job(fits), None) is not None
    client.close()
    assert len(backend.chat_requests()) == asked + 1  # only the one that fits was sent


def test_a_job_without_the_clients_max_tokens_gets_the_room_the_count_leaves(
    make_backend: Callable,
) -> None:
    """fit_max_tokens (the client left max_tokens out): max_tokens is lowered to the room the
    worker's own count leaves, and only a room under REPLY_RESERVE_TOKENS faults; without the
    flag the same max_tokens must fit whole."""
    backend = make_backend()
    runner, client = _runner(backend, context=512)
    messages = [{"role": "user", "content": "x" * 300}]
    counted = runner.probed.counter.count(messages, None)
    assert REPLY_RESERVE_TOKENS <= 512 - counted < 500
    asked = len(backend.chat_requests())
    fitted = {"messages": messages, "max_tokens": 500, PAYLOAD_FIT_MAX_TOKENS: True}
    assert runner.chat_reply(_job(fitted), None) is not None
    assert backend.chat_requests()[-1].body["max_tokens"] == 512 - counted
    assert PAYLOAD_FIT_MAX_TOKENS not in backend.chat_requests()[-1].body
    with pytest.raises(PromptOverflow):
        runner.chat_reply(_job({"messages": messages, "max_tokens": 500}), None)
    crowded = [{"role": "user", "content": "x" * (512 - counted + 300 - REPLY_RESERVE_TOKENS + 1)}]
    assert 0 < 512 - runner.probed.counter.count(crowded, None) < REPLY_RESERVE_TOKENS
    with pytest.raises(PromptOverflow):
        runner.chat_reply(
            _job({"messages": crowded, "max_tokens": 500, PAYLOAD_FIT_MAX_TOKENS: True}), None
        )
    client.close()
    assert len(backend.chat_requests()) == asked + 1  # only the one that fits was sent


@pytest.mark.parametrize(
    ("scripted", "error", "text"),
    [
        (Failure(status=500, message="boom"), BackendError, "500: boom"),
        (
            Failure(
                status=400,
                body={"error": {"message": "too long", "code": "context_length_exceeded"}},
            ),
            BackendError,
            "context_length_exceeded",
        ),
        (Failure(status=200, body={"nothing": True}), BackendInvalidReply, "no choice"),
        (Reply(content="a b c", stream_error_after=1), BackendInvalidReply, "error event"),
    ],
)
def test_backend_failures_become_fault_reasons(
    make_backend: Callable, scripted: Any, error: type, text: str
) -> None:
    backend = make_backend()
    runner, client = _runner(backend)
    backend.script(scripted)
    streamed = isinstance(scripted, Reply)
    with pytest.raises(error, match=text):
        runner.chat_reply(
            _job({"messages": [{"role": "user", "content": "x"}]}, stream=streamed),
            (lambda delta: False) if streamed else None,
        )
    client.close()


def test_a_hanging_backend_times_out(make_backend: Callable) -> None:
    backend = make_backend()
    runner, client = _runner(backend, timeout=0.5)
    backend.script(Hang())
    with pytest.raises(BackendTimeout):
        runner.chat_reply(_job({"messages": [{"role": "user", "content": "x"}]}), None)
    client.close()


def test_the_job_ttl_bounds_the_backend_deadline(make_backend: Callable) -> None:
    runner, client = _runner(make_backend(), timeout=300)
    client.close()
    assert runner.deadline(_job({}, ttl=60)) == 55
    assert runner.deadline(_job({})) == 300


def test_an_unreachable_backend_and_a_job_without_messages(make_backend: Callable) -> None:
    backend = make_backend()
    runner, client = _runner(backend)
    with pytest.raises(UnservableJob):
        runner.chat_reply(_job({"prompt": "not a chat job"}), None)
    backend.close()
    with pytest.raises(BackendUnreachable):
        runner.chat_reply(_job({"messages": [{"role": "user", "content": "x"}]}), None)
    client.close()


def test_streamed_job_posts_its_content_through_the_progress_seam(make_backend: Callable) -> None:
    backend = make_backend()
    runner, client = _runner(backend)
    backend.script(Reply(content="one two three"))
    posted: list[str] = []
    job = _job({"messages": [{"role": "user", "content": "x"}]}, stream=True)
    reply = runner.chat_reply(job, lambda delta: posted.append(delta) or False)
    assert reply is not None
    assert reply.content == "one two three"
    assert "".join(posted) == "one two three"
    assert backend.chat_requests()[-1].body["stream"] is True
    backend.script(Reply(content="one two three"))
    assert runner.chat_reply(job, lambda delta: True) is None  # cancelled: nothing to submit
    client.close()


# -- the loop, through the real native API ------------------------------------------------


def test_the_loop_faults_a_job_the_backend_cannot_serve(
    make_backend: Callable,
    native_service: Any,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    from runtime.worker.cli import RunningWorker

    requester, owner = make_user("req", kudos=100), make_user("owner")
    request_id = submit_text(native_client, requester.api_key)
    backend = make_backend()  # the double serves no /v1/completions: each text job fails
    config = WorkerConfig(
        native_service.url,
        owner.api_key,
        backend.openai_base_url,
        context=CONTEXT,
        poll_interval=0.05,
    )
    worker = RunningWorker.start(config)
    try:
        # Each fault puts the request back; the third fault faults the request itself.
        waited = threading.Event()
        while not status(native_client, request_id)["faulted"]:
            assert not waited.wait(0.05), "the request never faulted"
            assert worker.loop.served < 10, "the request never faulted"
    finally:
        worker.stop(grace=5)
    assert worker.loop.served == 3  # popped, failed on the backend, faulted: three times
    assert worker.loop.held == {}


def test_stopping_faults_the_job_it_holds(
    make_backend: Callable,
    native_service: Any,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    from runtime.worker.cli import RunningWorker
    from tests.integration.chat_flow import chat_async, chat_status

    requester, owner = make_user("req", kudos=100), make_user("owner")
    backend = make_backend()
    config = WorkerConfig(
        native_service.url,
        owner.api_key,
        backend.openai_base_url,
        context=CONTEXT,
        poll_interval=0.05,
    )
    worker = RunningWorker.start(config)
    backend.script(Hang())  # the job's backend call never answers
    waited = threading.Event()
    try:
        until_listed(native_client)
        body = {"model": "double-model", "messages": [{"role": "user", "content": "hi"}]}
        response = chat_async(native_client, requester.api_key, body)
        assert response.status_code == 202, response.text
        request_id = response.json()["id"]
        while not worker.loop.held:
            assert not waited.wait(0.05), "the job was never popped"
        held = list(worker.loop.held)
    finally:
        faulted = worker.stop(grace=0.2)
    assert faulted == held
    state = chat_status(native_client, request_id)
    assert state["processing"] == 0
    assert not state["done"]


def test_the_worker_command_prints_a_line_per_job_step_not_per_http_call(
    make_backend: Callable,
    native_service: Any,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    # What an operator reads on `horde-chat worker`'s console while it serves: its own lines
    # for each job, not httpx's line for each of the job's HTTP calls.
    from tests.integration.chat_flow import chat_async, chat_status

    requester, owner = make_user("req", kudos=100), make_user("owner")
    backend = make_backend(default_reply=Reply(content="hello"))
    command = [
        sys.executable, "-m", "runtime.cli", "worker", "--horde", native_service.url,
        "--api-key", owner.api_key, "--backend", backend.openai_base_url,
        "--context", str(CONTEXT), "--chat-only",
    ]  # fmt: skip
    worker = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        until_listed(native_client)
        body = {"model": "double-model", "messages": [{"role": "user", "content": "hi"}]}
        response = chat_async(native_client, requester.api_key, body)
        assert response.status_code == 202, response.text
        request_id = response.json()["id"]
        until(lambda: chat_status(native_client, request_id)["done"], "the job was not served")
    finally:
        worker.send_signal(signal.SIGINT)
        printed, _ = worker.communicate(timeout=30)
    assert [line for line in printed.splitlines() if line.endswith(": submitted")], printed
    assert "HTTP Request" not in printed, printed


def test_a_worker_that_stops_leaves_the_pool_at_once(
    make_backend: Callable,
    native_service: Any,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    """A worker counts as online for 300 s after its last pop (upstream's rule), so one that
    stopped kept its model listed and a request for it queued, waiting for it. Stopping
    cleanly, it cuts its pop waiting on the native API (which would otherwise run again on a
    wake and check it in again) and leaves the pool: its model is off status/models (what
    the front's /v1/models reads), it is offline on /workers, and a request for its model
    is refused at submission, nothing queued."""
    from runtime.worker.cli import RunningWorker
    from tests.integration.chat_flow import chat_async

    requester, owner = make_user("req", kudos=100), make_user("owner")
    backend = make_backend()
    hub = native_service.app.hub
    waiting = hub.waiting
    worker = RunningWorker.start(
        WorkerConfig(native_service.url, owner.api_key, backend.openai_base_url, context=CONTEXT)
    )
    try:
        until(lambda: hub.waiting > waiting, "the worker's pop to wait")
        models = native_client.get("/status/models").json()
        assert [m["name"] for m in models] == [backend.model]
    finally:
        assert worker.stop(grace=5) == []
    until(lambda: hub.waiting == waiting, "the native API to see the pop cut")
    assert native_client.get("/status/models").json() == []
    (listed,) = native_client.get("/workers").json()
    assert listed["online"] is False
    body = {"model": backend.model, "messages": [{"role": "user", "content": "hi"}]}
    refused = chat_async(native_client, requester.api_key, body)
    assert refused.status_code == 503, refused.text
    assert refused.json()["rc"] == "no_eligible_worker"


def test_leaving_is_the_owners_alone(
    native_client: httpx.Client, make_user: Callable[..., MadeUser]
) -> None:
    owner, stranger = make_user("owner"), make_user("stranger")
    pop = {"name": "kept", "models": ["m"], "max_length": 80}
    popped = native_client.post("/generate/text/pop", headers={"apikey": owner.api_key}, json=pop)
    assert popped.status_code == 200, popped.text
    leave = {"name": "kept"}
    for key, code in (
        (stranger.api_key, "WrongCredentials"),
        ("0000000000", "AnonForbiddenWorker"),
    ):
        refused = native_client.post("/generate/text/leave", headers={"apikey": key}, json=leave)
        assert (refused.status_code, refused.json()["rc"]) == (403, code)
    assert [m["name"] for m in native_client.get("/status/models").json()] == ["m"]
    unknown = {"name": "never-popped"}
    gone = native_client.post(
        "/generate/text/leave", headers={"apikey": owner.api_key}, json=unknown
    )
    assert gone.json() == {"name": "never-popped", "online": False}
    left = native_client.post("/generate/text/leave", headers={"apikey": owner.api_key}, json=leave)
    assert left.json() == {"name": "kept", "online": False}
    assert native_client.get("/status/models").json() == []
    again = native_client.post("/generate/text/pop", headers={"apikey": owner.api_key}, json=pop)
    assert again.status_code == 200, again.text
    assert [m["name"] for m in native_client.get("/status/models").json()] == ["m"]


def test_leaving_cuts_the_pop_still_waiting_first(
    native_service: Any, native_client: httpx.Client, make_user: Callable[..., MadeUser]
) -> None:
    """A pop left waiting would be run again by the next wake and check the worker in again
    (or take a job nobody would run): ``leave`` cuts it before it signs off, and the native
    API, seeing its client gone, ends that long poll."""
    owner = make_user("owner")
    hub = native_service.app.hub
    waiting = hub.waiting
    horde = HordeClient(native_service.url, owner.api_key)
    ended: list[BaseException] = []

    def pop() -> None:
        try:
            horde.pop({"name": "cut", "models": ["m"], "max_length": 80, "wait": 30})
        except PopsCut as exc:
            ended.append(exc)

    popping = threading.Thread(target=pop, daemon=True)
    popping.start()
    try:
        until(lambda: hub.waiting > waiting, "the pop to wait")
        assert horde.leave("cut")
        until(lambda: not popping.is_alive(), "the pop to end", seconds=20)  # its wait is 30 s
        assert len(ended) == 1
        until(lambda: hub.waiting == waiting, "the native API to see the pop cut")
        assert native_client.get("/status/models").json() == []
    finally:
        horde.close()
