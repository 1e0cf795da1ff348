"""POST /kudos/transfer as upstream's (horde/apis/v2/base.py TransferKudos,
horde/database/functions.py transfer_kudos*): its body, checks, errors and answer; kudos are
never created or lost, and concurrent transfers from one balance never overdraw it."""

from __future__ import annotations

import threading
from decimal import Decimal

import httpx
import pytest
from sqlalchemy import func, select

from generated.accounts import TRANSFER_REVERSE_WAIT_SECONDS
from runtime.native.accounts.keys import ANONYMOUS_API_KEY, ledger_balance
from runtime.native.db.tables import KudosLedger, User

pytestmark = pytest.mark.integration

TRANSFER = "/kudos/transfer"


def send(
    client: httpx.Client, api_key: str, username: str, amount: float | None = None, **headers: str
) -> httpx.Response:
    body: dict[str, object] = {"username": username}
    if amount is not None:
        body["amount"] = amount
    return client.post(TRANSFER, headers={"apikey": api_key, **headers}, json=body)


def balance(sessions, user_id: int) -> Decimal:
    with sessions() as session:
        return session.get(User, user_id).kudos


def test_a_transfer_moves_kudos_by_name_or_id_and_defaults_to_100(
    native_client, native_db, make_user
):
    alice, bob = make_user("alice", kudos=1000), make_user("bob")
    done = send(native_client, alice.api_key, f"bob#{bob.id}")
    assert (done.status_code, done.json()) == (200, {"transferred": 100.0})
    assert (balance(native_db, alice.id), balance(native_db, bob.id)) == (900, 100)
    with native_db() as session:
        rows = session.execute(
            select(KudosLedger.user_id, KudosLedger.delta, KudosLedger.reason)
            .where(KudosLedger.reason.like("transfer%"))
            .order_by(KudosLedger.id)
        ).all()
        assert rows == [(alice.id, -100, "transfer_sent"), (bob.id, 100, "transfer_received")]
        for user in (alice, bob):
            assert ledger_balance(session, user.id) == float(balance(native_db, user.id))


@pytest.mark.raised_limits("kudos_transfer", why="several transfers by one key in a second")
def test_upstreams_refusals_in_its_envelope(native_client, native_db, make_user):
    alice, bob = make_user("alice", kudos=50), make_user("bob", kudos=10)
    cases = [
        (ANONYMOUS_API_KEY, f"bob#{bob.id}", 10, 400, "KudosTransferFromAnon"),
        (alice.api_key, "nobody#999", 10, 400, "InvalidTargetUsername"),
        (alice.api_key, "not a user", 10, 400, "InvalidTargetUsername"),
        (alice.api_key, "bob#²", 10, 400, "InvalidTargetUsername"),
        (alice.api_key, "Anonymous#0", 10, 400, "KudosTransferToAnon"),
        (alice.api_key, f"alice#{alice.id}", 10, 400, "KudosTransferToSelf"),
        (alice.api_key, f"bob#{bob.id}", -5, 400, "NegativeKudosTransfer"),
        (alice.api_key, f"bob#{bob.id}", 0, 400, "InvalidKudosTransferAmount"),
        (alice.api_key, f"bob#{bob.id}", 0.4, 400, "InvalidKudosTransferAmount"),
        (alice.api_key, f"bob#{bob.id}", 51, 400, "KudosTransferNotEnough"),
        ("not-a-key", f"bob#{bob.id}", 10, 401, "InvalidAPIKey"),
    ]
    for key, target, amount, status, rc in cases:
        refused = send(native_client, key, target, amount)
        assert (refused.status_code, refused.json()["rc"]) == (status, rc), (target, amount)
    assert (balance(native_db, alice.id), balance(native_db, bob.id)) == (50, 10)
    fraction = send(native_client, alice.api_key, str(bob.id), 10.7)  # upstream's int(): 10
    assert fraction.json() == {"transferred": 10.0}
    assert (balance(native_db, alice.id), balance(native_db, bob.id)) == (40, 20)


