"""spec/errors.yaml -> generated/errors.py (the exception hierarchy)."""

from __future__ import annotations

import textwrap
from typing import Any

from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec
from runtime.contract.errors import HordeErrorBase


def class_name(code: str) -> str:
    """``MissingPrompt`` stays; ``no_eligible_worker`` becomes ``NoEligibleWorker``."""
    if "_" not in code and code[0].isupper():
        return code
    return "".join(part[:1].upper() + part[1:] for part in code.split("_"))


ERRORS_SCHEMA = "schema/errors.schema.json"


def collect(spec: Spec) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every error from every file whose $schema is the errors schema, and those files.

    Errors may be split across files by area (spec/errors.yaml, spec/chat/errors.yaml, ...);
    a code defined twice is refused.
    """
    errors: dict[str, dict[str, Any]] = {}
    files = sorted(rel for rel, data in spec.files.items() if data["$schema"] == ERRORS_SCHEMA)
    for rel in files:
        for code, entry in spec[rel]["errors"].items():
            if code in errors:
                raise SpecErrors(
                    [
                        SpecError(
                            f"spec/{rel}",
                            f"errors.{code}",
                            "defined twice",
                            "keep one definition of each error code",
                        )
                    ]
                )
            errors[code] = entry
    return errors, files


# The base class's value of every attribute a subclass may set, in the order they are written:
# read from the hand-written base (runtime/contract/errors.py), so each generated subclass sets
# only those that differ from it.
ATTRIBUTE_NAMES = (
    "code",
    "template",
    "native_status",
    "front_status",
    "openai_type",
    "default_param",
    "no_retry",
    "sends_retry_after",
    "default_retry_after",
    "front_when",
    "native_routes",
    "native_errors_map",
)
BASE_ATTRIBUTES: dict[str, Any] = {name: getattr(HordeErrorBase, name) for name in ATTRIBUTE_NAMES}


def attributes(entry: dict[str, Any]) -> dict[str, Any]:
    """Every class attribute of one spec error, by its name on the class."""
    native, front = entry.get("native", {}), entry.get("front", {})
    return {
        "code": entry["code"],
        "template": entry["message"],
        "native_status": native.get("status"),
        "front_status": front.get("status"),
        "openai_type": front.get("type"),
        "default_param": entry.get("param"),
        "no_retry": entry.get("no_retry", False),
        "sends_retry_after": entry.get("retry_after", False),
        "default_retry_after": entry.get("retry_after_seconds"),
        "front_when": tuple(front.get("when", ())),
        "native_routes": tuple(native.get("routes", ())),
        "native_errors_map": native.get("errors_map", False),
    }


def docstring(text: str, indent: int = 4, width: int = 100) -> str:
    """``text`` as a docstring body wrapped to ``width`` columns at ``indent``."""
    lines = textwrap.wrap(" ".join(text.split()), width=width - indent - 6)
    return ("\n" + " " * indent).join(lines)


def build(spec: Spec) -> list[Output]:
    errors, files = collect(spec)
    rows = []
    for code, e in errors.items():
        attrs = attributes({**e, "code": code})
        rows.append(
            {
                "code": code,
                "cls": class_name(code),
                "doc": docstring(e["description"]),
                "attrs": {k: v for k, v in attrs.items() if v != BASE_ATTRIBUTES[k]},
            }
        )
    return [
        render(
            "errors.py.j2",
            [*spec.sources(*files), "codegen/targets/errors.py", "runtime/contract/errors.py"],
            "errors.py",
            rows=rows,
        )
    ]
