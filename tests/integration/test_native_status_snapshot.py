"""A status read sees its request and its jobs as of one moment.

A status is the request's row (how many jobs are left to hand out, ``n``; faulted;
cancelled) and its jobs (landed, running, faulted), read by two statements. ``done`` is
"faulted, cancelled, or nothing left to hand out and nothing running". When each statement
saw what was committed when it ran, a worker's fault committed between them (the job marked
faulted and its slot given back, ``n`` 0 -> 1, in one transaction) was read half: the row
before it (``n`` 0), the jobs after it (none running), and the status said done, not faulted,
with no generation, for a request back in the queue. A front reading it answers its client
502 no_generation while a worker is about to take the request again (CI met it in
test_chat_worker_example: the worker's second fault). A pop or a payment committed between
the two reads is read half the same way.

Each test commits a worker's fault (the native API's own ``fault_generation``) at the moment
the status read's second statement, its jobs, is about to run, and checks the status is the
one before the fault or the one after it, never a mix of the two.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import select

from runtime.native.db.tables import Generation
from runtime.native.queue.sweep import fault_generation, utcnow
from runtime.native.server import NativeService
from runtime.stores.database import transaction
from tests.integration.chat_flow import chat_async, chat_body, chat_pop, chat_status
from tests.integration.native_flow import pop, status, submit_text
from tests.support.native import on_both_engines

pytestmark = pytest.mark.integration

_JOBS_READ = "FROM processing_gens JOIN workers"
"""How a request's jobs are read (``requests.status.request_jobs``), the only statement
joining them to their workers."""


@contextmanager
def _fault_before_the_jobs_read(service: NativeService, request_id: str) -> Iterator[list[str]]:
    """While open: the first statement that reads the request's jobs, on any of the native
    API's connections, runs only once a worker's fault of its running job has committed, in
    a transaction of its own. Yields the statements that met the hook (one, once it ran)."""
    ctx = service.context
    met: list[str] = []
    lock = threading.Lock()

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if _JOBS_READ not in statement:
            return
        with lock:
            if met:
                return
            met.append(statement)
        with transaction(ctx.sessions) as session:
            gen_id = session.scalars(
                select(Generation.id).where(Generation.wp_id == uuid.UUID(request_id))
            ).one()
            fault_generation(session, ctx.policy, gen_id, utcnow(), aborted=False)

    with on_both_engines(service, "before_cursor_execute", before):
        yield met


def _read_beside_a_fault(
    service: NativeService, request_id: str, status: Callable[[str], dict[str, Any]]
) -> None:
    """``status`` (the kind's status read) of a request whose job is running, with a
    worker's fault of that job committed as the read's jobs statement is about to run."""
    with _fault_before_the_jobs_read(service, request_id) as met:
        read = status(request_id)
    assert met, "the status read never read the request's jobs"
    after = status(request_id)
    assert (after["waiting"], after["processing"], after["done"]) == (1, 0, False), after
    # The read saw the job still running (its snapshot was taken before the fault), or the
    # whole fault; a request waiting for a worker again is never done.
    assert read["done"] is False, read
    assert (read["waiting"], read["processing"]) in {(0, 1), (1, 0)}, read


def test_a_chat_status_read_beside_a_workers_fault_sees_it_whole(
    native_service, native_client, make_user
):
    requester, owner = make_user("requester", kudos=100), make_user("owner")
    chat_pop(native_client, owner.api_key)  # online, so the request is admitted
    queued = chat_async(native_client, requester.api_key, chat_body())
    assert queued.status_code == 202, queued.text
    assert chat_pop(native_client, owner.api_key)["id"] is not None
    _read_beside_a_fault(
        native_service, queued.json()["id"], lambda rid: chat_status(native_client, rid)
    )


def test_a_text_status_read_beside_a_workers_fault_sees_it_whole(
    native_service, native_client, make_user
):
    requester, owner = make_user("requester", kudos=10), make_user("owner")
    request_id = submit_text(native_client, requester.api_key)
    assert pop(native_client, owner.api_key)["id"] is not None
    _read_beside_a_fault(native_service, request_id, lambda rid: status(native_client, rid))
