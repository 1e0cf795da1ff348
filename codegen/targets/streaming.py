"""spec/streaming.yaml -> generated/streaming.py: Redis key names, lease and entry fields,
entry kinds and the numbers of delta streaming, shared by the native API and the front."""

from __future__ import annotations

import re
from typing import Any

from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec

SOURCE = "streaming.yaml"
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _check(spec: dict[str, Any]) -> None:
    """Rules the JSON Schema cannot say: a fraction is a fraction, the stream holds a cap."""
    settings = {name: s["value"] for name, s in spec["settings"].items()}
    problems = []
    if settings["pacing_smoothing"] > 1:
        problems.append(
            SpecError(
                f"spec/{SOURCE}",
                "settings.pacing_smoothing.value",
                "is above 1",
                "give the weight of the newest interval, between 0 and 1",
            )
        )
    if settings["stream_max_entries"] < settings["generation_chars"]:
        problems.append(
            SpecError(
                f"spec/{SOURCE}",
                "settings.stream_max_entries.value",
                "is below generation_chars, so trimming could drop a generation's own deltas",
                "make it at least generation_chars",
            )
        )
    if problems:
        raise SpecErrors(problems)


def _const(parameter: str) -> str:
    """The generated.chat.names constant of a request parameter."""
    return f"PARAM_{parameter.upper()}"


def _rule(data: dict[str, Any]) -> dict[str, Any]:
    return {
        **data,
        "description": " ".join(data["description"].split()),
        "stream_const": _const(data["stream_parameter"]),
        "absent_consts": [_const(p) for p in data["absent_parameters"]],
        "format_const": _const(data["format_parameter"]),
        "plain_format_types": tuple(data["plain_format_types"]),
    }


def _placeholder(pattern: str) -> str:
    """The one ``{placeholder}`` of a key pattern (the schema requires exactly one)."""
    found = PLACEHOLDER.search(pattern)
    if found is None:
        raise ValueError(f"key pattern {pattern!r} has no placeholder")
    return found.group(1)


def build(spec: Spec) -> list[Output]:
    data = spec[SOURCE]
    _check(data)
    rule = _rule(data["delta_requests"])
    param_names = sorted({rule["stream_const"], rule["format_const"], *rule["absent_consts"]})
    keys = [
        {
            "name": name,
            "pattern": entry["pattern"],
            "arg": _placeholder(entry["pattern"]),
            "description": " ".join(entry["description"].split()),
        }
        for name, entry in data["keys"].items()
    ]
    settings = [
        {
            "name": name,
            "value": entry["value"],
            "description": " ".join(entry["description"].split()),
        }
        for name, entry in data["settings"].items()
    ]
    return [
        render(
            "streaming.py.j2",
            spec.sources(SOURCE, "chat/parameters.yaml"),
            "streaming.py",
            keys=keys,
            rule=rule,
            param_names=param_names,
            resync_fields=data["resync_fields"],
            lease_fields=data["lease_fields"],
            entry_fields=data["entry_fields"],
            entry_kinds=data["entry_kinds"],
            settings=settings,
        )
    ]
