"""The demo model for tests on the real llama.cpp server: its gguf built in a module's temp
dir, and the one tool whose arguments a grammar can force.

    @pytest.fixture(scope="module")
    def demo_gguf(tmp_path_factory) -> Path:
        return build_demo_gguf(tmp_path_factory)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.worker.tiny_model import build_tiny_model

UNIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    },
}
"""A function whose only argument is an enum: a grammar forces a schema-valid call."""


DEMO_CONTEXT = 2048
"""The context the end-to-end demo stack serves the demo model with."""


def build_demo_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model's gguf, written in a fresh temp dir."""
    return build_tiny_model(tmp_path_factory.mktemp("models") / "demo.gguf")
