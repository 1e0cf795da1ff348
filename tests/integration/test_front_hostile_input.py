"""Hostile input on the front: the real front as its own process (``python -m
runtime.front``, shipped settings) beside the real native API.

- Every malformed body is a 400 in OpenAI's envelope, never a 500: any nesting depth (the
  json module's RecursionError), non-finite numbers (``1e400``, NaN and Infinity literals),
  lone surrogates, NUL, a 900-deep json_schema, bytes that are not UTF-8; and no line the
  front logged holds the request's text or a traceback.
- The caps: item caps (content parts, tool calls, metadata) are 400s naming the array; the
  text allowance and the inline images' allowance are 413s saying which; a body over the
  body cap is 413 from its Content-Length or while it streams (chunked).
- A 30 MB body (which took the front from 185 MB to over 1 GB while it was parsed) is refused
  before it is parsed: the front's peak RSS grows by less than RSS_BOUND. The latency other
  clients see meanwhile is a figure of bench/front_hostile.py, not asserted here.
- Trusted proxies are explicit: by default X-Forwarded-For from a loopback client does not
  change the address the front forwards to the native API (and the native API stores);
  with HORDE_FRONT_FORWARDED_ALLOW_IPS naming the proxy, it does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from runtime.body_caps import DEFAULT_MAX_BODY_BYTES, INLINE_IMAGE_BYTES, TEXT_BODY_BYTES
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import MadeUser
from tests.integration.test_front_waits import SUBMIT, TRUSTED_ONLY, front_on, rows
from tests.support.chat_worker import ChatTestWorker
from tests.support.dropping_proxy import DroppingProxy, split

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MODEL = "hostile-model"
MARKER = "PROMPT-MARKER-5ac1e"
"""Stands in every body's text: no log line of the front may hold it."""
RSS_BOUND = 64 * 1024 * 1024
"""Peak RSS growth allowed while 30 MB bodies are refused (parsing one took ~800 MB)."""
MB = 1024 * 1024


class Front(NamedTuple):
    process: subprocess.Popen[str]
    url: str
    log: Path


def start_front(stores: EmbeddedStores, native_url: str, log: Path) -> Front:
    env = {
        **os.environ,
        "HORDE_REDIS_URL": stores.redis_url,
        "HORDE_FRONT_NATIVE_ROOTS": native_url,
        "HORDE_FRONT_HOST": "127.0.0.1",
        "HORDE_FRONT_PORT": "0",
    }
    env.pop("HORDE_FRONT_FORWARDED_ALLOW_IPS", None)
    with log.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "runtime.front"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("chat front: "):
        process.kill()
        process.wait(timeout=10)
        raise RuntimeError(f"the front did not start: {line!r}: {log.read_text()[-2000:]}")
    return Front(process, line.removeprefix("chat front: ").removesuffix("/v1"), log)


def stop(front: Front) -> None:
    front.process.terminate()
    try:
        front.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        front.process.kill()
        front.process.wait(timeout=10)
    finally:
        if front.process.stdout is not None:
            front.process.stdout.close()


@pytest.fixture(scope="module")
def front(
    horde_stores: EmbeddedStores, native_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Front]:
    started = start_front(horde_stores, native_url, tmp_path_factory.mktemp("front") / "err")
    try:
        yield started
    finally:
        stop(started)


def post(url: str, body: bytes | Any, **options: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", **options.pop("headers", {})}
    return httpx.post(
        f"{url}/v1/chat/completions", content=content, headers=headers, timeout=120, **options
    )


def refusal(response: httpx.Response, status: int) -> dict[str, Any]:
    """The OpenAI error of a refusal with ``status``."""
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert set(error) >= {"message", "type", "param", "code"}
    assert MARKER not in error["message"]
    return dict(error)


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": MARKER}], **fields}


def nested(depth: int) -> str:
    return "[" * depth + f'"{MARKER}"' + "]" * depth


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": MARKER}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}


def data_url(size: int) -> str:
    return "data:image/png;base64," + "A" * size


def image_part(size: int) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(size)}}


DRY_RUN = {"horde": {"dry_run": True}}
"""Refused by the front after validation: a body answered with it passed every check before."""
HEAD = f'{{"model":"{MODEL}","messages":[{{"role":"user","content":'.encode()