@pytest.mark.raised_limits("kudos_transfer", why="a transfer back right after the first")
def test_a_transfer_back_within_the_reverse_wait_is_refused(native_client, native_db, make_user):
    alice, bob = make_user("alice", kudos=500), make_user("bob", kudos=500)
    assert send(native_client, alice.api_key, str(bob.id), 10).status_code == 200
    back = send(native_client, bob.api_key, str(alice.id), 10)
    assert (back.status_code, back.json()["rc"]) == (400, "TooFastKudosTransfers")
    assert 0 < float(back.headers["retry-after"]) <= TRANSFER_REVERSE_WAIT_SECONDS
    assert send(native_client, alice.api_key, str(bob.id), 10).status_code == 200  # same way
    assert (balance(native_db, alice.id), balance(native_db, bob.id)) == (480, 520)


def test_the_shipped_rate_limit_is_one_transfer_a_second_per_key(native_client, make_user):
    alice, bob, carol = make_user("alice", kudos=500), make_user("bob"), make_user("carol")
    assert send(native_client, alice.api_key, str(bob.id), 1).status_code == 200
    assert send(native_client, alice.api_key, str(carol.id), 1).status_code == 429


@pytest.mark.raised_limits("kudos_transfer", why="a retry under the same key at once")
def test_an_idempotency_key_replays_the_first_transfer_and_refuses_another(
    native_client, native_db, make_user
):
    alice, bob, carol = make_user("alice", kudos=500), make_user("bob"), make_user("carol")
    key = {"Idempotency-Key": "retry-1"}
    for _ in range(3):
        again = send(native_client, alice.api_key, str(bob.id), 30, **key)
        assert (again.status_code, again.json()) == (200, {"transferred": 30.0})
    assert (balance(native_db, alice.id), balance(native_db, bob.id)) == (470, 30)
    for target, amount in ((str(carol.id), 30), (str(bob.id), 31)):
        other = send(native_client, alice.api_key, target, amount, **key)
        assert (other.status_code, other.json()["rc"]) == (400, "IdempotencyKeyConflict")
    assert balance(native_db, alice.id) == 470


@pytest.mark.raised_limits(
    "kudos_transfer", why="concurrent transfers from one balance are under test, not the rate"
)
def test_concurrent_transfers_never_overdraw_nor_create_kudos(native_url, native_db, make_user):
    """24 transfers of 100 from a balance of 1000, eight at once, to three users, while
    three others send it 40 each: at least ten leave, never more than the balance covers,
    and every balance is its ledger's sum, the total unchanged."""
    alice = make_user("alice", kudos=1000)
    targets = [make_user(f"target{i}") for i in range(3)]
    senders = [make_user(f"sender{i}", kudos=40) for i in range(3)]
    answers: list[int] = []
    gate = threading.Barrier(8)

    def run(key: str, target: int, amount: int, waits: bool) -> None:
        with httpx.Client(base_url=native_url, timeout=60) as client:
            if waits:
                gate.wait()
            answers.append(send(client, key, str(target), amount).status_code)

    jobs = [(alice.api_key, targets[i % 3].id, 100, i < 8) for i in range(24)]
    jobs += [(s.api_key, alice.id, 40, False) for s in senders]
    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    users = [alice.id, *(u.id for u in targets + senders)]
    with native_db() as session:
        balances = {u: session.get(User, u).kudos for u in users}
        for user_id in users:
            assert ledger_balance(session, user_id) == float(balances[user_id])
        sent, received = (
            session.scalar(
                select(func.count()).where(
                    KudosLedger.user_id == alice.id, KudosLedger.reason == reason
                )
            )
            for reason in ("transfer_sent", "transfer_received")
        )
    assert received == 3  # the senders' transfers never wait on alice's balance
    assert 10 <= sent <= (1000 + 40 * received) // 100
    assert balances[alice.id] == 1000 - 100 * sent + 40 * received >= 0
    assert sum(balances.values()) == 1120
    assert sorted(answers) == sorted([200] * (sent + received) + [400] * (24 - sent))
