"""A worker's declaration is parsed once and kept: every pop gets the same
answer as a fresh parse, in its own copy, and the pop's own lengths still count."""

from __future__ import annotations

import pytest

from generated.errors import InvalidChatDeclaration
from runtime.contract import declaration as module
from runtime.contract.declaration import parse_worker_declaration

BODY = {"name": "w", "chat_jobs": True, "model_id": "m", "chat_features": ["tools"]}


def test_a_kept_declaration_is_the_parse_in_a_copy_of_its_own() -> None:
    first = parse_worker_declaration({**BODY, "max_context_length": 4096})
    first["chat_features"].append("vision")
    first["chat_limits"]["max_length"] = 1
    again = parse_worker_declaration({**BODY, "max_context_length": 4096})
    assert again["chat_features"] == ["tools"]
    assert again["chat_limits"]["max_length"] == 512
    assert again == module._parse({**BODY, "max_context_length": 4096})


def test_the_pops_lengths_are_part_of_what_is_kept() -> None:
    small = parse_worker_declaration({**BODY, "max_context_length": 2048, "max_length": 80})
    large = parse_worker_declaration({**BODY, "max_context_length": 8192, "max_length": 80})
    assert small["chat_limits"]["max_context_length"] == 2048
    assert large["chat_limits"]["max_context_length"] == 8192


def test_a_refused_declaration_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(InvalidChatDeclaration):
            parse_worker_declaration({**BODY, "chat_features": ["tool"]})
