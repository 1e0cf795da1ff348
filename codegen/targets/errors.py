"""spec/errors.yaml -> generated/errors.py (the exception hierarchy)."""

from __future__ import annotations

from codegen.render import Output, render
from codegen.spec import Spec


def class_name(code: str) -> str:
    """``MissingPrompt`` stays; ``no_eligible_worker`` becomes ``NoEligibleWorker``."""
    if "_" not in code and code[0].isupper():
        return code
    return "".join(part[:1].upper() + part[1:] for part in code.split("_"))


def build(spec: Spec) -> list[Output]:
    errors = spec["errors.yaml"]["errors"]
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
        }
        for code, e in errors.items()
    ]
    return [render("errors.py.j2", spec.sources("errors.yaml"), "errors.py", rows=rows)]
