"""The native API's operator surface: ``/healthz``, ``/readyz``, ``/metrics`` and the
access log, hooked onto the Flask app by ``install``.

One registry a process (``REGISTRY``): requests, pops, faults and kudos moved, the last two
counted when their transaction commits (``count_on_commit``); queue depth and age and the
online pool per model are computed at scrape, one query each. The request id is the
caller's ``x-request-id`` (the front sends its own) or a new one; every response names it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from flask import Flask, Response, g, jsonify, request
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import event, func, select, true
from sqlalchemy.orm import Session, sessionmaker

from generated.errors import NotReady
from runtime.native.accounts.kudos import HORDE_TAX_REASON
from runtime.native.api.context import EXTENSION, NativeContext
from runtime.native.db.tables import WaitingPrompt
from runtime.native.queue.fit import chat_model
from runtime.native.queue.sweep import utcnow
from runtime.native.readiness import problems
from runtime.native.requests.rows import queued
from runtime.native.requests.text import online_workers
from runtime.observability import context
from runtime.observability.access_log import AccessLog
from runtime.observability.context import KUDOS_MOVES, WORKER_FAULTS
from runtime.observability.metrics import CONTENT_TYPE, UNMATCHED, HttpMetrics, exposition
from runtime.stores.database import transaction

REGISTRY = CollectorRegistry()
HTTP = HttpMetrics(REGISTRY)
POPS = Counter("horde_pops", "Jobs handed to workers, by kind.", ["kind"], registry=REGISTRY)
FAULTS = Counter(
    "horde_faults",
    "Jobs faulted by their worker (a faulted submit, or a reply verification refused), by kind.",
    ["kind"],
    registry=REGISTRY,
)
POPS_WAITING = Gauge(
    "horde_pops_waiting",
    "Pops waiting for a job (the long poll), holding no thread or database connection.",
    registry=REGISTRY,
    multiprocess_mode="livesum",  # with several processes: the API's total
)
POP_WAKES = Counter(
    "horde_pop_wakes", "Wake messages a process received for its waiting pops.", registry=REGISTRY
)
KUDOS_CHARGED = Counter(
    "horde_kudos_charged",
    "Kudos taken from requesters, by ledger reason (charge, horde_tax).",
    ["reason"],
    registry=REGISTRY,
)
KUDOS_REWARDED = Counter(
    "horde_kudos_rewarded", "Kudos paid to workers' owners.", registry=REGISTRY
)
CHARGE_REASONS = ("charge", HORDE_TAX_REASON)
REWARD_REASON = "reward"
ANY_MODEL = ""
"""The model label of requests that accept any model."""
REQUEST_ID_PREFIX = "native-"


def count_on_commit(sessions: sessionmaker[Session]) -> None:
    @event.listens_for(sessions, "after_commit")
    def _committed(session: Session) -> None:
        count_committed(session.info)

    @event.listens_for(sessions, "after_rollback")
    def _rolled_back(session: Session) -> None:
        session.info.pop(KUDOS_MOVES, None)
        session.info.pop(WORKER_FAULTS, None)


def count_committed(info: dict[str, Any]) -> None:
    """Count what ``info`` noted (a session's, or a dict an autocommit payment noted into:
    ``note_kudos``, ``note_worker_fault``) once it is committed, and forget it."""
    for kind, count in info.pop(WORKER_FAULTS, {}).items():
        FAULTS.labels(kind).inc(count)
    for reason, delta in info.pop(KUDOS_MOVES, []):
        if reason in CHARGE_REASONS and delta < 0:
            KUDOS_CHARGED.labels(reason).inc(float(-delta))
        elif reason == REWARD_REASON and delta > 0:
            KUDOS_REWARDED.inc(float(delta))


class StoreGauges(Collector):
    """Queue and worker gauges, read from Postgres when scraped."""

    def __init__(self, ctx: NativeContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = utcnow()
        depth = GaugeMetricFamily(
            "horde_queue_requests", "Queued requests per model ('' = any model).", labels=["model"]
        )
        oldest = GaugeMetricFamily(
            "horde_queue_oldest_age_seconds",
            "Age of the oldest queued request per model ('' = any model).",
            labels=["model"],
        )
        workers = GaugeMetricFamily(
            "horde_workers_online", "Online workers per model.", labels=["model"]
        )
        threads = GaugeMetricFamily(
            "horde_worker_threads_online", "Threads of online workers per model.", labels=["model"]
        )
        with transaction(self.ctx.sessions) as session:
            for model, count, first in self._queue(session):
                depth.add_metric([model], count)
                oldest.add_metric([model], max(0.0, (now - first).total_seconds()))
            per_model: dict[str, list[int]] = {}
            for worker, _trusted in online_workers(session, self.ctx.policy, now):
                chat = chat_model(worker)
                for name in dict.fromkeys([*worker.models, *([chat] if chat else [])]):
                    entry = per_model.setdefault(name, [0, 0])
                    entry[0] += 1
                    entry[1] += worker.threads
        for name, (count, thread_count) in sorted(per_model.items()):
            workers.add_metric([name], count)
            threads.add_metric([name], thread_count)
        yield from (depth, oldest, workers, threads)

    @staticmethod
    def _queue(session: Session) -> list[tuple[str, int, datetime]]:
        models = func.jsonb_array_elements_text(WaitingPrompt.models).table_valued("value")
        lateral = models.lateral("m")
        model = func.coalesce(lateral.c.value, ANY_MODEL)
        rows = session.execute(
            select(model, func.count(), func.min(WaitingPrompt.created))
            .select_from(WaitingPrompt)
            .outerjoin(lateral, true())
            .where(*queued())
            .group_by(model)
        ).all()
        return [(str(m), int(c), first) for m, c, first in rows]


def _ctx(app: Flask) -> NativeContext:
    ctx: NativeContext = app.extensions[EXTENSION]
    return ctx


def healthz() -> Response:
    return jsonify(status="ok")


def readyz() -> Response:
    from flask import current_app

    ctx = _ctx(current_app)
    found = problems(ctx.engine, ctx.redis)
    if found:
        raise NotReady(problems="; ".join(found))
    return jsonify(status="ready")


def metrics() -> Response:
    from flask import current_app

    HTTP.gc.flush()  # the pauses noted since this process's last request
    body = exposition(REGISTRY, [StoreGauges(_ctx(current_app))])
    return Response(body, mimetype=None, content_type=CONTENT_TYPE)


def begin_request(header: str | None) -> tuple[float, str]:
    """A request starts: its start time and its id (the caller's ``x-request-id`` when it
    is a plain token, else a new one), set as the request's context."""
    request_id = context.accepted_request_id(header, REQUEST_ID_PREFIX)
    context.begin(request_id)
    return time.perf_counter(), request_id


