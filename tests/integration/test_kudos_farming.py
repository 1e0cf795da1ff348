"""No kudos from nothing: a dishonest worker operator's loop, through the live native API at
the shipped economy (spec/pricing.yaml economy), next to an honest worker earning upstream's
reward.

The loop is the probe's: a new user's worker claims anthracite-org/magnum-v4-123b with the
bridge agent ``horde-chat-worker:1.0``, anonymous requests for that model are sent from the
worker's own address, and the worker serves them at once with a short reply, or submits
``state: censored``: it earns nothing, and its speed makes it suspicious until it is paused.
Then the same worker served from another address (an accomplice, or a second address of its
own), its owner's own requests, and the anonymous key's hourly charge.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from generated.chat.tables import FEATURES, GUARANTEES
from generated.pricing import (
    ANONYMOUS_CHARGE_PER_HOUR,
    CENSORED_UNTRUSTED_CAP,
    HORDE_TAX,
    SELF_SERVING_REWARD,
    SUSPICION_THRESHOLD,
)
from generated.routes import HEADER_X_HORDE_SERVICE_PASSKEY
from generated.wire import ANONYMOUS_API_KEY
from runtime.contract import pricing
from runtime.native.accounts import kudos
from runtime.native.accounts.keys import ANONYMOUS_USER_ID
from runtime.native.db.tables import Generation, KudosLedger, User, WaitingPrompt, Worker
from runtime.stores.database import transaction
from tests.conftest import SERVICE_PASSKEY, MadeUser
from tests.integration.chat_flow import chat_async, chat_body, chat_pop, submit_reply
from tests.integration.native_flow import ledger, pop, submit, worked_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.raised_limits(
        "text_async",
        why="the probe's loop queues a request a round from one address, paced under the "
        "submit limit in the probe; the economy is under test, not the submit rate",
    ),
]

MAGNUM = "anthracite-org/magnum-v4-123b"
MAGNUM_BILLIONS = 123  # its size in spec/models/text.yaml
BRIDGE = "horde-chat-worker:1.0"  # the probe's: no URL part, so not a validated backend
ROUNDS = SUSPICION_THRESHOLD
"""The farm's rounds: each instant reply is a suspicion, so after these it is paused."""
SHORT = "ok"
ELSEWHERE = "203.0.113.50"
"""Another client's address: a request sent through the front (its passkey) from there."""


def anonymous_request(
    client: httpx.Client, *, address: str | None = None, prompt: str = "p" * 1200
) -> httpx.Response:
    """An anonymous text request for MAGNUM, from this client's own address (the worker's,
    127.0.0.1) or, through the front, from ``address``."""
    headers = {"apikey": ANONYMOUS_API_KEY}
    if address is not None:
        headers |= {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, "X-Forwarded-For": address}
    body = {"prompt": prompt, "params": {"max_length": 512, "max_context_length": 4096}}
    return client.post("/generate/text/async", headers=headers, json={**body, "models": [MAGNUM]})


