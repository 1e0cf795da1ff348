"""What a chat job carries to the worker: every sampling field, and the narrowed tools.

Every payload includes every sampling field, with OpenAI's default where the client left
one out, so an omission means the same on every worker; a worker that declares reasoning
receives reasoning_effort (medium when omitted). Dispatch narrows tools as the contract
allows: tool_choice none sends no tool definitions, a named function goes as that one
function under required. The stored request keeps the client's values.
"""

from __future__ import annotations

from typing import Any

from generated.chat.names import (
    FEATURE_REASONING,
    PARAM_REASONING_EFFORT,
    PARAM_TOOL_CHOICE,
    PARAM_TOOLS,
    TOOL_CHOICE_AUTO,
    TOOL_CHOICE_NONE,
    TOOL_CHOICE_REQUIRED,
)
from generated.chat.tables import PARAMETERS, SAMPLING_DEFAULTS


def sampling_payload(request: dict[str, Any], declared_features: list[str]) -> dict[str, Any]:
    """Payload key -> value for every sampling field (the first set parameter wins a key)."""
    payload: dict[str, Any] = dict(SAMPLING_DEFAULTS)
    chosen: set[str] = set()
    for name, spec in PARAMETERS.items():
        key = spec["payload_key"]
        if spec["sampling"] and key not in chosen and request.get(name) is not None:
            payload[key] = request[name]
            chosen.add(key)
    if FEATURE_REASONING in declared_features:
        default = PARAMETERS[PARAM_REASONING_EFFORT]["default"]
        payload[PARAM_REASONING_EFFORT] = request.get(PARAM_REASONING_EFFORT, default)
    return payload


def tools_for_worker(request: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, Any]:
    """(tools, tool_choice) as the job carries them, narrowed from the stored request."""
    tools: list[dict[str, Any]] | None = request.get(PARAM_TOOLS)
    choice = request.get(PARAM_TOOL_CHOICE, TOOL_CHOICE_AUTO if tools else None)
    if not tools or choice == TOOL_CHOICE_NONE:
        return None, None
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return [t for t in tools if t["function"]["name"] == name], TOOL_CHOICE_REQUIRED
    return tools, choice
