"""spec/errors.yaml -> generated/errors.py (the exception hierarchy)."""

from __future__ import annotations

from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec


def class_name(code: str) -> str:
    """``MissingPrompt`` stays; ``no_eligible_worker`` becomes ``NoEligibleWorker``."""
    if "_" not in code and code[0].isupper():
        return code
    return "".join(part[:1].upper() + part[1:] for part in code.split("_"))


ERRORS_SCHEMA = "schema/errors.schema.json"


def collect(spec: Spec) -> tuple[dict[str, dict], list[str]]:
    """Every error from every file whose $schema is the errors schema, and those files.

    Errors may be split across files by area (spec/errors.yaml, spec/chat/errors.yaml, ...);
    a code defined twice is refused.
    """
    errors: dict[str, dict] = {}
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


def build(spec: Spec) -> list[Output]:
    errors, files = collect(spec)
    rows = [
        {
            "code": code,
            "cls": class_name(code),
            "message": e["message"],
            "description": e["description"],
            "native_status": e.get("native", {}).get("status"),
            "front_status": e.get("front", {}).get("status"),
            "openai_type": e.get("front", {}).get("type"),
            "param": e.get("param"),
            "no_retry": e.get("no_retry", False),
            "retry_after": e.get("retry_after", False),
            "retry_after_seconds": e.get("retry_after_seconds"),
            "front_when": tuple(e.get("front", {}).get("when", ())),
            "native_routes": tuple(e.get("native", {}).get("routes", ())),
        }
        for code, e in errors.items()
    ]
    return [render("errors.py.j2", spec.sources(*files), "errors.py", rows=rows)]