def registered_request(client: httpx.Client, api_key: str, prompt: str = "p" * 1200) -> str:
    body = {"prompt": prompt, "params": {"max_length": 512, "max_context_length": 4096}}
    response = client.post(
        "/generate/text/async", headers={"apikey": api_key}, json={**body, "models": [MAGNUM]}
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def farm_pop(client: httpx.Client, api_key: str, name: str = "farm") -> dict[str, Any]:
    return pop(
        client, api_key, name=name, models=[MAGNUM], max_context_length=8192, bridge_agent=BRIDGE
    )


def serve(
    client: httpx.Client, api_key: str, reply: str = SHORT, name: str = "farm", **fields: Any
) -> tuple[str, Decimal]:
    """Pop a job and submit ``reply`` at once; the job's id and the reward."""
    job = farm_pop(client, api_key, name)
    assert job["id"], job
    response = submit(client, api_key, job["id"], reply, **fields)
    assert response.status_code == 200, response.text
    return str(job["id"]), Decimal(str(response.json()["reward"]))


def stream_then_cancel(client: httpx.Client, api_key: str, job_id: str, request_id: str) -> None:
    """The worker posts some streamed text at once, then the request is cancelled: the
    cancel settles the job on what was posted."""
    progress = {"id": job_id, "seq": 0, "delta": "Once upon a time, " * 8}
    posted = client.post("/generate/text/progress", headers={"apikey": api_key}, json=progress)
    assert posted.status_code == 200, posted.text
    cancelled = client.delete(f"/generate/chat/status/{request_id}")
    assert cancelled.status_code == 200, cancelled.text


def suspicions(sessions: sessionmaker[Session], user_id: int) -> tuple[int, int, bool]:
    """The user's suspicion count, its one worker's, and whether that is in maintenance."""
    with sessions() as session:
        user = session.get(User, user_id)
        assert user is not None
        worker = session.scalars(select(Worker).where(Worker.user_id == user_id)).one()
        return user.suspicion, worker.suspicion, worker.maintenance


def balance(sessions: sessionmaker[Session], user_id: int) -> Decimal:
    with sessions() as session:
        user = session.get(User, user_id)
        assert user is not None
        return user.kudos


def anonymous_charges(sessions: sessionmaker[Session]) -> Decimal:
    """What the anonymous user was charged for generations (its tax apart)."""
    return -sum(
        (delta for reason, delta in ledger(sessions, ANONYMOUS_USER_ID) if reason == "charge"),
        Decimal(0),
    )


def upstream_reward(sessions: sessionmaker[Session], job_id: str, tokens: int) -> Decimal:
    """Upstream's reward for the job (what the formula alone pays, as claimed)."""
    with sessions() as session:
        gen = session.get(Generation, uuid.UUID(job_id))
        assert gen is not None
        wp = session.get(WaitingPrompt, gen.wp_id)
        assert wp is not None
        return kudos.request_reward(wp, tokens, MAGNUM, trusted=False, bridge_agent=BRIDGE)


def speed_capped_reward(sessions: sessionmaker[Session], job_id: str, tokens: int) -> Decimal:
    """The reward of a job paid as the model its measured speed allows (its seconds from
    pop to result, as stored)."""
    with sessions() as session:
        gen = session.get(Generation, uuid.UUID(job_id))
        assert gen is not None
        assert gen.completed_at is not None
        wp = session.get(WaitingPrompt, gen.wp_id)
        assert wp is not None
        seconds = (gen.completed_at - gen.start_time).total_seconds()
        context = pricing.reward_context(wp.prompt, wp.max_length, wp.max_context_length)
        cap = pricing.speed_billions(tokens, seconds)
        return kudos.generation_kudos(tokens, MAGNUM, context, False, False, cap)


# The probe's loop, from one address


def test_the_probes_loop_creates_no_kudos(native_client, native_db, make_user):
    """Anonymous requests from the worker's own address, served with a short reply or
    censored: the owner earns SELF_SERVING_REWARD a job and the anonymous user is charged
    nothing but the tax, where the probe found 1,306.58 kudos a job. Each instant reply is
    upstream's unreasonably fast suspicion for a 123B model, on the worker and its owner:
    at SUSPICION_THRESHOLD the worker is paused (maintenance) and pops no more."""
    farmer = make_user("farmer")
    assert farm_pop(native_client, farmer.api_key)["id"] is None  # online first
    rewards = []
    for round_ in range(ROUNDS):
        assert anonymous_request(native_client).status_code == 202
        state = {"state": "censored"} if round_ % 2 else {}
        rewards.append(serve(native_client, farmer.api_key, **state)[1])
    assert rewards == [Decimal(SELF_SERVING_REWARD)] * ROUNDS
    assert balance(native_db, farmer.id) == 0
    assert all(delta == 0 for reason, delta in ledger(native_db, farmer.id) if reason == "reward")
    assert anonymous_charges(native_db) == 0
    taxes = [d for r, d in ledger(native_db, ANONYMOUS_USER_ID) if r == "horde_tax"]
    assert taxes == [-Decimal(HORDE_TAX)] * ROUNDS
    assert suspicions(native_db, farmer.id) == (ROUNDS, ROUNDS, True)
    paused = native_client.post(
        "/generate/text/pop",
        headers={"apikey": farmer.api_key},
        json={"name": "farm", "models": [MAGNUM], "max_length": 512},
    )
    assert paused.status_code == 403, paused.text
    assert paused.json()["rc"] == "WorkerMaintenance"


def test_a_chat_request_from_the_workers_own_address_earns_nothing(
    native_client, native_db, make_user
):
    farmer = make_user("farmer")
    chat_pop(native_client, farmer.api_key, model=MAGNUM, bridge_agent=BRIDGE)
    body = chat_body("Say hello. " * 40, model=MAGNUM, max_tokens=400)
    assert chat_async(native_client, ANONYMOUS_API_KEY, body).status_code == 202
    job = chat_pop(native_client, farmer.api_key, model=MAGNUM, bridge_agent=BRIDGE)
    worked_for(native_db, job["id"], 60)  # slow enough to be paid as claimed: not the point
    submitted = submit_reply(native_client, farmer.api_key, job["id"], "z" * 600)
    assert submitted.status_code == 200, submitted.text
    assert Decimal(str(submitted.json()["reward"])) == SELF_SERVING_REWARD
    assert balance(native_db, farmer.id) == 0
    assert anonymous_charges(native_db) == 0


@pytest.mark.raised_limits(
    "chat_async", why="two streamed requests from one address; the settlement is under test"
)
@pytest.mark.parametrize(("address", "paid"), [(None, False), (ELSEWHERE, True)])
def test_a_cancelled_stream_of_an_anonymous_request_from_the_workers_address_pays_nothing(
    native_client, native_db, make_user, address, paid
):
    """A streamed job settled on its posted text when its request is cancelled: nothing for
    an anonymous request from the address the job was popped from (its lease keeps it), the
    posted text's reward for one from elsewhere. An unknown model: its reward does not
    depend on the speed."""
    farmer = make_user("farmer")
    everything = [*FEATURES, *GUARANTEES]
    chat_pop(native_client, farmer.api_key, features=everything)  # online first
    headers = {}
    if address is not None:
        headers = {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, "X-Forwarded-For": address}
    body = chat_body(max_tokens=300, stream=True)
    queued = chat_async(native_client, ANONYMOUS_API_KEY, body, **headers)
    assert queued.status_code == 202, queued.text
    request_id = queued.json()["id"]
    job = chat_pop(native_client, farmer.api_key, features=everything)
    assert job["stream"] is True
    stream_then_cancel(native_client, farmer.api_key, job["id"], request_id)
    rewards = [delta for reason, delta in ledger(native_db, farmer.id) if reason == "reward"]
    assert (sum(rewards, Decimal(0)) > 0) is paid
    assert (anonymous_charges(native_db) > 0) is paid


def test_a_request_of_the_workers_own_owner_earns_nothing(native_client, native_db, make_user):
    farmer = make_user("farmer", kudos=1000)
    assert farm_pop(native_client, farmer.api_key)["id"] is None
    registered_request(native_client, farmer.api_key)
    job = farm_pop(native_client, farmer.api_key)
    worked_for(native_db, job["id"], 60)  # slow enough to be paid as claimed: not the point
    response = submit(native_client, farmer.api_key, job["id"], "y" * 1000)
    assert response.status_code == 200, response.text
    assert Decimal(str(response.json()["reward"])) == SELF_SERVING_REWARD
    assert balance(native_db, farmer.id) == 1000 - HORDE_TAX  # its tax, nothing moved else


# The same worker served from elsewhere, next to an honest one


def test_instant_replies_are_paid_as_the_model_their_speed_allows_beside_an_honest_worker(
    native_client, native_db, make_user
):
    """From another address, the farm's instant short replies are paid as the model their
    speed allows (its measured seconds, as stored: a double's reply takes a few
    milliseconds, so a tiny model; tests/unit/test_kudos_economy.py has the numbers); an
    honest untrusted worker claiming the same model, 250 tokens in 20 s (12.5 tokens/s,
    under 123B's 32.5), earns upstream's."""
    farmer, honest = make_user("farmer"), make_user("honest")
    requester = make_user("requester", kudos=10_000)
    assert farm_pop(native_client, farmer.api_key)["id"] is None
    for _ in range(ROUNDS):
        assert anonymous_request(native_client, address=ELSEWHERE).status_code == 202
        job_id, reward = serve(native_client, farmer.api_key)
        tokens = kudos.token_count(SHORT, 512)
        assert reward == speed_capped_reward(native_db, job_id, tokens)
        assert reward <= upstream_reward(native_db, job_id, tokens)
    assert farm_pop(native_client, honest.api_key, "honest")["id"] is None
    registered_request(native_client, requester.api_key)
    job = farm_pop(native_client, honest.api_key, "honest")
    worked_for(native_db, job["id"], 20)
    response = submit(native_client, honest.api_key, job["id"], "y" * 1000)
    assert response.status_code == 200, response.text
    paid = Decimal(str(response.json()["reward"]))
    assert paid == upstream_reward(native_db, job["id"], 250)
    assert ledger(native_db, honest.id) == [("reward", paid)]
    assert suspicions(native_db, honest.id) == (0, 0, False)


def test_a_censored_reply_pays_an_untrusted_worker_no_more_than_the_tax(
    native_client, native_db, make_user
):
    """From another address and slow enough to be paid as claimed, a censored reply earns
    an untrusted worker CENSORED_UNTRUSTED_CAP (the request's tax), a trusted one upstream's
    reward; the requester is charged nothing for either, as upstream."""
    untrusted, trusted = make_user("untrusted"), make_user("trusted", trusted=True)
    requester = make_user("requester", kudos=10_000)
    paid = {}
    for owner in (untrusted, trusted):
        name = f"w-{owner.id}"
        assert farm_pop(native_client, owner.api_key, name)["id"] is None
        registered_request(native_client, requester.api_key)
        job = farm_pop(native_client, owner.api_key, name)
        worked_for(native_db, job["id"], 60)
        response = submit(native_client, owner.api_key, job["id"], "y" * 1000, state="censored")
        assert response.status_code == 200, response.text
        paid[owner.id] = Decimal(str(response.json()["reward"]))
    assert paid[untrusted.id] == CENSORED_UNTRUSTED_CAP <= HORDE_TAX
    assert paid[trusted.id] > 100  # upstream's: a 123B model's 250 tokens
    assert not [r for r, _d in ledger(native_db, requester.id) if r == "charge"]


# The anonymous key's charges an hour


def _charged_anonymously(sessions: sessionmaker[Session], amount: float, minutes_ago: float) -> int:
    """A charge of the anonymous user's ledger, ``minutes_ago``; its row id."""
    with transaction(sessions) as session:
        row = KudosLedger(
            user_id=ANONYMOUS_USER_ID, delta=Decimal(str(-amount)), balance_after=0,
            reason="charge",
            created=session.execute(select(func.now())).scalar_one()
            - timedelta(minutes=minutes_ago),
        )  # fmt: skip
        session.add(row)
        session.flush()
        return row.id


def test_the_anonymous_key_is_charged_at_most_its_hourly_limit(native_client, native_db):
    """The anonymous user's charges of the last hour at ANONYMOUS_CHARGE_PER_HOUR: its next
    request is refused (429 AnonymousKudosExhausted, retry when the oldest charge leaves the
    hour); a cent under it, or once the charges are older than an hour, it is queued. So the
    kudos anonymous requests pay workers in any hour are bounded by the spec (plus what
    requests admitted before pay)."""
    first = _charged_anonymously(native_db, ANONYMOUS_CHARGE_PER_HOUR - 0.01, 50)
    assert anonymous_request(native_client, address=ELSEWHERE).status_code == 202
    _charged_anonymously(native_db, 0.01, 1)
    refused = anonymous_request(native_client, address="203.0.113.51")
    assert refused.status_code == 429, refused.text
    assert refused.json()["rc"] == "AnonymousKudosExhausted"
    assert 0 < float(refused.headers["Retry-After"]) <= 10 * 60 + 1  # the 50-minute-old one
    with transaction(native_db) as session:
        session.execute(
            update(KudosLedger)
            .where(KudosLedger.id == first)
            .values(created=KudosLedger.created - timedelta(minutes=11))
        )
    assert anonymous_request(native_client, address="203.0.113.51").status_code == 202


def test_a_registered_user_is_not_held_by_the_anonymous_keys_limit(
    native_client, native_db, make_user: Callable[..., MadeUser]
):
    _charged_anonymously(native_db, ANONYMOUS_CHARGE_PER_HOUR, 1)
    assert anonymous_request(native_client, address=ELSEWHERE).status_code == 429
    registered_request(native_client, make_user("requester", kudos=10).api_key)


# Suspicion: counted on a cancelled stream, shown to its owner


@pytest.mark.raised_limits("chat_async", why="one streamed request; the settlement is under test")
def test_a_cancelled_streams_instant_text_counts_a_suspicion_as_a_submit_does(
    native_client, native_db, make_user
):
    """From another address (so it is paid), a streamed MAGNUM job whose posted text came a
    blink after its pop, settled by a cancel: upstream's unreasonably fast suspicion on the
    worker and its owner, as its submit would have counted."""
    farmer = make_user("farmer")
    everything = [*FEATURES, *GUARANTEES]
    chat_pop(native_client, farmer.api_key, model=MAGNUM, bridge_agent=BRIDGE, features=everything)
    headers = {HEADER_X_HORDE_SERVICE_PASSKEY: SERVICE_PASSKEY, "X-Forwarded-For": ELSEWHERE}
    body = chat_body(model=MAGNUM, max_tokens=300, stream=True)
    queued = chat_async(native_client, ANONYMOUS_API_KEY, body, **headers)
    assert queued.status_code == 202, queued.text
    job = chat_pop(
        native_client, farmer.api_key, model=MAGNUM, bridge_agent=BRIDGE, features=everything
    )
    assert job["stream"] is True
    stream_then_cancel(native_client, farmer.api_key, job["id"], queued.json()["id"])
    assert [r for r, d in ledger(native_db, farmer.id) if r == "reward" and d > 0]
    assert suspicions(native_db, farmer.id) == (1, 1, False)


def test_suspicion_is_shown_to_its_owners_own_key_only(native_client, native_db, make_user):
    """``suspicious`` (upstream's privileged count): its owner's own key reads its workers'
    and its own on every worker and user route; no key, another user's key, the anonymous
    key and the owner's shared key read none."""
    farmer, other = make_user("farmer"), make_user("other")
    assert farm_pop(native_client, farmer.api_key)["id"] is None
    assert farm_pop(native_client, other.api_key, "other")["id"] is None
    with transaction(native_db) as session:
        session.execute(update(Worker).where(Worker.user_id == farmer.id).values(suspicion=2))
        session.execute(update(User).where(User.id == farmer.id).values(suspicion=3))
    shared = native_client.put("/sharedkeys", headers={"apikey": farmer.api_key}, json={})
    assert shared.status_code == 200, shared.text
    worker_id = native_client.get("/workers/name/farm").json()["id"]
    own = {"apikey": farmer.api_key}
    for path in (f"/workers/{worker_id}", "/workers/name/farm"):
        assert native_client.get(path, headers=own).json()["suspicious"] == 2
    listed = {w["name"]: w for w in native_client.get("/workers", headers=own).json()}
    assert listed["farm"]["suspicious"] == 2
    assert "suspicious" not in listed["other"]  # not the key's worker
    assert native_client.get(f"/users/{farmer.id}", headers=own).json()["suspicious"] == 3
    assert native_client.get("/find_user", headers=own).json()["suspicious"] == 3
    unprivileged = [{}, {"apikey": other.api_key}, {"apikey": "no-such-key"}]
    unprivileged.append({"apikey": shared.json()["id"]})
    for headers in unprivileged:
        for path in (f"/workers/{worker_id}", "/workers/name/farm", f"/users/{farmer.id}"):
            assert "suspicious" not in native_client.get(path, headers=headers).json(), path
        listed = {w["name"]: w for w in native_client.get("/workers", headers=headers).json()}
        assert "suspicious" not in listed["farm"]
    assert "suspicious" not in native_client.get("/find_user", headers=unprivileged[-1]).json()
    assert "suspicious" not in native_client.get("/users").json()[0]
    anonymous = {"apikey": ANONYMOUS_API_KEY}  # a key everyone holds
    for path in (f"/users/{ANONYMOUS_USER_ID}", "/find_user"):
        assert "suspicious" not in native_client.get(path, headers=anonymous).json(), path


# A censored request's cap is the request's


def test_an_n_job_request_censored_pays_an_untrusted_worker_no_more_than_one_tax(
    native_client, native_db, make_user
):
    """Each of a 3-job request's censored replies, slow enough to be paid as claimed, earns
    an untrusted worker a third of CENSORED_UNTRUSTED_CAP (rounded down): the three
    together no more than the one tax the requester paid."""
    jobs = 3
    worker, requester = make_user("untrusted"), make_user("requester", kudos=10_000)
    assert farm_pop(native_client, worker.api_key)["id"] is None
    body = {
        "prompt": "p" * 1200,
        "params": {"n": jobs, "max_length": 512, "max_context_length": 4096},
    }
    queued = native_client.post(
        "/generate/text/async",
        headers={"apikey": requester.api_key},
        json={**body, "models": [MAGNUM]},
    )
    assert queued.status_code == 202, queued.text
    paid = []
    for _ in range(jobs):
        job = farm_pop(native_client, worker.api_key)
        assert job["id"], job
        worked_for(native_db, job["id"], 60)
        response = submit(native_client, worker.api_key, job["id"], "y" * 1000, state="censored")
        assert response.status_code == 200, response.text
        paid.append(Decimal(str(response.json()["reward"])))
    share = (Decimal(str(CENSORED_UNTRUSTED_CAP)) / jobs).quantize(Decimal("0.01"), ROUND_DOWN)
    assert paid == [share] * jobs
    assert sum(paid) <= CENSORED_UNTRUSTED_CAP <= HORDE_TAX
    assert balance(native_db, worker.id) == sum(paid)
