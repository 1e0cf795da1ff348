"""spec/defences.yaml -> generated/defences.py (what one client may cost a service: header,
body-deadline, connection and anonymous-share limits) and generated/docs/defences.md."""

from __future__ import annotations

from typing import Any

from codegen.render import Output, render
from codegen.spec import Spec

DEFENCES = "defences.yaml"
STORAGE = "storage/objects.yaml"


def build(spec: Spec) -> list[Output]:
    data: dict[str, Any] = spec[DEFENCES]
    intake: dict[str, Any] = spec[STORAGE]["intake"]
    return [
        render("defences.py.j2", spec.sources(DEFENCES), "defences.py", d=data),
        render(
            "docs_defences.md.j2",
            spec.sources(DEFENCES, STORAGE),
            "docs/defences.md",
            d=data,
            intake=intake,
            body=spec[STORAGE]["body"],
        ),
    ]
