"""A live chat front for tests and the bench: uvicorn on a free port, in a thread.

    with running_front(redis_url, ["http://127.0.0.1:7001"], poll_interval=0.5) as front:
        client = openai.OpenAI(base_url=front.url + "/v1", api_key=key)

Keyword arguments are ``FrontConfig`` fields (budgets shortened for tests by the caller);
``channel_of`` replaces the signal channel (a channel nobody publishes on loses every signal).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from generated.signals import CHAT_SIGNALS
from runtime.front.config import FrontConfig
from runtime.front.server import FrontService


@contextmanager
def running_front(
    redis_url: str,
    native_roots: Sequence[str],
    *,
    channel_of: Callable[[str], str] = CHAT_SIGNALS.channel,
    **config: Any,
) -> Iterator[FrontService]:
    front_config = FrontConfig(redis_url=redis_url, native_roots=tuple(native_roots), **config)
    service = FrontService.start(front_config, channel_of)
    try:
        yield service
    finally:
        service.stop()


def open_waits(front_url: str) -> float:
    """The front's ``horde_front_open_waits``, from its /metrics (every process's, summed)."""
    text = httpx.get(front_url + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "horde_front_open_waits":
                return float(sample.value)
    return 0.0


def route_requests(front_url: str, route: str) -> float:
    """How many requests the front answered on ``route`` (a path template), any status."""
    text = httpx.get(front_url + "/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "horde_http_requests_total" and sample.labels.get("route") == route
    )


def answer_once_waiting(
    front_url: str, respond: Callable[[dict[str, Any]], Any], settle: float
) -> Callable[[dict[str, Any]], Any]:
    """A test worker's ``respond`` that answers once the front has a wait open, ``settle``
    seconds later: the wait takes the submit's status (looking the request's outcome key up
    first only when its hub may have missed an event), then sleeps until the signal wakes
    it (and counts the wake). A reply that lands before the wait opens is taken from the
    outcome key its held event names, unwoken."""

    def answer(job: dict[str, Any]) -> Any:
        deadline = time.monotonic() + 30
        while open_waits(front_url) < 1:
            assert time.monotonic() < deadline, "the front's wait never opened"
            time.sleep(0.02)
        time.sleep(settle)
        return respond(job)

    return answer
