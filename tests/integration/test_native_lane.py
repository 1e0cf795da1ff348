"""The routes served without Flask (runtime.native.api.lane): the workers' pop, submit,
progress and heartbeat, and the clients' chat submit, answer as the Flask app answers
them. On the live service: the rate-limit headers and a 429's Retry-After from the lane's
own limiter check, an over-cap body (declared, and sent) 413, a bad body 400, the request
id. Then the same requests sent to the lane and to the Flask app (``create_app``'s test
client: the same views, through Flask, flask-limiter and its error handlers) get the same
status, body and headers.

Each test that looks at counts lowers the one route's limit to N per hour (an hour's window
cannot end between its calls).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest

from generated.rate_limits import KEY_PEER
from generated.routes import ROUTES
from runtime.body_caps import DEFAULT_MAX_BODY_BYTES
from runtime.native.api.app import create_app
from runtime.native.server import NativeService
from runtime.tables.rate_limits import RateLimit
from tests.conftest import MadeUser
from tests.support.native import LIMIT_COUNTS, forget_rate_limit_counts, route_limits

pytestmark = pytest.mark.integration

POP = ROUTES["text_pop"].path
SUBMIT = ROUTES["text_submit"].path
PROGRESS = ROUTES["text_progress"].path
HEARTBEAT = ROUTES["heartbeat"].path
CHAT = ROUTES["chat_async"].path
POP_BODY: dict[str, Any] = {"name": "lane-worker", "models": ["test-model-7B"], "max_length": 80}
LIMIT_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")


@pytest.fixture
def lane(native_service: NativeService, native_db: Any) -> Any:
    """An HTTP client at the service's root (the routes' paths are whole), clean database."""
    with httpx.Client(base_url=native_service.url, timeout=30) as client:
        yield client


def _cap(service: NativeService) -> int:
    return service.context.settings.max_body_bytes or DEFAULT_MAX_BODY_BYTES


def _limit_ttl(service: NativeService, operation_id: str) -> int:
    redis = service.context.redis
    (key,) = [k for k in redis.scan_iter(LIMIT_COUNTS) if f"/{operation_id}/" in str(k)]
    return int(redis.ttl(key))


def test_a_pop_and_a_submit_carry_the_rate_limit_headers_of_their_count(
    native_service: NativeService, lane: httpx.Client, owner: MadeUser
) -> None:
    forget_rate_limit_counts(native_service)
    key = {"apikey": owner.api_key}
    with route_limits(native_service, "text_pop", RateLimit("5 per hour", KEY_PEER)):
        pops = [lane.post(POP, headers=key, json=POP_BODY) for _ in range(2)]
        ttl = _limit_ttl(native_service, "text_pop")
    assert [p.status_code for p in pops] == [200, 200]
    assert [p.headers["X-RateLimit-Limit"] for p in pops] == ["5", "5"]
    assert [p.headers["X-RateLimit-Remaining"] for p in pops] == ["4", "3"]
    reset = int(pops[1].headers["X-RateLimit-Reset"])
    assert abs(reset - (time.time() + ttl)) <= 2
    assert abs(int(pops[1].headers["Retry-After"]) - ttl) <= 2
    with route_limits(native_service, "text_submit", RateLimit("7 per hour", KEY_PEER)):
        refused = lane.post(SUBMIT, headers=key, json={"id": "no-such-job"})
    assert refused.status_code == 400, refused.text  # the view's refusal, counted all the same
    assert refused.headers["X-RateLimit-Limit"] == "7"
    assert refused.headers["X-RateLimit-Remaining"] == "6"
    # heartbeat has no limit: no headers
    beat = lane.get(HEARTBEAT)
    assert beat.status_code == 200
    assert beat.json() == {"message": "OK", "version": "2.0.0"}
    assert not any(name in beat.headers for name in LIMIT_HEADERS)
    forget_rate_limit_counts(native_service)


def test_a_pop_over_its_limit_is_429_with_retry_after_at_the_windows_end(
    native_service: NativeService, lane: httpx.Client, owner: MadeUser
) -> None:
    forget_rate_limit_counts(native_service)
    key = {"apikey": owner.api_key}
    with route_limits(native_service, "text_pop", RateLimit("1 per hour", KEY_PEER)):
        first = lane.post(POP, headers=key, json=POP_BODY)
        second = lane.post(POP, headers=key, json=POP_BODY)
        ttl = _limit_ttl(native_service, "text_pop")
    assert first.status_code == 200, first.text
    assert second.status_code == 429, second.text
    assert second.json()["rc"] == "RateLimited"
    assert "1 per 1 hour" in second.json()["message"]
    assert second.headers["X-RateLimit-Remaining"] == "0"
    # the error's own Retry-After (1 s) is raised to the window's end, as flask-limiter does
    assert abs(int(second.headers["Retry-After"]) - ttl) <= 2
    assert ttl > 3000
    forget_rate_limit_counts(native_service)


@pytest.mark.parametrize("path", [POP, SUBMIT, PROGRESS])
def test_a_declared_body_over_the_cap_is_413_unread(
    native_service: NativeService, owner: MadeUser, path: str
) -> None:
    cap = _cap(native_service)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\napikey: {owner.api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {cap + 1}\r\n\r\n{{"
    )
    with socket.create_connection((native_service.host, native_service.port), timeout=10) as s:
        s.sendall(head.encode())  # one byte of the body, the rest never sent
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"413", answer[:300]
    assert b'"rc":"PayloadTooLarge"' in rest


@pytest.mark.parametrize("path", [POP, SUBMIT])
def test_a_sent_body_over_the_cap_is_413(
    native_service: NativeService, lane: httpx.Client, owner: MadeUser, path: str
) -> None:
    over = b'{"name": "' + b"x" * _cap(native_service) + b'"}'
    answer = lane.post(
        path, content=over, headers={"apikey": owner.api_key, "content-type": "application/json"}
    )
    assert answer.status_code == 413, answer.text
    assert answer.json()["rc"] == "PayloadTooLarge"


@pytest.mark.parametrize("path", [POP, SUBMIT, PROGRESS])
@pytest.mark.parametrize(
    ("raw", "rc"),
    [
        (b'{"name": ', "InvalidJSON"),
        (b"[1, 2]", "InvalidJSON"),
        (b'{"name": "a\\u0000b"}', "NulByteInPayload"),
        (b'{"name": 1e400}', "InvalidPayload"),
    ],
)
def test_a_bad_body_is_a_clean_400(
    lane: httpx.Client, owner: MadeUser, path: str, raw: bytes, rc: str
) -> None:
    answer = lane.post(
        path, content=raw, headers={"apikey": owner.api_key, "content-type": "application/json"}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["rc"] == rc
    assert answer.headers["content-type"] == "application/json"


def test_the_request_id_is_the_callers_or_a_new_one(lane: httpx.Client, owner: MadeUser) -> None:
    key = {"apikey": owner.api_key}
    given = lane.post(POP, headers={**key, "x-request-id": "wk-1.2"}, json=POP_BODY)
    assert given.headers["x-request-id"] == "wk-1.2"
    made = lane.post(POP, headers={**key, "x-request-id": "no spaces!"}, json=POP_BODY)
    assert made.headers["x-request-id"].startswith("native-")


def _cases(api_key: str, cap: int) -> list[tuple[str, str, dict[str, str], bytes]]:
    json_type = {"content-type": "application/json"}
    key = {"apikey": api_key, **json_type}
    pop = b'{"name": "lane-worker", "models": ["test-model-7B"], "max_length": 80}'
    chat = b'{"model": "test-model-7B", "messages": [{"role": "user", "content": "Hi"}]}'
    return [
        ("POST", POP, key, pop),  # registers the worker; no job
        ("POST", POP, key, pop),
        ("POST", POP, json_type, pop),  # no key
        ("POST", POP, {**key, "apikey": "not-a-key-of-anyone"}, pop),
        ("POST", POP, {**key, "Client-Agent": "x" * 1000}, pop),
        ("POST", POP, key, b'{"name": "lane-worker", "max_length": -1}'),
        ("POST", POP, key, b'{"name": '),
        ("POST", POP, key, b'{"name": "' + b"x" * cap + b'"}'),
        ("POST", POP, json_type, b'{"name": "' + b"x" * cap + b'"}'),  # headers first
        ("POST", SUBMIT, key, b'{"id": "00000000-0000-0000-0000-000000000000"}'),
        ("POST", SUBMIT, key, b'{"id": "00000000-0000-0000-0000-000000000000", "gen": 1}'),
        ("POST", SUBMIT, {"apikey": "0000000000", **json_type}, b'{"id": "x"}'),
        ("POST", PROGRESS, key, b'{"id": "x", "seq": 1, "delta": "d"}'),
        ("GET", HEARTBEAT, {}, b""),
        ("POST", CHAT, key, chat),  # no chat worker serves the model
        ("POST", CHAT, json_type, chat),  # the anonymous key
        ("POST", CHAT, {**key, "X-Horde-Service-Passkey": "wrong"}, chat),
        ("POST", CHAT, {**key, "apikey": "not-a-key-of-anyone"}, chat),
        ("POST", CHAT, key, b'{"model": "test-model-7B", "messages": []}'),
        ("POST", CHAT, key, b'{"model": "test-model-7B", "messages": [{"role": "user"}]}'),
        ("POST", CHAT, key, b'{"model": "test-model-7B", "temperature": NaN}'),
        ("POST", CHAT, key, b'["not", "an", "object"]'),
        ("POST", CHAT, key, b'{"model": "' + b"x" * cap + b'"}'),
        ("GET", CHAT, key, b""),  # Flask's 405 for both
    ]


COMPARED_HEADERS = ("content-type", "x-ratelimit-limit", "allow")


def test_the_lane_answers_as_the_flask_app_does(
    native_service: NativeService, lane: httpx.Client, owner: MadeUser
) -> None:
    """Each request sent to the lane (HTTP) and to the Flask app (its test client, the same
    views behind flask-limiter and Flask's error handlers): the same status, body and
    headers (the counts and times in them move between the two)."""
    app = create_app(native_service.context)
    flask_client = app.test_client()
    for method, path, headers, body in _cases(owner.api_key, _cap(native_service)):
        forget_rate_limit_counts(native_service)
        served = lane.request(method, path, headers=headers, content=body or None)
        forget_rate_limit_counts(native_service)
        flask = flask_client.open(path, method=method, headers=headers, data=body or None)
        where = f"{method} {path} {body[:60]!r}"
        assert served.status_code == flask.status_code, where
        assert served.content == flask.data, where
        lane_names = {k.lower() for k in served.headers} - {"date"}
        flask_names = {k.lower() for k, _ in flask.headers.items()}
        assert lane_names == flask_names, where
        for name in COMPARED_HEADERS:
            assert served.headers.get(name) == flask.headers.get(name), (where, name)
        if "retry-after" in lane_names:
            assert abs(int(served.headers["retry-after"]) - int(flask.headers["retry-after"])) <= 1
    # a refusal by the limit: the second pop (or chat submit) of a window of one
    key = {"apikey": owner.api_key}
    chat_body = {"model": "test-model-7B", "messages": [{"role": "user", "content": "Hi"}]}
    for operation_id, body in (("text_pop", POP_BODY), ("chat_async", chat_body)):
        _compare_refusals(native_service, lane, flask_client, operation_id, key, body)


def _compare_refusals(
    native_service: NativeService,
    lane: httpx.Client,
    flask_client: Any,
    operation_id: str,
    headers: dict[str, str],
    body: dict[str, Any],
) -> None:
    path = ROUTES[operation_id].path
    others = native_service.context.policy.rate_limits[operation_id][1:]  # not reached by two
    with route_limits(native_service, operation_id, RateLimit("1 per hour", KEY_PEER), *others):
        forget_rate_limit_counts(native_service)
        served = [lane.post(path, headers=headers, json=body) for _ in range(2)][1]
        forget_rate_limit_counts(native_service)
        flask = [flask_client.post(path, headers=headers, json=body) for _ in range(2)][1]
    assert (served.status_code, flask.status_code) == (429, 429), operation_id
    # the same refusal; its wait (in the message too) is each window's own, to the millisecond
    waits = [float(r.headers["retry-after-ms"]) / 1000 for r in (served, flask)]
    bodies = [json.loads(served.content), json.loads(flask.data)]
    for refusal, wait in zip(bodies, waits, strict=True):
        assert refusal["rc"] == "RateLimited"
        said = f"Rate limit exceeded: 1 per 1 hour. Try again in {wait:.2f} seconds."
        assert refusal["message"] == said
        assert 3000 < wait <= 3600
    assert abs(waits[0] - waits[1]) <= 60  # two windows begun one after the other
    for name in ("x-ratelimit-limit", "x-ratelimit-remaining"):
        assert served.headers[name] == flask.headers[name]
    assert abs(int(served.headers["retry-after"]) - int(flask.headers["retry-after"])) <= 1
    forget_rate_limit_counts(native_service)
