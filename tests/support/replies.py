"""A finished chat reply as the front holds it (``runtime.front.responses.Reply``), for tests
of what the front builds from one: the completion, its chunks, the Response object."""

from __future__ import annotations

from typing import Any

from runtime.front.responses import Reply


def reply(**fields: Any) -> Reply:
    """A plain answered reply of request ``r1``, with ``fields`` changed."""
    base: dict[str, Any] = {
        "request_id": "r1",
        "model": "m",
        "content": "Hello.",
        "reasoning_content": None,
        "tool_calls": [],
        "finish_reason": "stop",
        "reported": {"prompt_tokens": 5, "completion_tokens": 2},
        "kudos": 3.0,
        "charge_basis": "output_estimate",
    }
    return Reply(**{**base, **fields})
