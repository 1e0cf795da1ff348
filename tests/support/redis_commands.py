"""How many times Redis ran some commands, from ``INFO commandstats``: a test counts what a
request sent by the difference before and after it.

    before = command_calls(redis.info("commandstats"), "get", "subscribe")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def command_calls(stats: Mapping[str, Any], *commands: str) -> dict[str, int]:
    """Each command's calls since Redis started (0 for one it never ran)."""
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in commands}
