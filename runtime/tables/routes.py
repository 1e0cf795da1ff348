"""The rows of generated.routes: an operation of either surface and a header's rule."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_PLACEHOLDER = re.compile(r"{(\w+)}")


@dataclass(frozen=True)
class Header:
    """A request header's JSON Schema and the error code a bad value gets (None: the
    route's ``invalid_body``)."""

    schema: dict[str, Any]
    invalid: str | None = None


@dataclass(frozen=True)
class Route:
    """One operation of one surface (``native`` or ``front``): its method, full path
    (``{name}`` placeholders), headers, body schema and the errors it answers."""

    operation_id: str
    surface: str
    method: str
    path: str
    invalid_body: str
    """The error code a body that breaks ``body`` gets."""
    headers: tuple[str, ...] = ()
    required_headers: tuple[str, ...] = ()
    path_params: dict[str, Any] = field(default_factory=dict)
    query_params: dict[str, Any] = field(default_factory=dict)
    """Each query parameter's JSON Schema (``runtime.native.api.validation.query_values``
    checks them)."""
    body: dict[str, Any] | None = None
    errors: tuple[str, ...] = ()

    @property
    def flask_rule(self) -> str:
        """The path with Flask's ``<name>`` placeholders (``<path:name>`` for a parameter
        whose schema says ``x-slashes``: a model name such as ``org/model``)."""

        def placeholder(match: re.Match[str]) -> str:
            name = match.group(1)
            slashes = self.path_params.get(name, {}).get("x-slashes")
            return f"<path:{name}>" if slashes else f"<{name}>"

        return _PLACEHOLDER.sub(placeholder, self.path)
