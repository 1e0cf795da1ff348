"""The front's parse turns are shared fairly between addresses (runtime.front.fair_share):
a body from a quiet address goes before the rest of another address's flood, each address's
bodies keep their order, and a waiter that leaves gives up its place."""

from __future__ import annotations

import asyncio

from runtime.front.admission import PARSER_SLOTS
from runtime.front.fair_share import FairShare

BODY = 40 * 1024


async def _order_of_turns(arrivals: list[str], slots: int) -> list[str]:
    """The sources in the order their bodies got a turn, all arriving while every slot is
    held, the slots then freed one body at a time."""
    share = FairShare(slots)
    order: list[str] = []
    release = asyncio.Event()
    holders = [asyncio.Event() for _ in range(slots)]

    async def hold(held: asyncio.Event) -> None:
        async with share.turn("holder", BODY):
            held.set()
            await release.wait()

    async def body(source: str, done: asyncio.Event) -> None:
        async with share.turn(source, BODY):
            order.append(source)
        done.set()

    tasks = [asyncio.create_task(hold(h)) for h in holders]
    for held in holders:
        await held.wait()
    dones = [asyncio.Event() for _ in arrivals]
    tasks += [asyncio.create_task(body(s, d)) for s, d in zip(arrivals, dones, strict=True)]
    await asyncio.sleep(0)  # each new task runs until it waits for its turn
    assert len(share.waiting) == len(arrivals)
    release.set()
    for done in dones:
        await done.wait()
    await asyncio.gather(*tasks)
    return order


def test_a_quiet_address_goes_before_the_rest_of_a_flood() -> None:
    flood = ["flood"] * 40
    order = asyncio.run(_order_of_turns([*flood, "quiet"], PARSER_SLOTS))
    # Without sharing, the quiet body waited for all 40: here for at most one flood body.
    assert order.index("quiet") <= 1
    assert order.count("flood") == 40


def test_busy_addresses_take_turns() -> None:
    arrivals = ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    order = asyncio.run(_order_of_turns(arrivals, 1))
    assert order == ["a", "b", "c"] * 3


def test_a_waiter_that_leaves_gives_up_its_place() -> None:
    async def run() -> tuple[list[str], int]:
        share = FairShare(1)
        order: list[str] = []
        held = asyncio.Event()
        release = asyncio.Event()

        async def hold() -> None:
            async with share.turn("holder", BODY):
                held.set()
                await release.wait()

        async def body(source: str) -> None:
            async with share.turn(source, BODY):
                order.append(source)

        holder = asyncio.create_task(hold())
        await held.wait()
        gone = asyncio.create_task(body("gone"))
        stays = asyncio.create_task(body("stays"))
        await asyncio.sleep(0)  # both wait for their turn
        assert len(share.waiting) == 2
        gone.cancel()
        release.set()
        await asyncio.gather(holder, stays)
        await asyncio.gather(gone, return_exceptions=True)
        return order, share.busy

    order, busy = asyncio.run(run())
    assert order == ["stays"]
    assert busy == 0
