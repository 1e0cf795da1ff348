"""The public routes in upstream's shapes: find_user, workers (filters, by name), the active
models (type semantics, filters, one model, our oldest_wait), the text statistics (recorded
when a job ends, counted per period) and our per-minute history of them, the load, the modes
and the news; integer kudos and seed 0 on the text routes while the chat routes keep theirs;
upstream's errors map on a validation error."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise

import pytest
from sqlalchemy import func, insert, select, update

from runtime.native.db.tables import Generation, TextGenStat, WaitingPrompt, Worker
from runtime.native.queue.sweep import sweep, utcnow
from runtime.stores.database import transaction
from tests.integration.chat_flow import chat_async, chat_body, chat_pop, chat_status, submit_reply
from tests.integration.native_flow import pop, status, submit, submit_text

pytestmark = pytest.mark.integration

MODEL = "test-model-7B"


def test_find_user_answers_the_keys_user_with_its_worker_ids(native_client, make_user):
    owner = make_user("owner", kudos=12.5)
    job = pop(native_client, owner.api_key, name="w-1")
    assert job["id"] is None
    found = native_client.get("/find_user", headers={"apikey": owner.api_key})
    assert found.status_code == 200, found.text
    user = found.json()
    assert user["username"] == f"owner#{owner.id}"
    assert (user["id"], user["kudos"], user["worker_count"]) == (owner.id, 12.5, 1)
    assert user["kudos_details"] == {
        "accumulated": 0.0,
        "admin": 12.5,
        "gifted": 0.0,
        "received": 0.0,
    }
    workers = native_client.get("/workers").json()
    assert user["worker_ids"] == [workers[0]["id"]]
    assert native_client.get("/find_user").json()["rc"] == "InvalidAPIKey"
    unknown = native_client.get("/find_user", headers={"apikey": "no-such-key"})
    assert (unknown.status_code, unknown.json()["rc"]) == (404, "UserNotFound")
    assert "worker_ids" not in native_client.get(f"/users/{owner.id}").json()
    created = native_client.put(
        "/sharedkeys", headers={"apikey": owner.api_key}, json={"name": "for friends"}
    )
    assert created.status_code == 200, created.text
    shared = native_client.get("/find_user", headers={"apikey": created.json()["id"]}).json()
    assert shared["username"] == f"owner#{owner.id} (Shared Key: for friends)"  # upstream's
    assert "worker_ids" not in shared


def test_workers_carry_upstreams_details_and_filter_by_name_and_type(native_client, make_user):
    owner = make_user("owner")
    pop(native_client, owner.api_key, name="Scribe-One", bridge_agent="AI Horde Worker:24:x")
    pop(native_client, owner.api_key, name="other")
    every = native_client.get("/workers").json()
    one = next(w for w in every if w["name"] == "Scribe-One")
    for field in ("type", "name", "id", "maintenance_mode", "bridge_agent"):
        assert field in one  # horde-sdk's WorkerDetailItem requires them
    assert one["bridge_agent"] == "AI Horde Worker:24:x"
    assert (one["nsfw"], one["requests_fulfilled"], one["tokens_generated"]) == (True, 0, 0)
    assert next(w for w in every if w["name"] == "other")["bridge_agent"] == "unknown:0:unknown"
    named = native_client.get("/workers", params={"name": "scribe-one", "type": "image"})
    assert [w["name"] for w in named.json()] == ["Scribe-One"]  # name wins over type
    assert native_client.get("/workers", params={"type": "image"}).json() == []
    assert len(native_client.get("/workers", params={"type": "text"}).json()) == 2
    by_name = native_client.get("/workers/name/Scribe-One")
    assert by_name.json() == one
    for nul in ("/workers?name=a%00b", "/workers/name/a%00b", "/status/models/a%00b"):
        refused = native_client.get(nul)  # no stored name holds a NUL: 400, never a 500
        assert (refused.status_code, refused.json()["rc"]) == (400, "InvalidPayload")
    missing = native_client.get("/workers/name/scribe-one")  # exact, as upstream's
    assert (missing.status_code, missing.json()["rc"]) == (404, "WorkerNotFound")


def checked_in_before(sessions, name, age):
    """Move the worker ``name``'s last check-in ``age`` back."""
    with transaction(sessions) as session:
        session.execute(
            update(Worker)
            .where(Worker.name == name)
            .values(last_check_in=Worker.last_check_in - age)
        )