def finish_request(
    access_log: AccessLog,
    *,
    method: str,
    route: str,
    status: int,
    started: float | None,
    request_id: str | None,
    pop_kind: str | None,
    logged: bool = True,
) -> None:
    """A response goes out: a pop's job counted (horde_pops); unless ``logged`` is False
    (a waiting pop, woken: logged when it came in), the request counted and its
    access-log line written."""
    seconds = time.perf_counter() - started if started is not None else 0.0
    if pop_kind is not None and status == 200:
        POPS.labels(pop_kind).inc()
    if not logged:
        return
    HTTP.observe(method, route, status, seconds)
    access_log.emit(
        method=method,
        route=route,
        status=status,
        latency_ms=seconds * 1000,
        request_id=request_id,
        user_id=context.user_id.get(),
    )


def _begin() -> None:
    g.horde_started, g.horde_request_id = begin_request(
        request.headers.get(context.REQUEST_ID_HEADER)
    )


def _finish(response: Response) -> Response:
    rule = request.url_rule
    request_id = g.get("horde_request_id")
    if request_id:
        response.headers[context.REQUEST_ID_HEADER] = request_id
    finish_request(
        _log_of(),
        method=request.method,
        route=rule.rule if rule is not None else UNMATCHED,
        status=response.status_code,
        started=g.get("horde_started"),
        request_id=request_id,
        pop_kind=g.get("horde_pop_kind"),
    )
    return response


POP_TEXT, POP_CHAT = context.KIND_TEXT, context.KIND_CHAT
"""The ``kind`` label of horde_pops: a text job or a chat job handed out."""


def note_pop(kind: str) -> None:
    """The pop view handed out a job of ``kind``; counted when its response goes out."""
    g.horde_pop_kind = kind


def _log_of() -> AccessLog:
    from flask import current_app

    found: AccessLog = current_app.extensions["horde_access_log"]
    return found


def install(app: Flask, ctx: NativeContext, access_log: AccessLog | None = None) -> None:
    """The access log and the request counters on ``app`` (the operator routes are in
    ``OPERATOR_VIEWS``, registered from the spec's routes with the others)."""
    app.extensions["horde_access_log"] = access_log or AccessLog("native")
    count_on_commit(ctx.sessions)
    # first, so a limiter or another hook that answers early still has a start time
    app.before_request_funcs.setdefault(None, []).insert(0, _begin)
    app.after_request(_finish)


OPERATOR_VIEWS = {"native_healthz": healthz, "native_readyz": readyz, "native_metrics": metrics}
"""The views of spec/api/native.yaml's operator routes (at the server's root)."""
