"""The Response object of a Responses request, from the chat reply (spec/responses/reply.yaml).

``started(...)`` is the Response while the request is in progress (no output, no usage key);
``finished(reply, request, echo, created)`` the whole one: its status from the reply's finish
reason, its output items (the reasoning unless horde.include_reasoning is false, the content
as a message, each tool call as a function_call), the worker's token counts as usage
(estimated where it reported none, as a chat completion's) and x_horde. Both repeat the
request's keys the translation's echo holds. Each item's id is its prefix and the request id.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from generated.chat.names import FINISH_STOP
from generated.responses.names import ID_FUNCTION_CALL, ID_MESSAGE, ID_REASONING, ID_RESPONSE
from generated.responses.tables import ID_PREFIXES, STATUSES
from generated.wire.front import (
    Response,
    ResponseFunctionCallItem,
    ResponseMessageItem,
    ResponseOutputItem,
    ResponseReasoningItem,
    ResponseUsage,
)
from runtime.front.responses import Reply, shows_reasoning, usage, x_horde

ItemStatus = Literal["in_progress", "completed", "incomplete"]
OBJECT_RESPONSE: Literal["response"] = "response"


def item_id(kind: str, request_id: str, index: int | None = None) -> str:
    """The id of the response (``ID_RESPONSE``) or of one of its items."""
    suffix = "" if index is None else f"_{index}"
    return f"{ID_PREFIXES[kind]}{request_id}{suffix}"


def message_item(request_id: str, text: str, status: ItemStatus) -> ResponseMessageItem:
    return {
        "id": item_id(ID_MESSAGE, request_id),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def reasoning_item(request_id: str, text: str, status: ItemStatus) -> ResponseReasoningItem:
    return {
        "id": item_id(ID_REASONING, request_id),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def function_call_item(
    request_id: str, index: int, call: dict[str, Any], status: ItemStatus
) -> ResponseFunctionCallItem:
    function = call.get("function") or {}
    return {
        "id": item_id(ID_FUNCTION_CALL, request_id, index),
        "type": "function_call",
        "call_id": str(call.get("id") or ""),
        "name": str(function.get("name") or ""),
        "arguments": str(function.get("arguments") or ""),
        "status": status,
    }


def status_of(reply: Reply) -> tuple[Literal["completed", "incomplete"], str | None]:
    """The Response's status and incomplete reason for the reply's finish reason."""
    status, reason = STATUSES.get(reply.finish_reason, STATUSES[FINISH_STOP])
    return cast(Literal["completed", "incomplete"], status), reason


def output_items(
    reply: Reply, request: dict[str, Any], *, reasoning_first: bool = True
) -> list[ResponseOutputItem]:
    """The reply's items: its reasoning (shown), its content (or an empty message when it
    holds no call), its tool calls; the reasoning after the content when a stream had opened
    the message before any reasoning came."""
    status, _ = status_of(reply)
    items: list[ResponseOutputItem] = []
    if reply.content or not reply.tool_calls:
        items.append(message_item(reply.request_id, reply.content or "", status))
    if reply.reasoning_content and shows_reasoning(request):
        reasoning = reasoning_item(reply.request_id, reply.reasoning_content, status)
        items.insert(0 if reasoning_first else len(items), reasoning)
    calls = enumerate(reply.tool_calls)
    items += [function_call_item(reply.request_id, i, c, "completed") for i, c in calls]
    return items


def response_usage(reply: Reply, request: dict[str, Any]) -> tuple[ResponseUsage, bool]:
    """The chat completion's usage in the Response's names; the flag says a count was
    estimated."""
    counts, estimated = usage(reply, request)
    details = counts.get("completion_tokens_details") or {}
    return {
        "input_tokens": counts["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": counts["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": details.get("reasoning_tokens", 0)},
        "total_tokens": counts["total_tokens"],
    }, estimated


def started(request_id: str, model: str, echo: dict[str, Any], created: int) -> Response:
    """The Response of a request in progress."""
    body: dict[str, Any] = {
        **echo,
        "id": item_id(ID_RESPONSE, request_id),
        "object": OBJECT_RESPONSE,
        "created_at": created,
        "completed_at": None,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [],
    }
    return cast(Response, body)


def finished(
    reply: Reply,
    request: dict[str, Any],
    echo: dict[str, Any],
    created: int,
    completed: int,
    *,
    reasoning_first: bool = True,
) -> Response:
    """The Response of a finished request."""
    response = started(reply.request_id, reply.model, echo, created)
    status, reason = status_of(reply)
    counts, estimated = response_usage(reply, request)
    response["status"] = status
    response["completed_at"] = completed if status == "completed" else None
    response["incomplete_details"] = {"reason": reason} if reason else None  # type: ignore[typeddict-item]
    response["output"] = output_items(reply, request, reasoning_first=reasoning_first)
    response["usage"] = counts
    response["x_horde"] = x_horde(reply, estimated)
    return response