def test_a_workers_uptime_is_its_time_online_between_pops(native_client, native_db, make_user):
    """Each pop adds the time since the previous one when the worker was online then, as
    upstream's check_in; a worker back from stale adds nothing for its time away."""
    owner = make_user("owner")
    pop(native_client, owner.api_key, name="w-1")
    (worker,) = native_client.get("/workers").json()
    assert worker["uptime"] == 0
    checked_in_before(native_db, "w-1", timedelta(minutes=2))
    pop(native_client, owner.api_key, name="w-1")
    uptime = native_client.get(f"/workers/{worker['id']}").json()["uptime"]
    assert 120 <= uptime < 300, uptime
    checked_in_before(native_db, "w-1", timedelta(minutes=6))  # stale: it was away
    pop(native_client, owner.api_key, name="w-1")
    assert native_client.get("/workers/name/w-1").json()["uptime"] == uptime


def queue(client, api_key, model):
    body = {"prompt": "Hi", "models": [model], "params": {"max_length": 80}}
    response = client.post("/generate/text/async", headers={"apikey": api_key}, json=body)
    assert response.status_code == 202, response.text


def test_models_follow_upstreams_type_and_filters(native_client, make_user):
    owner = make_user("owner")
    requester = make_user("requester", kudos=100)
    pop(native_client, owner.api_key, name="w-1", models=[MODEL, "org/custom-model"], threads=3)
    queue(native_client, requester.api_key, MODEL)
    listed = native_client.get("/status/models", params={"type": "text"}).json()
    assert [m["name"] for m in listed] == ["org/custom-model", MODEL]
    first = listed[1]
    assert (first["count"], first["type"], first["jobs"], first["queued"]) == (3, "text", 1.0, 80.0)
    assert native_client.get("/status/models").json() == listed  # absent type: text here
    assert native_client.get("/status/models", params={"type": "image"}).json() == []
    assert native_client.get("/status/models", params={"min_count": 4}).json() == []
    assert len(native_client.get("/status/models", params={"max_count": 3}).json()) == 2
    custom = native_client.get("/status/models", params={"model_state": "custom"}).json()
    assert [m["name"] for m in custom] == ["org/custom-model", MODEL]  # neither is known
    assert native_client.get("/status/models", params={"model_state": "known"}).json() == []
    bad = native_client.get("/status/models", params={"model_state": "some"})
    assert (bad.status_code, bad.json()["rc"]) == (400, "InvalidPayload")
    assert native_client.get("/status/models/org/custom-model").json()[0]["count"] == 3
    assert native_client.get("/status/models/org%2Fcustom-model").json()[0]["count"] == 3
    assert native_client.get("/status/models/nothing-serves-it").json() == []
    queue(native_client, requester.api_key, "queued-only")
    queued_only = native_client.get("/status/models/queued-only").json()
    assert [(m["name"], m["count"], m["jobs"]) for m in queued_only] == [("queued-only", 0, 1.0)]


def queued_since(sessions, request_id, age):
    """Make the queued request ``request_id`` ``age`` old (it waited that long)."""
    with transaction(sessions) as session:
        session.execute(
            update(WaitingPrompt)
            .where(WaitingPrompt.id == request_id)
            .values(created=WaitingPrompt.created - age)
        )


@pytest.mark.raised_limits(
    "text_async", why="four requests queued at once; the submits allow 2 a second per address"
)
def test_oldest_wait_is_the_age_of_each_models_oldest_queued_request(
    native_client, native_db, make_user
):
    owner = make_user("owner")
    requester = make_user("requester", kudos=1000)
    pop(native_client, owner.api_key, models=[MODEL, "other-model"])
    assert [m["oldest_wait"] for m in native_client.get("/status/models").json()] == [0, 0]
    body = {"prompt": "Hi", "params": {"max_length": 80}}
    ids = {}
    for name, models in [("newer", [MODEL]), ("older", [MODEL]), ("other", ["other-model"])]:
        answer = native_client.post(
            "/generate/text/async",
            headers={"apikey": requester.api_key},
            json={**body, "models": models},
        )
        assert answer.status_code == 202, answer.text
        ids[name] = answer.json()["id"]
    queued_since(native_db, ids["newer"], timedelta(minutes=1))
    queued_since(native_db, ids["older"], timedelta(minutes=10))
    queued_since(native_db, ids["other"], timedelta(hours=1))
    listed = {m["name"]: m for m in native_client.get("/status/models").json()}
    # the older of its two requests, not the newer nor another model's
    assert 600 <= listed[MODEL]["oldest_wait"] < 3600, listed[MODEL]
    assert listed["other-model"]["oldest_wait"] >= 3600
    (one,) = native_client.get(f"/status/models/{MODEL}").json()
    assert 600 <= one["oldest_wait"] < 3600
    # once the older is cancelled, the newer is the oldest waiting
    assert native_client.delete(f"/generate/text/status/{ids['older']}").is_success
    (one,) = native_client.get(f"/status/models/{MODEL}").json()
    assert 60 <= one["oldest_wait"] < 600, one
    # a request naming no model waits for every model
    anyone = submit_text(native_client, requester.api_key)
    queued_since(native_db, anyone, timedelta(hours=2))
    for model in native_client.get("/status/models").json():
        assert model["oldest_wait"] >= 7200, model


