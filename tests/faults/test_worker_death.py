"""A worker SIGKILLed after it popped a job, and mid-stream after its text reached the
client. The killed process is tests/faults/doomed_worker.py, a real worker
process over HTTP; the lifecycle sweep aborts its job when the generation's ttl has passed
(called here with that ``now``, as the background sweeper would do then) and the job goes
back to the queue, where a second worker (tests/faults/support.py's Survivor) serves it.

What the client must see: after a pop, the second worker's reply, charged once. Mid-stream,
the stream continues from where the client is when the second reply extends the text it
received, and otherwise ends with one error event; either way the client is charged at
most for the text it received.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import openai
import pytest

from generated.streaming import STREAMED_REPLY_PART
from runtime.contract.pricing import output_estimate
from runtime.native.accounts import kudos
from runtime.native.db.tables import WaitingPrompt
from runtime.native.queue.sweep import sweep, utcnow
from runtime.native.server import NativeService
from tests.conftest import MadeUser
from tests.faults.doomed_worker import DoomedWorker
from tests.faults.support import MESSAGES, MODEL, Survivor, charge_entries, charges, read_stream

pytestmark = [pytest.mark.faults, pytest.mark.integration]

POSTED = "The answer"
SECONDS = 60


def abort_stale_jobs(native: NativeService) -> None:
    """The sweep as it runs once the killed worker's generation outlived its ttl."""
    ctx = native.context
    later = utcnow() + timedelta(seconds=ctx.policy.generation_ttl_seconds + 1)
    assert sweep(ctx.sessions, ctx.policy, now=later, redis=ctx.redis).aborted == 1


def replying(content: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda job: {"content": content, "finish_reason": "stop"}


def price_of(native: NativeService, request_id: str, text: str) -> Any:
    """What a reply of ``text`` costs this request."""
    with native.context.sessions() as session:
        wp = session.get(WaitingPrompt, uuid.UUID(request_id))
        assert wp is not None
        tokens = output_estimate({STREAMED_REPLY_PART: text}, wp.max_length)
        return kudos.request_reward(wp, tokens, MODEL, trusted=False, bridge_agent="")


def test_a_worker_killed_after_pop_leaves_the_job_to_another_charged_once(
    fault_native: NativeService, front_url: str, users: tuple[MadeUser, MadeUser]
) -> None:
    requester, owner = users
    native_url = f"{fault_native.url}/api/v2"
    answers: list[Any] = []
    with DoomedWorker(native_url, owner.api_key, MODEL) as doomed:
        doomed.online(native_url)
        sdk = openai.OpenAI(base_url=front_url + "/v1", api_key=requester.api_key, max_retries=0)

        def ask() -> None:
            answers.append(sdk.chat.completions.create(model=MODEL, messages=MESSAGES))

        asking = threading.Thread(target=ask)
        asking.start()
        doomed.popped()
        doomed.kill()
        abort_stale_jobs(fault_native)
        with Survivor(
            native_url, owner.api_key, model=MODEL, respond=replying("Served."), name="survivor"
        ):
            asking.join(SECONDS)
        sdk.close()
    assert not asking.is_alive()
    (reply,) = answers
    assert reply.choices[0].message.content == "Served."
    assert charge_entries(fault_native.context.sessions, requester.id) == {
        reply.x_horde["request_id"]: 1
    }


def stream_killed_mid_way(
    native: NativeService, front_url: str, users: tuple[MadeUser, MadeUser], second_reply: str
) -> Any:
    """A streamed request whose worker posts POSTED, is killed once the client received it,
    and whose job a second worker answers with ``second_reply``: what the client saw."""
    requester, owner = users
    native_url = f"{native.url}/api/v2"
    received = threading.Event()
    seen: list[Any] = []
    with DoomedWorker(native_url, owner.api_key, MODEL, POSTED) as doomed:
        doomed.online(native_url)
        client = httpx.Client(
            base_url=front_url,
            headers={"Authorization": f"Bearer {requester.api_key}"},
            timeout=SECONDS,
        )

        def ask() -> None:
            def noted(text: str) -> None:
                if text == POSTED:
                    received.set()

            body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 300}
            seen.append(read_stream(client, body, on_content=noted))

        asking = threading.Thread(target=ask)
        asking.start()
        doomed.popped()
        assert received.wait(SECONDS), "the posted text never reached the client"
        doomed.kill()
        abort_stale_jobs(native)
        with Survivor(
            native_url, owner.api_key, model=MODEL, respond=replying(second_reply), name="survivor"
        ):
            asking.join(SECONDS)
        client.close()
    assert not asking.is_alive()
    return seen[0]


def test_a_stream_whose_worker_died_continues_when_the_next_reply_extends_it(
    fault_native: NativeService, front_url: str, users: tuple[MadeUser, MadeUser]
) -> None:
    full = POSTED + " is 42, as it always was."
    seen = stream_killed_mid_way(fault_native, front_url, users, full)
    assert seen.status == 200
    assert (seen.content, seen.errors, seen.finish_reason, seen.done) == (full, [], "stop", True)
    request_id = seen.request_id
    assert charge_entries(fault_native.context.sessions, users[0].id) == {request_id: 1}
    assert charges(fault_native.context.sessions, users[0].id)[request_id] == price_of(
        fault_native, request_id, full
    )


def test_a_stream_whose_worker_died_ends_with_an_error_and_charges_only_what_was_received(
    fault_native: NativeService, front_url: str, users: tuple[MadeUser, MadeUser]
) -> None:
    other = "Something else entirely, and much longer than the text streamed before it. " * 20
    seen = stream_killed_mid_way(fault_native, front_url, users, other)
    assert seen.status == 200
    assert seen.content == POSTED
    assert [error["code"] for error in seen.errors] == ["stream_diverged"]
    assert seen.done
    request_id = seen.request_id
    charged = charges(fault_native.context.sessions, users[0].id).get(request_id, 0)
    assert charged <= price_of(fault_native, request_id, seen.content)
