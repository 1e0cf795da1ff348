"""The rows of generated.streaming: which chat requests stream deltas, and a Redis key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeltaRule:
    """Which chat requests stream deltas: those asking for a stream (``stream_parameter``
    true), without any of ``absent_parameters``, whose output format (``format_parameter``)
    is absent or names (under ``format_type_key``) one of ``plain_format_types``."""

    stream_parameter: str
    absent_parameters: tuple[str, ...]
    format_parameter: str
    format_type_key: str
    plain_format_types: tuple[str, ...]

    def streams_deltas(self, request: Mapping[str, Any]) -> bool:
        """Whether ``request``'s content streams as the worker posts it; every other
        request keeps the whole-reply stream, and its pop writes no lease."""
        if request.get(self.stream_parameter) is not True:
            return False
        if any(request.get(key) for key in self.absent_parameters):
            return False
        output_format = request.get(self.format_parameter)
        if output_format is None:
            return True
        return (
            isinstance(output_format, Mapping)
            and output_format.get(self.format_type_key) in self.plain_format_types
        )


@dataclass(frozen=True)
class RedisKey:
    """A family of Redis keys: ``pattern`` with one ``{placeholder}`` for an id."""

    pattern: str
    placeholder: str

    def of(self, value: str) -> str:
        """The key of one id."""
        return self.pattern.replace("{" + self.placeholder + "}", value)

    @property
    def prefix(self) -> str:
        """What every key of the family begins with."""
        return self.pattern.split("{", 1)[0]