def test_the_history_counts_the_past_hour_minute_by_minute(native_client, native_db, make_user):
    """Sixty points, oldest first: a job just ended is in the last with its tokens, older
    rows in their minute, nothing older than the hour; together they are the totals' hour."""
    requester = make_user("requester", kudos=1000)
    owner = make_user("owner")
    now = utcnow()
    ages = {  # age -> (max_length, the point it lands in)
        timedelta(seconds=90): (11, 58),
        timedelta(minutes=30, seconds=30): (13, 29),
        timedelta(minutes=59, seconds=30): (17, 0),
        timedelta(hours=2): (19, None),
    }
    with transaction(native_db) as session:
        for age, (length, _point) in ages.items():
            session.execute(
                insert(TextGenStat).values(
                    finished=now - age, model=MODEL, max_length=length, delivered=True
                )
            )
    made = submit_text(native_client, requester.api_key, max_length=80)
    assert submit(native_client, owner.api_key, pop(native_client, owner.api_key)["id"]).is_success
    assert status(native_client, made)["done"]

    history = native_client.get("/stats/text/history")
    assert history.status_code == 200, history.text
    points = history.json()
    assert len(points) == 60
    assert points[-1] == {**points[-1], "requests": 1, "tokens": 80}  # the job just made
    expected = {point: (1, length) for length, point in ages.values() if point is not None}
    for i, point in enumerate(points[:-1]):
        assert (point["requests"], point["tokens"]) == expected.get(i, (0, 0)), i
    ends = [datetime.fromisoformat(p["until"]) for p in points]
    assert all(later - earlier == timedelta(minutes=1) for earlier, later in pairwise(ends))
    assert ends[-1].utcoffset() == timedelta(0)
    totals = native_client.get("/stats/text/totals").json()
    assert totals["minute"] == {"requests": 1, "tokens": 80}
    assert totals["hour"] == {
        "requests": sum(p["requests"] for p in points),
        "tokens": sum(p["tokens"] for p in points),
    }


def test_every_ended_job_is_counted_once_in_the_text_statistics(
    native_client, native_db, native_service, make_user
):
    """A delivered job, one its worker faulted, one that ran out of time and one cancelled
    while running: four rows, each once (a repeated submit adds none)."""
    requester = make_user("requester", kudos=1000)
    owner = make_user("owner")
    delivered = submit_text(native_client, requester.api_key, max_length=80)
    job = pop(native_client, owner.api_key)
    assert submit(native_client, owner.api_key, job["id"], seed=7).status_code == 200
    assert submit(native_client, owner.api_key, job["id"]).status_code == 400  # DuplicateGen
    assert status(native_client, delivered)["done"]
    troubled = submit_text(native_client, requester.api_key, max_length=100)
    job = pop(native_client, owner.api_key)
    submit(native_client, owner.api_key, job["id"], "", state="faulted")
    job = pop(native_client, owner.api_key)  # the slot it got back
    with transaction(native_db) as session:  # that job runs out of time
        session.execute(
            update(Generation)
            .where(Generation.id == job["id"])
            .values(start_time=utcnow() - timedelta(hours=1))
        )
    sweep(native_db, native_service.context.policy, utcnow())
    last = pop(native_client, owner.api_key)["id"]  # its slot again, cancelled while it runs
    native_client.delete(f"/generate/text/status/{troubled}")
    submit(native_client, owner.api_key, last, "late")  # a cancelled job's late reply
    with transaction(native_db) as session:  # any later change to an ended job adds none
        session.execute(update(Generation).values(ttl=Generation.ttl + 1))

    totals = native_client.get("/stats/text/totals").json()
    assert totals["minute"] == totals["total"] == {"requests": 4, "tokens": 80 + 3 * 100}
    assert native_client.get("/stats/text/models").json() == {
        "day": {MODEL: 4},
        "month": {MODEL: 4},
        "total": {MODEL: 4},
    }
    assert native_client.get("/status/performance").json()["past_minute_tokens"] == 80.0


