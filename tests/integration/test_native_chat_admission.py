"""Chat admission against the online pool, service selection, moderation, the passkey,
the kudos cap, the anonymous key's share per address, and the availability fields of the
status."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from generated.chat.names import (
    FEATURE_TOOLS,
    HORDE_CONTEXT_FIT,
    HORDE_DRY_RUN,
    HORDE_MAX_KUDOS,
    HORDE_WORKER_BLACKLIST,
    HORDE_WORKERS,
    LIMIT_MAX_CONTEXT_LENGTH,
    LIMIT_MAX_LENGTH,
    PARAM_HORDE,
    PARAM_MAX_TOKENS,
    PARAM_MODELS,
    PARAM_TOOLS,
)
from generated.defences import ANONYMOUS_QUEUED_PER_SOURCE
from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY
from generated.wire import ANONYMOUS_API_KEY
from runtime.native.db.tables import KudosLedger, WaitingPrompt, Worker
from runtime.native.queue.sweep import utcnow
from runtime.stores.database import transaction
from tests.conftest import SERVICE_PASSKEY
from tests.integration.chat_flow import (
    BASIC,
    MODEL,
    chat_async,
    chat_body,
    chat_pop,
    chat_status,
    submit_chat,
    submit_reply,
)
from tests.integration.native_flow import submit_text

pytestmark = pytest.mark.integration

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def _queued(native_db) -> int:
    with native_db() as session:
        return int(session.scalar(select(func.count()).select_from(WaitingPrompt)))


def _go_offline(native_db, name: str) -> None:
    with transaction(native_db) as session:
        session.execute(
            update(Worker)
            .where(Worker.name == name)
            .values(last_check_in=utcnow() - timedelta(days=1))
        )


@pytest.mark.raised_limits(
    "chat_async",
    why="several submits in a row from one address and key; admission is under test, not the rate",
)
def test_unknown_and_colon_models_are_not_found(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    for body in (
        chat_body(model="no-such-model"),
        chat_body(model="chat:model"),
        {**chat_body(), PARAM_MODELS: [MODEL, "no-such-model"]},
    ):
        response = chat_async(native_client, requester.api_key, body)
        assert response.status_code == 404
        assert response.json()["rc"] == "model_not_found"
        assert "no-such-model" in response.text or "chat:model" in response.text
    assert _queued(native_db) == 0


def test_a_model_without_an_online_chat_worker_is_503_and_nothing_is_queued(
    native_client, native_db, make_user
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    _go_offline(native_db, "chat-worker")
    response = chat_async(native_client, requester.api_key, chat_body())
    assert response.status_code == 503
    assert response.json()["rc"] == "no_eligible_worker"
    assert _queued(native_db) == 0
    chat_pop(native_client, worker.api_key)  # back online
    assert chat_async(native_client, requester.api_key, chat_body()).status_code == 202


@pytest.mark.raised_limits(
    "chat_async",
    why="several submits in a row from one key; concurrency is under test, not the rate",
)
def test_a_chat_submit_counts_the_users_queued_and_running_jobs_once(native_client, make_user):
    # The count rides on the online workers' read: two online workers must not count twice.
    requester = make_user("req", 1000, concurrency=2)
    first, second = make_user("w1"), make_user("w2")
    chat_pop(native_client, second.api_key, "second", model="other-model-13B")
    chat_pop(native_client, first.api_key)
    submit_chat(native_client, requester.api_key)
    assert chat_pop(native_client, first.api_key)["id"]  # running: it still counts
    submit_chat(native_client, requester.api_key)
    refused = chat_async(native_client, requester.api_key, chat_body())
    assert refused.status_code == 429
    assert refused.json()["rc"] == "TooManyPrompts"
    assert "(3)" in refused.json()["message"]
    assert "Retry-After" in refused.headers


def test_any_listed_model_may_serve_and_the_status_says_which(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, "gone")  # MODEL is known, its worker offline
    _go_offline(native_db, "gone")
    chat_pop(native_client, worker.api_key, model="other-model-13B")
    body = {**chat_body(), PARAM_MODELS: ["other-model-13B", MODEL]}
    del body["model"]
    request_id = chat_async(native_client, requester.api_key, body).json()["id"]
    job = chat_pop(native_client, worker.api_key, model="other-model-13B")
    submit_reply(native_client, worker.api_key, job["id"])
    assert chat_status(native_client, request_id)["generations"][0]["model"] == "other-model-13B"


def test_max_tokens_above_every_worker_is_lowered_to_the_largest(native_client, make_user):
    requester, small, large = make_user("req", 10**6), make_user("s"), make_user("l")
    chat_pop(native_client, small.api_key, "small", limits={LIMIT_MAX_LENGTH: 100})
    chat_pop(native_client, large.api_key, "large", limits={LIMIT_MAX_LENGTH: 300})
    request_id = submit_chat(native_client, requester.api_key, **{PARAM_MAX_TOKENS: 500})
    assert chat_status(native_client, request_id)["max_tokens_lowered_to"] == 300
    assert (
        chat_pop(native_client, small.api_key, "small", limits={LIMIT_MAX_LENGTH: 100})["id"]
        is None
    )
    job = chat_pop(native_client, large.api_key, "large", limits={LIMIT_MAX_LENGTH: 300})
    assert job["payload"][PARAM_MAX_TOKENS] == 300
    kept = submit_chat(native_client, requester.api_key, **{PARAM_MAX_TOKENS: 50})
    assert chat_status(native_client, kept)["max_tokens_lowered_to"] is None


def test_a_feature_gap_is_404_and_a_limit_gap_is_400(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, limits={LIMIT_MAX_CONTEXT_LENGTH: 100})
    tools = chat_async(native_client, requester.api_key, chat_body(**{PARAM_TOOLS: [TOOL]}))
    assert tools.status_code == 404
    assert tools.json()["rc"] == "no_worker_supports_features"
    assert FEATURE_TOOLS in tools.json()["message"]
    long = chat_async(native_client, requester.api_key, chat_body("word " * 400))
    assert long.status_code == 400
    assert long.json()["rc"] == "no_worker_supports_limit"
    assert _queued(native_db) == 0


def test_truncate_oldest_keeps_system_and_the_latest_turn(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    limits = {LIMIT_MAX_CONTEXT_LENGTH: 200}
    chat_pop(native_client, worker.api_key, limits=limits)
    old = "an old turn " * 40
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": old},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "The latest question?"},
    ]
    body = {"model": MODEL, "messages": messages, PARAM_MAX_TOKENS: 50}
    refused = chat_async(native_client, requester.api_key, body)
    assert refused.status_code == 400
    assert refused.json()["rc"] == "no_worker_supports_limit"
    body["horde"] = {HORDE_CONTEXT_FIT: "truncate_oldest"}
    request_id = chat_async(native_client, requester.api_key, body).json()["id"]
    sent = chat_pop(native_client, worker.api_key, limits=limits)["payload"]["messages"]
    assert [m["content"] for m in sent] == ["You are terse.", "The latest question?"]
    with native_db() as session:
        wp = session.get(WaitingPrompt, request_id)
        assert old.strip() in wp.submitted_prompt
        assert old.strip() not in wp.prompt


def test_moderation_screens_the_full_submission_before_truncation(native_client, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, limits={LIMIT_MAX_CONTEXT_LENGTH: 200})
    messages = [
        {"role": "user", "content": "forbidden-word " + "padding " * 100},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Harmless?"},
    ]
    body = {"model": MODEL, "messages": messages, "horde": {HORDE_CONTEXT_FIT: "truncate_oldest"}}
    response = chat_async(native_client, requester.api_key, body)
    assert response.status_code == 400
    assert response.json()["rc"] == "CorruptPrompt"
    # the refusal put this address in timeout (requests.countermeasures); another passes
    timed_out = chat_async(native_client, requester.api_key, chat_body("Harmless"))
    assert (timed_out.status_code, timed_out.json()["rc"]) == (403, "TimeoutIP")
    other = make_user("other", 1000)  # a key of its own: the key's 2 submits a second are spent
    elsewhere = {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, "X-Forwarded-For": "192.0.2.9"}
    passed = chat_async(native_client, other.api_key, chat_body("Harmless"), **elsewhere)
    assert passed.status_code == 202


@pytest.mark.raised_limits(
    "chat_async",
    why="several submits in a row from one address and key; admission is under test, not the rate",
)
def test_the_service_passkey_trusts_the_forwarded_address(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    forwarded = {"X-Forwarded-For": "203.0.113.7"}
    wrong = chat_async(
        native_client, requester.api_key, chat_body(), **{HEADER_X_HORDE_SERVICE_PASSKEY: "no"}
    )
    assert wrong.status_code == 403
    assert wrong.json()["rc"] == "InvalidServicePasskey"
    front = chat_async(
        native_client,
        requester.api_key,
        chat_body(),
        **{HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY},
        **forwarded,
    ).json()["id"]
    direct = chat_async(native_client, requester.api_key, chat_body("b"), **forwarded).json()["id"]
    with native_db() as session:
        assert session.get(WaitingPrompt, front).ipaddr == "203.0.113.7"
        assert session.get(WaitingPrompt, direct).ipaddr == "127.0.0.1"
    bad_read = native_client.get(
        f"/generate/chat/status/{front}", headers={HEADER_X_HORDE_SERVICE_PASSKEY: "x" * 300}
    )
    assert bad_read.status_code == 403


@pytest.mark.raised_limits(
    "chat_async",
    why="several submits in a row from one address and key; admission is under test, not the rate",
)
def test_max_kudos_below_the_quote_is_refused_before_anything_is_held(
    native_client, native_db, make_user
):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key)
    quote = chat_async(native_client, requester.api_key, chat_body(horde={HORDE_DRY_RUN: True}))
    assert quote.status_code == 200
    price = quote.json()["kudos"]
    capped = chat_body(horde={HORDE_MAX_KUDOS: price / 2})
    refused = chat_async(native_client, requester.api_key, capped)
    assert refused.status_code == 400
    assert refused.json()["rc"] == "KudosCapExceeded"
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(KudosLedger)) == 1  # the grant
    assert _queued(native_db) == 0
    accepted = chat_async(
        native_client, requester.api_key, chat_body(horde={HORDE_MAX_KUDOS: price})
    )
    assert accepted.status_code == 202
    assert accepted.json()["kudos"] == price


def test_status_reports_availability_against_the_online_pool(native_client, native_db, make_user):
    requester, worker = make_user("req", 1000), make_user("wk")
    chat_pop(native_client, worker.api_key, threads=3)
    request_id = submit_chat(native_client, requester.api_key, **{PARAM_MAX_TOKENS: 100})
    body = chat_status(native_client, request_id)
    assert body["is_possible"]
    assert body["eligible_threads"] == 3
    assert body["missing_features"] == []
    assert body["exceeded_limits"] == []
    chat_pop(native_client, worker.api_key, features=[], threads=3)  # drops the guarantee
    body = chat_status(native_client, request_id)
    assert body["eligible_threads"] == 0
    assert not body["is_possible"]
    assert body["missing_features"] == BASIC
    chat_pop(native_client, worker.api_key, limits={LIMIT_MAX_LENGTH: 16})
    body = chat_status(native_client, request_id)
    assert body["exceeded_limits"] == [{"limit": LIMIT_MAX_LENGTH, "value": 100, "maximum": 16}]
    _go_offline(native_db, "chat-worker")
    body = chat_status(native_client, request_id)
    assert not body["is_possible"]
    assert body["missing_features"] == []


@pytest.mark.raised_limits(
    "chat_async",
    why="three submits in a row from one address and key; the wait time is under test",
)
def test_wait_time_counts_only_work_the_eligible_workers_could_take(
    native_client, native_service, make_user
):
    """The queued work ahead that the eligible workers could take, over their throughput
    (design doc: "Admission against the online pool"), not the request's own generation: a
    request nothing is ahead of waits 0 s however large its max_tokens, so fail_fast does
    not refuse it while a worker is free."""
    requester, worker = make_user("req", 10**6), make_user("wk")
    chat_pop(native_client, worker.api_key, prompt_jobs=False)  # one new thread: assumed rate
    first = submit_chat(native_client, requester.api_key, **{PARAM_MAX_TOKENS: 500})
    alone = chat_status(native_client, first)
    assert (alone["queue_position"], alone["wait_time"]) == (0, 0)
    submit_text(native_client, requester.api_key, max_length=500)  # a chat-only pool ignores it
    second = submit_chat(native_client, requester.api_key, **{PARAM_MAX_TOKENS: 100})
    behind = chat_status(native_client, second)
    assert behind["queue_position"] == 2
    rate = native_service.context.policy.assumed_tokens_per_second
    assert behind["wait_time"] == math.ceil(500 / rate)  # the first's work, not its own


@pytest.mark.raised_limits(
    "chat_async",
    why="five submits in a row from one address and key; the wait time is under test",
)
def test_wait_time_counts_a_listed_request_once_one_eligible_worker_may_take_it(
    native_client, native_db, native_service, make_user
):
    """Two eligible workers of one setup are one SQL branch of the wait time; the worker
    lists ahead still count per worker: allowed to one of them, or blocking only one, the
    request's work counts; blocking both, it does not."""
    requester = make_user("req", 10**6)
    for name in ("chat-a", "chat-b"):
        chat_pop(native_client, make_user(f"owner-{name}").api_key, name, prompt_jobs=False)
    with native_db() as session:
        ids = {name: id for name, id in session.execute(select(Worker.name, Worker.id))}
    a, b = str(ids["chat-a"]), str(ids["chat-b"])
    submit_chat(native_client, requester.api_key, **{PARAM_MAX_TOKENS: 100})
    for workers, blacklist in (([b], False), ([a, b], True), ([a], True)):
        horde = {HORDE_WORKERS: workers, HORDE_WORKER_BLACKLIST: blacklist}
        submit_chat(native_client, requester.api_key, **{PARAM_MAX_TOKENS: 100, PARAM_HORDE: horde})
    last = chat_status(
        native_client, submit_chat(native_client, requester.api_key, **{PARAM_MAX_TOKENS: 100})
    )
    assert last["queue_position"] == 4
    # ahead: the first, the one allowed to b, the one blocking a only (3 x 100), over two
    # new threads at the assumed rate; not its own
    rate = 2 * native_service.context.policy.assumed_tokens_per_second
    assert last["wait_time"] == math.ceil(3 * 100 / rate)


