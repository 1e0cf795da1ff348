"""The active models (/status/models and /status/models/{name}), as upstream's ActiveModel:
per model, the online workers' threads (``count``), their average speed (``performance``),
the work queued (``queued`` tokens, ``jobs``) and the seconds to clear it (``eta``); ours,
``oldest_wait`` (seconds its oldest queued request has waited) and ``chat_count`` (workers
taking chat jobs, for the front's /v1/models). Workers in maintenance are left out, as
upstream's; a request that names no model counts toward every model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from generated.wire.native import ActiveModel
from runtime.contract.pricing import reference_name
from runtime.native.db.tables import AnyWorker, WaitingPrompt
from runtime.native.queue.fit import chat_model
from runtime.native.queue.policy import Policy
from runtime.native.requests.rows import queued as queued_requests
from runtime.native.requests.text import online_workers

MODEL_TYPE: Literal["text"] = "text"
"""The only type of model this horde serves."""
MODEL_STATES = {
    "known": lambda name: reference_name(name) is not None,
    "custom": lambda name: reference_name(name) is None,
    "all": lambda _name: True,
}
"""Upstream's model_state filter: in the text model reference, not in it, or either."""


@dataclass
class _Served:
    threads: int = 0
    chat_workers: int = 0
    speeds: list[float] = field(default_factory=list)


def _served(policy: Policy, workers: list[AnyWorker]) -> dict[str, _Served]:
    served: dict[str, _Served] = {}
    for worker in workers:
        chat = chat_model(worker)
        for name in dict.fromkeys([*worker.models, *([chat] if chat else [])]):
            entry = served.setdefault(name, _Served())
            entry.threads += worker.threads
            entry.chat_workers += int(name == chat)
            speed = policy.assumed_tokens_per_second if worker.speed is None else worker.speed
            entry.speeds.append(float(speed))
    return served


@dataclass(frozen=True)
class _Waiting:
    models: list[str]
    length: int
    n: int
    waited: float
    """Seconds since it was queued."""


def _queued(session: Session, now: datetime) -> list[_Waiting]:
    rows = session.execute(
        select(
            WaitingPrompt.models, WaitingPrompt.max_length, WaitingPrompt.n, WaitingPrompt.created
        ).where(*queued_requests())
    ).all()
    return [
        _Waiting(list(models or []), int(length), int(n), (now - created).total_seconds())
        for models, length, n, created in rows
    ]


def _figures(name: str, served: _Served, waiting: list[_Waiting]) -> ActiveModel:
    mine = [w for w in waiting if not w.models or name in w.models]
    queued = sum(w.length * w.n for w in mine)
    performance = sum(served.speeds) / len(served.speeds) if served.speeds else 0.0
    rate = served.threads * performance
    return ActiveModel(
        name=name,
        count=served.threads,
        performance=round(performance, 1),
        queued=float(queued),
        jobs=float(sum(w.n for w in mine)),
        eta=int(queued / rate) if rate and queued else 0,
        oldest_wait=max(0, int(max((w.waited for w in mine), default=0.0))),
        type=MODEL_TYPE,
        chat_count=served.chat_workers,
    )


def active_models(session: Session, policy: Policy, now: datetime) -> list[ActiveModel]:
    """Every model an online worker serves, by name."""
    served = _served(policy, [w for w, _trusted in online_workers(session, policy, now)])
    waiting = _queued(session, now)
    return [_figures(name, entry, waiting) for name, entry in sorted(served.items())]


def one_model(session: Session, policy: Policy, now: datetime, name: str) -> list[ActiveModel]:
    """The model ``name`` as a list of one (upstream's shape): served by an online worker,
    or named by a queued request (count 0); empty when neither."""
    served = _served(policy, [w for w, _trusted in online_workers(session, policy, now)])
    waiting = _queued(session, now)
    if name in served:
        return [_figures(name, served[name], waiting)]
    if any(name in w.models for w in waiting):
        return [_figures(name, _Served(), waiting)]
    return []


def filtered(
    models: list[ActiveModel], kind: str | None, counts: tuple[int | None, int | None], state: str
) -> list[ActiveModel]:
    """Upstream's filters: a type other than text holds none; at least / at most
    ``counts`` threads; ``state`` (MODEL_STATES)."""
    if kind not in (None, MODEL_TYPE):
        return []
    least, most = counts
    keep: Any = MODEL_STATES[state]
    return [
        m
        for m in models
        if (least is None or m["count"] >= least)
        and (most is None or m["count"] <= most)
        and keep(m["name"])
    ]