MALFORMED: dict[str, tuple[bytes, str]] = {
    "10,000-deep body": (("[" * 10_000 + "]" * 10_000).encode(), "InvalidJSON"),
    "10,000-deep content": (HEAD + nested(10_000).encode() + b"}]}", "InvalidJSON"),
    "1e400": (
        json.dumps(chat()).encode()[:-1] + b',"temperature":1e400}',
        "InvalidPayload",
    ),
    "NaN": (json.dumps(chat()).encode()[:-1] + b',"temperature":NaN}', "InvalidJSON"),
    "-Infinity": (json.dumps(chat()).encode()[:-1] + b',"top_p":-Infinity}', "InvalidJSON"),
    "lone surrogate": (HEAD + f'"{MARKER} \\ud800 end"}}]}}'.encode(), "InvalidJSON"),
    "lone low surrogate in a key": (
        json.dumps(chat()).encode()[:-1] + b',"metadata":{"\\udc00":"x"}}',
        "InvalidJSON",
    ),
    "NUL": (HEAD + f'"{MARKER}\\u0000"}}]}}'.encode(), "NulByteInPayload"),
    "900-deep json_schema": (
        json.dumps(chat()).encode()[:-1]
        + b',"response_format":{"type":"json_schema","json_schema":{"name":"deep","schema":'
        + b'{"type":"object","properties":{"a":' * 900
        + b'{"type":"string"}'
        + b"}}" * 900
        + b"}}}",
        "InvalidJSON",
    ),
    "not UTF-8": (HEAD + b'"' + MARKER.encode() + b'\xff\xfe"}]}', "InvalidJSON"),
    "truncated": (json.dumps(chat()).encode()[:-9], "InvalidJSON"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_body_is_a_400_in_openais_envelope(front: Front, name: str) -> None:
    body, code = MALFORMED[name]
    error = refusal(post(front.url, body), 400)
    assert error["code"] == code, error
    if code == "InvalidPayload":
        assert error["param"] == "temperature"
    assert front.process.poll() is None


WRONG_TYPES = {
    "messages.[0].role": chat(messages=[{"role": ["user"], "content": MARKER}]),
    "messages.[0].content.[0].type": chat(
        messages=[{"role": "user", "content": [{"type": {"a": 1}, "text": MARKER}]}]
    ),
    "response_format.type": chat(response_format={"type": [[], {}]}),
}


@pytest.mark.parametrize("param", list(WRONG_TYPES))
def test_a_list_or_object_where_a_name_belongs_is_a_400(front: Front, param: str) -> None:
    """Found by schemathesis: a list as response_format's type was looked up in a dict
    (TypeError: unhashable, a 500); so were a role and a content part's type."""
    error = refusal(post(front.url, WRONG_TYPES[param]), 400)
    assert (error["code"], error["param"]) == ("InvalidChatParameter", param)


def test_surrogate_pairs_and_a_schema_twenty_levels_deep_pass_the_parse(front: Front) -> None:
    """Legitimate bodies near the bounds are not refused by them: an emoji as an escaped
    pair, and a response_format schema nested 20 levels (under the spec's max_depth)."""
    pair = HEAD + b'"\\ud83d\\ude00 hello"}],"horde":{"dry_run":true}}'
    assert refusal(post(front.url, pair), 400)["code"] == "UnsupportedChatParameter"
    deep = chat(response_format=deep_schema(20), **DRY_RUN)
    assert refusal(post(front.url, deep), 400)["param"] == "horde.dry_run"


def test_item_caps_are_400s_naming_the_array(front: Front) -> None:
    parts = [{"type": "text", "text": MARKER}] * 257
    error = refusal(post(front.url, chat(messages=[{"role": "user", "content": parts}])), 400)
    assert (error["code"], error["param"]) == ("InvalidChatParameter", "messages.[0].content")
    assert "maximum length 256" in error["message"]

    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    calls = [{**call, "id": f"c{i}"} for i in range(129)]
    messages = [
        {"role": "user", "content": MARKER},
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    tools = [{"type": "function", "function": {"name": "f"}}]
    error = refusal(post(front.url, chat(messages=messages, tools=tools)), 400)
    assert (error["code"], error["param"]) == ("InvalidChatParameter", "messages.[1].tool_calls")

    metadata = {f"k{i}": MARKER for i in range(17)}
    error = refusal(post(front.url, chat(metadata=metadata)), 400)
    assert (error["code"], error["param"]) == ("InvalidChatParameter", "metadata")


def test_a_long_tool_history_answered_in_reverse_order_is_accepted(front: Front) -> None:
    """128 calls answered in reverse order, 15 times (1,936 messages, the count-by-id check
    that replaced the O(calls x answers) one): every answer found, so the refusal is the
    dry run's, after the whole history was checked; one call left open is named."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": MARKER}]
    for turn in range(15):
        ids = [f"t{turn}c{i}" for i in range(128)]
        calls = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": i, "content": "x"} for i in reversed(ids)]
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = chat(messages=messages, tools=tools, **DRY_RUN)
    assert refusal(post(front.url, body), 400)["param"] == "horde.dry_run"
    messages.pop()  # the last call is left unanswered
    error = refusal(post(front.url, chat(messages=messages, tools=tools)), 400)
    assert error["code"] == "UnansweredToolCalls"
    assert error["message"].endswith("t14c0")


def test_the_text_and_the_inline_images_have_their_own_allowances(front: Front) -> None:
    text = MARKER * ((TEXT_BODY_BYTES + 4096) // len(MARKER))
    error = refusal(post(front.url, chat(messages=[{"role": "user", "content": text}])), 413)
    assert error["code"] == "PayloadTooLarge"
    assert "text (everything but inline images)" in error["message"]
    assert f"limit of {TEXT_BODY_BYTES} bytes" in error["message"]

    half = INLINE_IMAGE_BYTES // 2 + 4096
    images = [{"type": "text", "text": MARKER}, image_part(half), image_part(half)]
    body = chat(messages=[{"role": "user", "content": images}])
    assert len(json.dumps(body)) < DEFAULT_MAX_BODY_BYTES  # under the body cap
    error = refusal(post(front.url, body), 413)
    assert "inline images (data URLs)" in error["message"]
    assert "send larger images by URL" in error["message"]

    # one image of 12 MB inline and a little text are within both: refused only at the end
    parts = [{"type": "text", "text": MARKER}, image_part(12 * MB)]
    body = chat(messages=[{"role": "user", "content": parts}], **DRY_RUN)
    assert refusal(post(front.url, body), 400)["param"] == "horde.dry_run"


def thirty_mb_of_objects() -> bytes:
    return b"[" + b"{}," * (10 * MB) + b"{}]"


def chunked(body: bytes, size: int = 256 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_a_body_over_the_cap_is_refused_from_its_length_or_while_it_streams(
    front: Front,
) -> None:
    body = thirty_mb_of_objects()
    error = refusal(post(front.url, body), 413)
    assert error["message"] == (
        f"The request body is larger than the limit of {DEFAULT_MAX_BODY_BYTES} bytes."
    )
    response = httpx.post(
        f"{front.url}/v1/chat/completions",
        content=chunked(body),  # no Content-Length: the cap holds while the body streams
        headers={"content-type": "application/json"},
        timeout=120,
    )
    assert refusal(response, 413)["code"] == "PayloadTooLarge"


def status_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_thirty_mb_bodies_are_refused_before_they_are_parsed(
    horde_stores: EmbeddedStores, native_url: str, tmp_path: Path
) -> None:
    """A fresh front (its peak RSS is its own): two 30 MB bodies of ``{}`` (with a length,
    and chunked) and the largest text body of ``{}`` the allowances let through, while the
    peak RSS grows by less than RSS_BOUND."""
    fresh = start_front(horde_stores, native_url, tmp_path / "err")
    try:
        assert httpx.get(f"{fresh.url}/healthz", timeout=30).status_code == 200
        before = status_bytes(fresh.process.pid, "VmRSS")
        body = thirty_mb_of_objects()
        assert post(fresh.url, body).status_code == 413
        response = httpx.post(
            f"{fresh.url}/v1/chat/completions",
            content=chunked(body),
            headers={"content-type": "application/json"},
            timeout=120,
        )
        assert response.status_code == 413
        fitting = b"[" + b"{}," * ((TEXT_BODY_BYTES - 16) // 3) + b"{}]"
        error = refusal(post(fresh.url, fitting), 400)
        assert error["message"].endswith("The request body must be a JSON object.")
        growth = status_bytes(fresh.process.pid, "VmHWM") - before
        assert growth < RSS_BOUND, f"peak RSS grew by {growth / MB:.0f} MiB"
    finally:
        stop(fresh)


def test_the_front_logs_no_request_text_and_no_traceback(front: Front) -> None:
    """After every refusal above (the module's front): its log holds neither."""
    assert post(front.url, MALFORMED["10,000-deep body"][0]).status_code == 400
    logged = front.log.read_text()
    assert MARKER not in logged
    assert "Traceback" not in logged
    assert "RecursionError" not in logged


FORWARDED = {"X-Forwarded-For": "203.0.113.9"}


@pytest.mark.parametrize("trusted", [(), ("127.0.0.1",)], ids=["default", "proxy set"])
def test_x_forwarded_for_counts_only_from_a_configured_proxy(
    horde_stores: EmbeddedStores,
    native_service: Any,
    native_db: Any,
    native_url: str,
    requester: MadeUser,
    owner: MadeUser,
    trusted: tuple[str, ...],
) -> None:
    """The front forwards the client's address to the native API (its passkey vouches for
    it): the connection's peer by default, whatever X-Forwarded-For says; the header's
    address once HORDE_FRONT_FORWARDED_ALLOW_IPS names the peer as a proxy."""
    horde = {**TRUSTED_ONLY["horde"], "availability_mode": "fail_fast"}
    with (
        ChatTestWorker(native_url, owner.api_key, model=MODEL),  # untrusted: serves nothing
        DroppingProxy(native_service.port) as proxy,
        front_on(horde_stores, [proxy.url], forwarded_allow_ips=trusted) as served,
    ):
        response = post(
            served.url,
            chat(horde=horde),
            headers={**FORWARDED, "authorization": f"Bearer {requester.api_key}"},
        )
        assert response.status_code == 503, response.text  # fail_fast: queue_unavailable
        (submit,) = proxy.sent(SUBMIT)
    expected = "203.0.113.9" if trusted else "127.0.0.1"
    headers, _ = split(submit)
    assert headers["x-forwarded-for"] == expected
    assert [row.ipaddr for row in rows(native_db)] == [expected]
