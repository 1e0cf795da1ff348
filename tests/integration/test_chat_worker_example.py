"""The minimal chat worker of tools/chat_worker_example/ (docs/chat-worker-guide.md), run as
an operator runs it: check.py, then worker.py as a subprocess, against the real native API
and llama-cpp-python's server on the demo model.

Every expected number is measured here on the backend itself, not taken from the example.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from generated.errors import PromptOverflow
from runtime.native.db.tables import Generation, Worker
from runtime.native.server import NativeService
from runtime.worker.llama_server import LlamaServer
from runtime.worker.tiny_model import DEMO_REPLY, MODEL_NAME
from tests.conftest import MadeUser
from tests.integration.chat_flow import chat_async, chat_status
from tests.support.demo_model import UNIT_TOOL, build_demo_gguf
from tests.support.workers import listed_workers

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "tools" / "chat_worker_example"
CONTEXT = 1024
PROBE_CONVERSATION = [  # worker.py's probe conversation, as the guide shows it
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Wie spät ist es? 日本語で 🙂"},
    {"role": "assistant", "content": "Keine Ahnung."},
    {"role": "user", "content": "Then tell me who you are."},
]
POLLS = 600  # a bound on waiting (0.05 s apart), never an assertion on time


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with LlamaServer(build_demo_gguf(tmp_path_factory), n_ctx=CONTEXT) as running:
        yield running


def usage_of(server: LlamaServer, messages: list[dict[str, Any]], **extra: Any) -> dict[str, int]:
    """The backend's own usage for a conversation (what a worker must report)."""
    body = {"model": MODEL_NAME, "messages": messages, **extra}
    response = httpx.post(f"{server.openai_base_url}/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json()["usage"])


def run_check(server: LlamaServer, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(EXAMPLE / "check.py"), "--backend", server.openai_base_url]
    done = subprocess.run(
        [*command, *options], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done


class ExampleWorker:
    """worker.py as a child process; its output goes to a file read after it stops."""

    def __init__(
        self, server: LlamaServer, horde: str, api_key: str, log: Path, *options: str
    ) -> None:
        self.log = log
        command = [
            sys.executable,
            str(EXAMPLE / "worker.py"),
            *("--horde", horde, "--api-key", api_key, "--backend", server.openai_base_url),
            *("--context", str(CONTEXT), "--poll-interval", "0.05", "--name", "example"),
            *options,
        ]
        with log.open("w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text()

    def line(self, prefix: str) -> Any:
        """The JSON after ``prefix`` on the line the worker printed it."""
        for line in self.output().splitlines():
            if line.startswith(prefix):
                return json.loads(line[len(prefix) :])
        raise AssertionError(f"no {prefix!r} line in:\n{self.output()}")

    def stop(self) -> None:
        self.process.terminate()  # SIGTERM: the worker faults what it holds and exits
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def start_worker(
    server: LlamaServer,
    native_service: NativeService,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
    tmp_path: Path,
) -> Iterator[Callable[..., ExampleWorker]]:
    """Starts worker.py with these extra options; returns once it is online (it popped)."""
    started: list[ExampleWorker] = []

    def start(*options: str) -> ExampleWorker:
        owner = make_user("operator")
        log = tmp_path / "worker.log"
        worker = ExampleWorker(server, native_service.url, owner.api_key, log, *options)
        started.append(worker)
        waited = threading.Event()
        for _ in range(POLLS):
            if listed_workers(native_client):
                return worker
            assert worker.process.poll() is None, worker.output()
            waited.wait(0.05)
        raise AssertionError(f"the example worker never popped:\n{worker.output()}")

    try:
        yield start
    finally:
        for worker in started:
            worker.stop()


@pytest.fixture
def example_worker(start_worker: Callable[..., ExampleWorker]) -> ExampleWorker:
    return start_worker()


def wait_done(client: httpx.Client, worker: ExampleWorker, request_id: str) -> dict[str, Any]:
    waited = threading.Event()
    for _ in range(POLLS):
        status = chat_status(client, request_id)
        if status["done"]:
            return status
        assert worker.process.poll() is None, worker.output()
        waited.wait(0.05)
    raise AssertionError(f"request {request_id} never ended:\n{worker.output()}")


def generations(sessions: sessionmaker[Session], request_id: str) -> list[Generation]:
    with sessions() as session:
        query = select(Generation).where(Generation.wp_id == uuid.UUID(request_id))
        return list(session.scalars(query).all())


def test_example_worker_answers_with_the_backends_reply_and_counts_and_declares_what_probes_showed(
    server: LlamaServer,
    example_worker: ExampleWorker,
    native_client: httpx.Client,
    native_db: sessionmaker[Session],
    make_user: Callable[..., MadeUser],
) -> None:
    requester = make_user("requester", kudos=100)
    messages = [{"role": "user", "content": "Who are you?"}]
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 64}
    response = chat_async(native_client, requester.api_key, body)
    assert response.status_code == 202, response.text
    status = wait_done(native_client, example_worker, response.json()["id"])

    (generation,) = status["generations"]
    assert (generation["content"], generation["finish_reason"]) == (DEMO_REPLY, "stop")
    assert generation["tool_calls"] == []
    backend = usage_of(server, messages, max_tokens=64)
    assert generation["usage"]["prompt_tokens"] == backend["prompt_tokens"]
    assert generation["usage"]["completion_tokens"] == backend["completion_tokens"]

    # What the worker declared is what check.py's probes show with the same options.
    checked = json.loads(run_check(server, "--context", str(CONTEXT), "--json").stdout)
    with native_db() as session:
        stored = session.scalars(select(Worker.chat_declaration)).one()
    declared = example_worker.line("declaration: ")
    assert declared == checked["declaration"]
    assert stored is not None
    assert stored["chat_features"] == declared["chat_features"]
    assert stored["chat_limits"]["max_context_length"] == CONTEXT
    # The byte bound counts over the backend (so the guarantee is declared), and without
    # --template-overhead it does not cover a tool preamble (so tools are not declared).
    calibration = example_worker.line("calibration: ")
    assert (
        calibration["usage"] == usage_of(server, PROBE_CONVERSATION, max_tokens=1)["prompt_tokens"]
    )
    assert calibration["counter"] == "byte-bound"
    assert calibration["counted"] >= calibration["usage"]
    assert "prompt_overflow_refused" in declared["chat_features"]
    assert "tools" in checked["features"]
    assert "tools" not in declared["chat_features"]


def test_example_worker_faults_a_conversation_over_its_context_with_prompt_overflow_never_trims(
    example_worker: ExampleWorker,
    native_client: httpx.Client,
    native_db: sessionmaker[Session],
    make_user: Callable[..., MadeUser],
) -> None:
    requester = make_user("requester", kudos=100)
    # 1,200 bytes take at least 1,200 of the demo's byte-level tokens (its context is 1,024);
    # by the horde's estimate of 3 characters per token they fit, so the request is routed.
    messages = [{"role": "user", "content": "x" * 1200}]
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 16}
    response = chat_async(native_client, requester.api_key, body)
    assert response.status_code == 202, response.text
    request_id = response.json()["id"]
    status = wait_done(native_client, example_worker, request_id)

    assert status["faulted"]
    assert status["generations"] == []
    faulted = generations(native_db, request_id)
    assert faulted
    for generation in faulted:
        assert generation.faulted
        assert generation.reply is None
        (reason,) = generation.gen_metadata
        assert (reason["type"], reason["value"]) == ("generation", "faulted")
        assert reason["ref"].startswith(f"{PromptOverflow.code}: ")
        assert f"(byte-bound count) but the backend has {CONTEXT};" in reason["ref"]


def test_example_worker_gives_a_request_without_max_tokens_as_much_as_fits(
    example_worker: ExampleWorker,
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    """700 bytes leave the byte bound room for a reply in the 1,024-token context, but not
    for the declared max_length (512): without max_tokens (as much as fits, the job's
    fit_max_tokens) the worker lowers max_tokens to the room and answers, not faults."""
    requester = make_user("requester", kudos=100)
    messages = [{"role": "user", "content": "x" * 700}]
    response = chat_async(
        native_client, requester.api_key, {"model": MODEL_NAME, "messages": messages}
    )
    assert response.status_code == 202, response.text
    status = wait_done(native_client, example_worker, response.json()["id"])
    assert not status["faulted"], example_worker.output()
    (generation,) = status["generations"]
    assert generation["content"]


def test_check_script_reports_the_counters_calibration_features_and_tool_preamble(
    server: LlamaServer,
) -> None:
    report = run_check(server, "--context", str(CONTEXT)).stdout
    lines = dict(line.split(": ", 1) for line in report.splitlines())

    usage = usage_of(server, PROBE_CONVERSATION, max_tokens=1)["prompt_tokens"]
    fixed = usage_of(server, [{"role": "user", "content": "."}], max_tokens=1)["prompt_tokens"]
    text = "\n".join(m["content"] for m in PROBE_CONVERSATION)
    raw = httpx.post(
        f"{server.base_url}/extras/tokenize/count", json={"input": text}, timeout=30
    ).json()["count"]
    bound = len(json.dumps(PROBE_CONVERSATION, ensure_ascii=False).encode()) + fixed
    forced = {"type": "function", "function": {"name": "flag"}}
    flag_tool = {
        "type": "function",
        "function": {
            "name": "flag",
            "parameters": {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
                "additionalProperties": False,
            },
        },
    }
    with_tool = usage_of(
        server, PROBE_CONVERSATION, max_tokens=1, tools=[flag_tool], tool_choice=forced
    )["prompt_tokens"]

    assert lines["probe conversation"].startswith(f"the backend counts {usage} prompt tokens")
    # llama-cpp-python renders no template on a route: the message texts alone count short.
    assert lines["count route"].endswith(f": {raw} -> short by {usage - raw}")
    assert usage > raw
    assert lines["byte bound"] == f"{bound} (fixed part {fixed}) -> over by {bound - usage}"
    assert lines["calibration"] == (
        f"the worker counts with the byte-bound counter -> over by {bound - usage}"
    )
    assert lines["tool preamble"].startswith(f"{with_tool - usage} tokens")
    shown = set(lines["features the probes showed"].split(", "))
    # one forced tool comes back as its call, "required" among two does not (llama-cpp-python)
    assert {"tools", "tool_choice_enforced", "seed"} <= shown
    assert "tool_choice_required_enforced" not in shown
    assert lines["guarantees it could declare"] == "prompt_overflow_refused"
    assert "prompt_overflow_refused" in json.loads(lines["declaration"])["chat_features"]
    assert lines["plain chat"].startswith(repr(DEMO_REPLY))


def test_example_worker_declares_tools_on_the_byte_bound_only_with_the_measured_preamble(
    server: LlamaServer,
    start_worker: Callable[..., ExampleWorker],
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    # The guide's order: check.py measures the preamble, worker.py is told it.
    preamble = json.loads(run_check(server, "--context", str(CONTEXT), "--json").stdout)[
        "tool_preamble"
    ]
    worker = start_worker("--template-overhead", str(preamble))
    assert "tools" in worker.line("declaration: ")["chat_features"]
    requester = make_user("requester", kudos=100)
    body = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [UNIT_TOOL],
        "tool_choice": "required",  # strict: one forced tool needs tool_choice_enforced
    }
    response = chat_async(native_client, requester.api_key, body)
    assert response.status_code == 202, response.text
    status = wait_done(native_client, worker, response.json()["id"])

    (generation,) = status["generations"]
    assert generation["finish_reason"] == "tool_calls"
    assert generation["content"] is None
    (call,) = generation["tool_calls"]
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["unit"] in ("celsius", "fahrenheit")


def test_example_worker_answers_a_tool_loops_second_turn_with_null_assistant_content(
    server: LlamaServer,
    start_worker: Callable[..., ExampleWorker],
    native_client: httpx.Client,
    make_user: Callable[..., MadeUser],
) -> None:
    # What the openai SDK, LangChain and openai-agents send back after a tool call: the
    # assistant's content is null beside its tool_calls (llama-cpp-python answers that with 500).
    preamble = json.loads(run_check(server, "--context", str(CONTEXT), "--json").stdout)[
        "tool_preamble"
    ]
    worker = start_worker("--template-overhead", str(preamble))
    requester = make_user("requester", kudos=100)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"unit": "celsius"}'},
    }
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12 degrees"},
    ]
    body = {
        "model": MODEL_NAME,
        "messages": messages,
        "tools": [UNIT_TOOL],
        "max_tokens": 32,
        "horde": {"conformance": "best_effort"},
    }
    response = chat_async(native_client, requester.api_key, body)
    assert response.status_code == 202, response.text
    status = wait_done(native_client, worker, response.json()["id"])

    assert not status["faulted"], worker.output()
    (generation,) = status["generations"]
    assert generation["content"] == DEMO_REPLY


def test_example_worker_leaves_the_pool_when_stopped(
    start_worker: Callable[..., ExampleWorker], native_client: httpx.Client
) -> None:
    """Stopped (SIGTERM, as Ctrl-C), it closes its waiting pop and leaves: offline at once,
    not 300 s after its last pop (guide, step 5)."""
    worker = start_worker()
    assert [m["name"] for m in native_client.get("/status/models").json()] == [MODEL_NAME]
    worker.stop()
    assert worker.process.returncode == 0, worker.output()
    assert worker.output().splitlines()[-1] == "stopped"
    assert native_client.get("/status/models").json() == []
    (listed,) = native_client.get("/workers").json()
    assert listed["online"] is False
