"""Small helpers for driving the live native API in tests (requester and worker calls)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.db.tables import Generation, KudosLedger
from runtime.stores.database import transaction


def submit_text(
    client: httpx.Client, api_key: str, prompt: str = "Once upon a time", **params: Any
) -> str:
    body: dict[str, Any] = {"prompt": prompt, "params": {"max_length": 80, **params}}
    response = client.post("/generate/text/async", headers={"apikey": api_key}, json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def pop(
    client: httpx.Client, api_key: str, name: str = "worker-1", **fields: Any
) -> dict[str, Any]:
    body = {"name": name, "models": ["test-model-7B"], "max_length": 512, **fields}
    response = client.post("/generate/text/pop", headers={"apikey": api_key}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def submit(
    client: httpx.Client, api_key: str, job_id: str, generation: str = "The end.", **fields: Any
) -> httpx.Response:
    body = {"id": job_id, "generation": generation, **fields}
    return client.post("/generate/text/submit", headers={"apikey": api_key}, json=body)


def status(client: httpx.Client, request_id: str) -> dict[str, Any]:
    response = client.get(f"/generate/text/status/{request_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def ledger(sessions: sessionmaker[Session], user_id: int) -> list[tuple[str, Decimal]]:
    """The user's ledger as (reason, delta), oldest first."""
    with sessions() as session:
        rows = session.execute(
            select(KudosLedger.reason, KudosLedger.delta)
            .where(KudosLedger.user_id == user_id)
            .order_by(KudosLedger.id)
        ).all()
    return [(reason, delta) for reason, delta in rows]


def worked_for(sessions: sessionmaker[Session], job_id: str, seconds: float) -> None:
    """Move a running job's pop ``seconds`` into the past: its worker took that long, as a
    real backend does (an untrusted worker faster than its model allows is paid as a smaller
    one, spec/pricing.yaml economy; the test doubles answer at once)."""
    with transaction(sessions) as session:
        session.execute(
            update(Generation)
            .where(Generation.id == uuid.UUID(job_id))
            .values(start_time=Generation.start_time - timedelta(seconds=seconds))
        )
