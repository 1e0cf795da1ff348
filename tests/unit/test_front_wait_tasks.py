"""What an open wait holds: its work runs in the request's own task, its flags wait without
a task (thousands of waits are open at once, each task ~0.5 KiB with its frame), and of a
status not final it keeps only what it reads."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from generated.errors import FrontShuttingDown
from runtime.front.admission import ClientGone
from runtime.front.chat import DisconnectWatch
from runtime.front.drain import Drain
from runtime.front.signals import Flag, Signal
from runtime.front.stream_events import queue_note
from runtime.front.waiter import READ_WHILE_WAITING, ReplyWait, WaitBudget


class Client:
    """An ASGI receive whose client leaves when told."""

    def __init__(self) -> None:
        self.leaves = asyncio.get_running_loop().create_future()

    async def receive(self) -> dict[str, str]:
        await self.leaves
        return {"type": "http.disconnect"}


def test_the_work_runs_in_the_callers_task_with_no_task_of_its_own() -> None:
    async def scenario() -> None:
        watch = DisconnectWatch(Client().receive, Drain(60))

        async def work() -> tuple[asyncio.Task[object] | None, int]:
            return asyncio.current_task(), len(asyncio.all_tasks())

        # the caller and the disconnect listener: no task for the work nor for its two ends
        ran_in, tasks = await watch.run(work())
        assert ran_in is asyncio.current_task()
        assert tasks == 2
        watch.close()

    asyncio.run(scenario())


def test_a_client_that_leaves_ends_the_work_with_client_gone() -> None:
    async def scenario() -> None:
        client = Client()
        watch = DisconnectWatch(client.receive, Drain(60))
        started = asyncio.Event()
        cancelled = []

        async def work() -> None:
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        async def leave() -> None:
            await started.wait()
            client.leaves.set_result(None)

        leaving = asyncio.create_task(leave())
        with pytest.raises(ClientGone):
            await watch.run(work())
        assert cancelled == [True]
        current = asyncio.current_task()
        assert current is not None
        assert current.cancelling() == 0  # the cancel was taken back
        with pytest.raises(ClientGone):  # a later run ends at once, its work never started
            await watch.run(work())
        await leaving
        watch.close()

    asyncio.run(scenario())


def test_the_end_of_the_grace_ends_the_work_with_front_shutting_down() -> None:
    async def scenario() -> None:
        drain = Drain(0.01)
        drain.bind(asyncio.get_running_loop())
        watch = DisconnectWatch(Client().receive, drain)
        drain.begin()
        with pytest.raises(FrontShuttingDown):
            await watch.run(asyncio.sleep(3600))
        assert not drain._at_end  # the watch no longer listens for it
        watch.close()

    asyncio.run(scenario())


def test_a_flag_waits_for_set_or_its_seconds_without_a_task() -> None:
    async def scenario() -> None:
        flag, signal = Flag(), Signal()
        assert await flag.wait(0.001) is False  # its seconds passed
        asyncio.get_running_loop().call_soon(flag.set)
        assert await flag.wait(3600) is True
        assert await flag.wait() is True  # set: at once
        flag.clear()
        assert not flag.is_set()
        waiters = [asyncio.create_task(signal.wait()) for _ in range(2)]
        await asyncio.sleep(0)
        assert len(asyncio.all_tasks()) == 3  # this one and the two waiters: none inside
        signal.set()
        assert await asyncio.gather(*waiters) == [True, True]

    asyncio.run(scenario())


def test_a_wait_keeps_of_a_status_not_final_only_what_it_reads() -> None:
    budget = WaitBudget(deadline=60, grace=30, poll_interval=10, queue_info_wait=1)
    wait = ReplyWait(None, None, "r1", {}, budget, clock=lambda: 0.0)  # type: ignore[arg-type]
    queued: dict[str, Any] = {
        "done": False,
        "faulted": False,
        "processing": 0,
        "is_possible": True,
        "eligible_threads": 2,
        "queue_position": 3,
        "wait_time": 7,
        "generations": [],
        "kudos": 12.0,
        "waiting": 1,
        "missing_features": [],
        "exceeded_limits": [],
    }
    wait._keep(queued)  # type: ignore[arg-type]
    assert wait.status == {field: queued[field] for field in READ_WHILE_WAITING}
    assert queue_note(wait.status) == queue_note(queued)  # type: ignore[arg-type]
    final = {**queued, "done": True, "generations": [{"text": "Hello."}]}
    wait._keep(final)  # type: ignore[arg-type]
    assert wait.status is final  # a reply is built from it: whole


def test_what_a_wait_keeps_of_a_status_are_fields_of_the_wire_model() -> None:
    # READ_WHILE_WAITING spells ChatStatus's keys: a field renamed in spec/ must fail here,
    # not leave a wait keeping nothing of it
    from generated.wire.native import ChatStatus
    from runtime.front.waiter import READ_WHILE_WAITING

    fields = ChatStatus.__required_keys__ | ChatStatus.__optional_keys__
    assert set(READ_WHILE_WAITING) <= fields