@pytest.mark.raised_limits(
    "chat_async",
    "text_async",
    why="one address fills its anonymous share in a row; the share is under test, not the rate",
)
def test_one_address_holds_only_its_share_of_the_anonymous_key(native_client, make_user):
    # The anonymous key's concurrency is every keyless client's: one address (here, as a
    # front forwards it) holding requests a worker never answers must leave the rest of it.
    worker = make_user("wk")
    chat_pop(native_client, worker.api_key)
    hog = {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, "X-Forwarded-For": "198.51.100.1"}
    other = {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, "X-Forwarded-For": "198.51.100.2"}
    for n in range(ANONYMOUS_QUEUED_PER_SOURCE):
        held = chat_async(native_client, ANONYMOUS_API_KEY, chat_body(f"hold {n}"), **hog)
        assert held.status_code == 202, held.text
    refused = chat_async(native_client, ANONYMOUS_API_KEY, chat_body("one more"), **hog)
    assert refused.status_code == 429
    assert refused.json()["rc"] == "TooManyAnonymousPrompts"
    assert "Retry-After" in refused.headers
    served = chat_async(native_client, ANONYMOUS_API_KEY, chat_body("mine"), **other)
    assert served.status_code == 202, served.text
    # The text route shares it too (counted on the connection's address there).
    statuses = [
        native_client.post(
            "/generate/text/async",
            headers={"apikey": ANONYMOUS_API_KEY},
            json={"prompt": f"hold {n}", "models": [MODEL]},
        )
        for n in range(ANONYMOUS_QUEUED_PER_SOURCE + 1)
    ]
    assert [r.status_code for r in statuses] == [202] * ANONYMOUS_QUEUED_PER_SOURCE + [429]
    assert statuses[-1].json()["rc"] == "TooManyAnonymousPrompts"
