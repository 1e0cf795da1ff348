"""A live chat front for tests and the bench: uvicorn on a free port, in a thread.

    with running_front(redis_url, ["http://127.0.0.1:7001"], poll_interval=0.5) as front:
        client = openai.OpenAI(base_url=front.url + "/v1", api_key=key)

Keyword arguments are ``FrontConfig`` fields (budgets shortened for tests by the caller);
``channel_of`` replaces the signal channel (a channel nobody publishes on loses every signal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from generated.signals import chat_channel
from runtime.front.config import FrontConfig
from runtime.front.server import FrontService


@contextmanager
def running_front(
    redis_url: str,
    native_roots: Sequence[str],
    *,
    channel_of: Callable[[str], str] = chat_channel,
    **config: Any,
) -> Iterator[FrontService]:
    front_config = FrontConfig(redis_url=redis_url, native_roots=tuple(native_roots), **config)
    service = FrontService.start(front_config, channel_of)
    try:
        yield service
    finally:
        service.stop()
