"""spec/config.yaml -> generated/config.py and generated/docs/config.md: every HORDE_*
environment variable of every service, one typed row each (a ``runtime.tables.config.
Variable``, annotated with its value's type so mypy checks the default against the kind),
and the operator's table without the internal ones."""

from __future__ import annotations

from typing import Any

from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec

SOURCE = "config.yaml"
UNSET = "(unset)"
NONE = "(none)"

# spec type -> (the runtime.tables.config kind, the Python type of its value)
KINDS: dict[str, tuple[str, str]] = {
    "text": ("Text", "str"),
    "url": ("Url", "str"),
    "path": ("FilePath", "Path"),
    "integer": ("Integer", "int"),
    "number": ("Number", "float"),
    "whole_number": ("WholeNumber", "int"),
    "switch": ("Switch", "bool"),
    "choice": ("Choice", "str"),
    "lines": ("Lines", "tuple[str, ...]"),
    "list": ("Items", "tuple[str, ...]"),
    "url_list": ("Urls", "tuple[str, ...]"),
}
SWITCH_WORDS = {True: "on", False: "off"}


def _kind(entry: dict[str, Any]) -> str:
    """The kind's constructor, with its parameters."""
    name = KINDS[entry["type"]][0]
    if "choices" in entry:
        return f"{name}(choices={tuple(entry['choices'])!r})"
    if "at_least" in entry:
        return f"{name}(at_least={entry['at_least']!r})"
    if "above" in entry:
        return f"{name}(above={entry['above']!r})"
    return f"{name}()"


def _default(entry: dict[str, Any]) -> str:
    """The default as a Python literal of the kind's type."""
    if "default" not in entry:
        return "None"
    value = entry["default"]
    kind = entry["type"]
    if kind == "path":
        return f"Path({value!r})"
    if kind == "number":
        return repr(float(value))
    if isinstance(value, list):
        return repr(tuple(value))
    return repr(value)


def _shown(entry: dict[str, Any]) -> str:
    """The default as the operator would write it (or what unset means), and the floor a
    value must be above."""
    shown = _shown_default(entry)
    if "above" in entry:
        return f"{shown} (greater than {entry['above']})"
    return shown


def _shown_default(entry: dict[str, Any]) -> str:
    if "default" not in entry:
        return str(entry.get("unset", UNSET))
    value = entry["default"]
    if isinstance(value, bool):
        return SWITCH_WORDS[value]
    if isinstance(value, list):
        return ",".join(value) or NONE
    return str(value)


def _check(variables: dict[str, Any]) -> None:
    """What the JSON Schema cannot say: a choice's default is one of its choices."""
    problems = [
        SpecError(
            f"spec/{SOURCE}",
            f"variables.{name}.default",
            f"{entry['default']!r} is not one of its choices",
            f"use one of: {', '.join(entry['choices'])}",
        )
        for name, entry in variables.items()
        if "choices" in entry and "default" in entry and entry["default"] not in entry["choices"]
    ]
    if problems:
        raise SpecErrors(problems)


def rows(spec: Spec) -> list[dict[str, Any]]:
    """Every variable, in the spec's order, as the template writes it."""
    variables: dict[str, Any] = spec[SOURCE]["variables"]
    _check(variables)
    return [
        {
            "name": name,
            "annotation": KINDS[entry["type"]][1] + ("" if "default" in entry else " | None"),
            "kind": _kind(entry),
            "kind_class": KINDS[entry["type"]][0],
            "default": _default(entry),
            "services": tuple(entry["services"]),
            "meaning": entry["meaning"],
            "shown_default": _shown(entry),
            "internal": bool(entry.get("internal", False)),
        }
        for name, entry in variables.items()
    ]


def build(spec: Spec) -> list[Output]:
    variables = rows(spec)
    sources = spec.sources(SOURCE)
    kinds = sorted({v["kind_class"] for v in variables})
    return [
        render(
            "config.py.j2",
            sources,
            "config.py",
            variables=variables,
            kinds=kinds,
            needs_path="FilePath" in kinds,
        ),
        render("config.md.j2", sources, "docs/config.md", variables=variables),
    ]
