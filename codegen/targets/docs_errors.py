"""The errors (every errors file) -> generated/docs/errors.md, the Markdown reference."""

from __future__ import annotations

from codegen.render import Output, render
from codegen.spec import Spec
from codegen.targets.errors import class_name, collect

AFTER_SUBMISSION = {"first_status", "waiting", "stream"}
STAGE_ORDER = ["admission", "validation", "submission", "first_status", "waiting", "stream"]


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def build(spec: Spec) -> list[Output]:
    errors, files = collect(spec)
    front, native, faults = [], [], []
    for code, e in errors.items():
        row = {
            "code": code,
            "cls": class_name(code),
            "message": _one_line(e["message"]),
            "description": _one_line(e["description"]),
            "param": e.get("param") or "",
            "no_retry": "false" if e.get("no_retry") else "",
            "retry_after": e.get("retry_after_seconds", "yes") if e.get("retry_after") else "",
        }
        if "front" in e:
            f = e["front"]
            first = min(STAGE_ORDER.index(w) for w in f["when"])
            if not row["no_retry"] and set(f["when"]) & AFTER_SUBMISSION:
                row["no_retry"] = "false once submitted"
            front.append(
                {
                    **row,
                    "status": f["status"],
                    "type": f["type"],
                    "when": ", ".join(f["when"]),
                    "order": (first, f["status"], code),
                }
            )
        if "native" in e:
            n = e["native"]
            native.append(
                {
                    **row,
                    "status": n["status"],
                    "routes": ", ".join(n["routes"]),
                    "front_status": e.get("front", {}).get("status", ""),
                }
            )
        if "worker" in e:
            faults.append(row)
    front.sort(key=lambda r: r["order"])
    native.sort(key=lambda r: (r["status"], r["code"]))
    rows = front + native + faults
    messages = sorted({r["code"]: r for r in rows}.values(), key=lambda r: r["code"])
    out = render(
        "errors.md.j2",
        spec.sources(*files),
        "docs/errors.md",
        front=front,
        native=native,
        messages=messages,
        faults=faults,
    )
    return [out]
