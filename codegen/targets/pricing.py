"""spec/pricing.yaml + its model reference -> generated/pricing.py (the numbers the one pricing
function applies, the expanded model reference, the validated backends) and
generated/docs/pricing.md."""

from __future__ import annotations

import re
from typing import Any

from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec

PRICING = "pricing.yaml"


def _expanded(reference: dict[str, Any], source: str) -> dict[str, float]:
    """Every name a reference entry is known by (upstream's convert.py aliases) -> billions."""
    known: dict[str, float] = {}
    problems: list[SpecError] = []
    for name, billions in reference["models"].items():
        short = name.rsplit("/", 1)[-1]
        names = [name, *(a.format(name=name, short=short) for a in reference["aliases"])]
        for alias in names:
            if alias in known and known[alias] != billions:
                problems.append(
                    SpecError(
                        source,
                        f"models.{name}",
                        f"{alias!r} is also another entry's alias with another size",
                        "give the two entries the same size or rename one",
                    )
                )
            known[alias] = billions
    if problems:
        raise SpecErrors(problems)
    return known


def build(spec: Spec) -> list[Output]:
    data: dict[str, Any] = spec[PRICING]
    ref_path = data["model_reference"]
    if ref_path not in spec.files:
        raise SpecErrors(
            [
                SpecError(
                    f"spec/{PRICING}", "model_reference", f"no spec file {ref_path}", "fix the path"
                )
            ]
        )
    reference = spec[ref_path]
    try:
        re.compile(reference["quantisation_suffix"])
    except re.error as exc:
        raise SpecErrors(
            [SpecError(f"spec/{ref_path}", "quantisation_suffix", str(exc), "fix the expression")]
        ) from exc
    models = _expanded(reference, f"spec/{ref_path}")
    sources = spec.sources(PRICING, ref_path)
    context = {"p": data, "ref": reference, "models": models}
    return [
        render("pricing.py.j2", sources, "pricing.py", **context),
        render("docs_pricing.md.j2", sources, "docs/pricing.md", **context),
    ]
