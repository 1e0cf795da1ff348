"""New API keys: upstream's shape (22 URL-safe characters), and never one a command line
would take for an option (``horde-chat worker --api-key KEY``, the example worker)."""

from __future__ import annotations

import re

from runtime.native.accounts.keys import new_api_key

KEYS = 2000
"""With a random first character, about 31 of these would start with "-"."""


def test_no_new_key_starts_with_a_dash() -> None:
    keys = [new_api_key() for _ in range(KEYS)]
    assert not [key for key in keys if key.startswith("-")]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", key) for key in keys)
    assert len(set(keys)) == KEYS