def test_the_statistics_count_each_period_back_from_now(native_client, native_db, native_service):
    now = utcnow()
    ages = [timedelta(seconds=10), timedelta(minutes=30), timedelta(hours=5), timedelta(days=3)]
    ages.append(timedelta(days=40))
    with transaction(native_db) as session:
        for age, model in zip(ages, ["a", "a", "b", "b", "c"], strict=True):
            session.execute(
                insert(TextGenStat).values(
                    finished=now - age, model=model, max_length=10, delivered=True
                )
            )
    totals = native_client.get("/stats/text/totals").json()
    assert {p: v["requests"] for p, v in totals.items()} == {
        "minute": 1,
        "hour": 2,
        "day": 3,
        "month": 4,
        "total": 5,
    }
    assert totals["total"]["tokens"] == 50
    models = {
        "day": {"a": 2, "b": 1, "c": 0},
        "month": {"a": 2, "b": 2, "c": 0},
        "total": {"a": 2, "b": 2, "c": 1},
    }
    assert native_client.get("/stats/text/models").json() == models
    # the sweep folds the 40-day-old row into the archive; the counts stay
    sweep(native_db, native_service.context.policy, now)
    sweep(native_db, native_service.context.policy, now)  # a second pass folds nothing more
    native_service.context.kept.clear()
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(TextGenStat)) == 4
    assert native_client.get("/stats/text/totals").json() == totals
    assert native_client.get("/stats/text/models").json() == models


def test_performance_counts_the_queue_and_the_online_text_workers(native_client, make_user):
    owner = make_user("owner")
    requester = make_user("requester", kudos=1000)
    pop(native_client, owner.api_key, name="w-1", threads=2)
    pop(native_client, owner.api_key, name="w-2", threads=3)
    submit_text(native_client, requester.api_key, max_length=100, n=2)
    pop(native_client, owner.api_key, name="w-1", threads=2)  # one of the two jobs runs
    load = native_client.get("/status/performance").json()
    assert (load["text_worker_count"], load["text_thread_count"]) == (2, 5)
    assert (load["queued_text_requests"], load["queued_tokens"]) == (2, 200.0)
    assert (load["worker_count"], load["queued_requests"], load["past_minute_tokens"]) == (0, 0, 0)
    assert native_client.get("/status/modes").json() == {
        "maintenance_mode": False,
        "invite_only_mode": False,
    }
    assert native_client.get("/status/news").json() == []


def test_text_routes_answer_whole_kudos_and_seed_0_the_chat_routes_keep_theirs(
    native_client, native_db, make_user
):
    requester = make_user("requester", kudos=1000)
    owner = make_user("owner")
    quote = native_client.post(
        "/generate/text/async",
        headers={"apikey": requester.api_key},
        json={"prompt": "Hi", "dry_run": True, "params": {"max_length": 80}},
    ).json()
    assert isinstance(quote["kudos"], int)
    request_id = submit_text(native_client, requester.api_key)
    job = pop(native_client, owner.api_key)
    submit(native_client, owner.api_key, job["id"], "x" * 200)  # no seed, as koboldcpp
    done = status(native_client, request_id)
    assert isinstance(done["kudos"], int)
    assert done["kudos"] >= 1
    assert done["generations"][0]["seed"] == 0

    chat_pop(native_client, owner.api_key)
    accepted = chat_async(native_client, requester.api_key, chat_body())
    assert accepted.status_code == 202, accepted.text
    job = chat_pop(native_client, owner.api_key)
    assert submit_reply(native_client, owner.api_key, job["id"]).status_code == 200
    chat = chat_status(native_client, accepted.json()["id"])
    assert chat["generations"][0]["seed"] is None  # a chat reply's seed stays as sent
    assert isinstance(chat["kudos"], float)  # the chat routes keep their cents


def test_a_validation_error_carries_upstreams_errors_map(native_client, make_user):
    requester = make_user("requester", kudos=10)
    refused = native_client.post(
        "/generate/text/async",
        headers={"apikey": requester.api_key},
        json={"prompt": "Hi", "params": {"max_length": 5000}},
    )
    assert refused.status_code == 400
    body = refused.json()
    assert body["rc"] == "InvalidPayload"
    assert body["errors"] == {"params.max_length": "must be at most 4096"}
    assert body["param"] == "params.max_length"
