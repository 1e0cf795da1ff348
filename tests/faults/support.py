"""What the fault tests share: reading what a client saw and what each request cost.

``charges(sessions, user_id)``: the user's kudos charges per request id (reason "charge",
summed; the horde tax is not a charge). ``chat_rows(sessions)``: the chat requests, oldest
first. ``Survivor``: a test worker whose first pop already serves (a ChatTestWorker's
first pop only brings it online, and would lose a job waiting in the queue).
``read_stream(client, body)``: one streamed completion as the client sees it (the content
it received, the error event if any, whether [DONE] came). ``until(...)`` polls.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from runtime.native.db.tables import KudosLedger, WaitingPrompt
from tests.support.chat_worker import ChatTestWorker

CHARGE = "charge"
MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"  # a known size: its reward counts tokens
MESSAGES = [{"role": "user", "content": "Say hello"}]


def charges(sessions: sessionmaker[Session], user_id: int) -> dict[str, Decimal]:
    """Kudos charged to the user, per request id (a positive amount)."""
    with sessions() as session:
        rows = session.execute(
            select(KudosLedger.wp_id, KudosLedger.delta).where(
                KudosLedger.user_id == user_id, KudosLedger.reason == CHARGE
            )
        ).all()
    out: dict[str, Decimal] = defaultdict(Decimal)
    for wp_id, delta in rows:
        out[str(wp_id)] -= delta
    return dict(out)


def charge_entries(sessions: sessionmaker[Session], user_id: int) -> dict[str, int]:
    """How many charge entries each of the user's requests has."""
    with sessions() as session:
        rows = session.scalars(
            select(KudosLedger.wp_id).where(
                KudosLedger.user_id == user_id, KudosLedger.reason == CHARGE
            )
        ).all()
    out: dict[str, int] = defaultdict(int)
    for wp_id in rows:
        out[str(wp_id)] += 1
    return dict(out)


def chat_rows(sessions: sessionmaker[Session]) -> list[WaitingPrompt]:
    with sessions() as session:
        found = session.scalars(
            select(WaitingPrompt).where(WaitingPrompt.is_chat.is_(True)).order_by("created")
        ).all()
        return list(found)


@dataclass
class Streamed:
    """A streamed completion as its client saw it."""

    status: int
    content: str = ""
    errors: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    finish_reason: str | None = None
    request_id: str = ""
    body: str = ""


def read_stream(
    client: httpx.Client,
    body: dict[str, Any],
    *,
    on_content: Callable[[str], None] | None = None,
) -> Streamed:
    """POST a streamed completion and read it to its end; ``on_content(text so far)`` runs
    after each content delta."""
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as got:
        seen = Streamed(got.status_code, request_id=got.headers.get("x-request-id", ""))
        if got.status_code != 200:
            seen.body = got.read().decode()
            return seen
        for line in got.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                seen.done = True
                continue
            event = json.loads(data)
            if "error" in event:
                seen.errors.append(event["error"])
                continue
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    seen.content += delta["content"]
                    if on_content is not None:
                        on_content(seen.content)
                if choice.get("finish_reason"):
                    seen.finish_reason = choice["finish_reason"]
    return seen


class Survivor(ChatTestWorker):
    """A ChatTestWorker that serves from its first pop: it takes over a requeued job."""

    def __enter__(self) -> Survivor:
        self._thread.start()
        return self
