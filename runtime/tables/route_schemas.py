"""The named JSON Schemas of each surface, which route bodies and headers refer to as
``#/$defs/NAME``: generated/route_schemas.json (the ones both surfaces share written once),
loaded once, at import."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from generated.routes import SCHEMAS_FILE


def _load() -> dict[str, dict[str, Any]]:
    text = resources.files("generated").joinpath(SCHEMAS_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    shared: dict[str, Any] = data["shared_defs"]
    return {surface: {**own, **shared} for surface, own in data["defs"].items()}


DEFS: dict[str, dict[str, Any]] = _load()
"""Per surface: its named schemas, with the contract's chat request and worker declaration."""
