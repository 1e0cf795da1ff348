"""What the native submit reads as the text a client's stream received
(``progress.protocol.relayed_to_client``: before an earlier worker of the job died, or the
submitting worker's own posts) is what the front's relay
(``runtime.front.progress_stream.relay``) sends: each stream below is written to the real
Redis as the protocol writes it, relayed by the front's code, and read back by the native
side's, for the generation that submits (B).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from generated import streaming as S
from runtime.front.progress_stream import relay
from runtime.native.progress.protocol import Posted, Relayed, relayed_to_client
from runtime.native.server import NativeService

pytestmark = pytest.mark.integration

REQUEST = "7c1d0c9e-0000-4000-8000-000000000001"
A, B = "gen-a", "gen-b"


def delta(gen: str, text: str, reasoning: str = "") -> dict[str, str]:
    fields = {S.ENTRY_KIND: S.KIND_DELTA, S.ENTRY_GENERATION_ID: gen, S.ENTRY_DELTA: text}
    if reasoning:
        fields[S.ENTRY_REASONING] = reasoning
    return fields


def end(gen: str, kind: str) -> dict[str, str]:
    return {S.ENTRY_KIND: kind, S.ENTRY_GENERATION_ID: gen}


CASES: list[tuple[list[dict[str, str]], Relayed | None]] = [
    # the first worker posted, then died: the relay ends there, the next reply reconciles
    (
        [delta(A, "Hel"), delta(A, "lo", "hm"), end(A, S.KIND_FAULTED)],
        Relayed(Posted("Hello", "hm"), own=False),
    ),
    ([delta(A, "Hel"), end(A, S.KIND_FAULTED), delta(B, "Bye")], Relayed(Posted("Hel", ""), False)),
    # the first died before posting: the relay goes on to the next worker's own deltas
    ([end(A, S.KIND_FAULTED), delta(B, "Hi")], Relayed(Posted("Hi", ""), own=True)),
    ([end(A, S.KIND_FAULTED)], None),
    # the submitting worker's own posts, relayed as they came
    ([delta(B, "Hi"), delta(B, " there", "hm")], Relayed(Posted("Hi there", "hm"), own=True)),
    ([], None),
]


@pytest.mark.parametrize(("entries", "expected"), CASES)
def test_the_native_side_reads_what_the_relay_sent_before_a_fault(
    native_service: NativeService, native_db: Any, entries: list[dict[str, str]], expected: Any
) -> None:
    redis: Redis = native_service.context.redis
    key = S.STREAM_KEY.of(REQUEST)
    for fields in entries:
        redis.xadd(key, fields)  # type: ignore[arg-type]
    assert relayed_to_client(redis, REQUEST, B) == expected
    if expected is None:
        return
    stop = asyncio.Event()
    if expected.own:
        stop.set()  # the relay is still on B's deltas: it drains them and returns

    async def relayed() -> Posted:
        client = AsyncRedis.from_url(native_service.context.settings.redis_url or "")
        try:
            got = [d async for d in relay(client, REQUEST, stop=stop)]
        finally:
            await client.aclose()
        return Posted("".join(d.text for d in got), "".join(d.reasoning for d in got))

    # the relay ends on the fault by itself (no stop): what it sent is what the native reads
    assert asyncio.run(asyncio.wait_for(relayed(), 5)) == expected.posted
