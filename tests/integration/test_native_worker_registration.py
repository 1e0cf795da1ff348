"""A worker name is registered once however many pops race for it: a worker's threads
popping together under a new name all get 200 (no UniqueViolation, no 500), and two users
racing for one new name leave it to one of them (the other is refused WrongCredentials)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import func, select

from runtime.native.db.tables import Worker

pytestmark = pytest.mark.integration

THREADS = 12


def _race(native_url: str, keys: list[str], name: str) -> list[httpx.Response]:
    """Every key pops under ``name`` at once (``THREADS`` pops in all), each on its own client."""
    barrier = threading.Barrier(THREADS)
    clients = [httpx.Client(base_url=native_url, timeout=30) for _ in range(THREADS)]
    for client in clients:  # connect first, so the pops start as close together as they can
        client.get("/status/heartbeat")

    def one(i: int) -> httpx.Response:
        body = {"name": name, "models": ["test-model-7B"], "max_length": 512}
        barrier.wait()
        key = keys[i % len(keys)]
        return clients[i].post("/generate/text/pop", headers={"apikey": key}, json=body)

    try:
        with ThreadPoolExecutor(THREADS) as pool:
            return list(pool.map(one, range(THREADS)))
    finally:
        for client in clients:
            client.close()


def _workers(native_db, name: str) -> list[tuple[str, int]]:
    with native_db() as session:
        return [
            (w.name, w.user_id) for w in session.scalars(select(Worker).where(Worker.name == name))
        ]


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_first_pops_under_one_new_name_register_it_once(
    native_url, native_db, make_user, round_
):
    owner = make_user(f"owner-{round_}")
    responses = _race(native_url, [owner.api_key], f"fresh-{round_}")
    assert [r.status_code for r in responses] == [200] * THREADS, [r.text for r in responses]
    assert _workers(native_db, f"fresh-{round_}") == [(f"fresh-{round_}", owner.id)]


def test_two_users_racing_for_a_new_name_leave_it_to_one(native_url, native_db, make_user):
    alice, bob = make_user("alice"), make_user("bob")
    responses = _race(native_url, [alice.api_key, bob.api_key], "contested")
    ((_, winner),) = _workers(native_db, "contested")
    winner_key = alice.api_key if winner == alice.id else bob.api_key
    for i, response in enumerate(responses):
        key = [alice.api_key, bob.api_key][i % 2]
        if key == winner_key:
            assert response.status_code == 200, response.text
        else:
            assert response.status_code == 403, response.text
            assert response.json()["rc"] == "WrongCredentials"
    with native_db() as session:
        assert session.scalar(select(func.count()).select_from(Worker)) == 1


def test_a_raced_name_still_counts_once_against_the_worker_limit(native_url, native_db, make_user):
    owner = make_user("owner")
    for round_ in range(2):
        responses = _race(native_url, [owner.api_key], f"w-{round_}")
        assert {r.status_code for r in responses} == {200}
    with native_db() as session:
        count = session.scalar(select(func.count()).where(Worker.user_id == owner.id))
    assert count == 2
