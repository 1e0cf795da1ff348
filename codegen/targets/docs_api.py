"""spec/api/*.yaml -> generated/docs/api.md: every route in one table per surface, then the
native API's rate limits (spec/rate_limits.yaml)."""

from __future__ import annotations

from codegen.api import load_apis
from codegen.render import Output, render
from codegen.spec import Spec
from codegen.targets.rate_limits import RATE_LIMITS
from codegen.targets.rate_limits import table as rate_limit_table


def build(spec: Spec) -> list[Output]:
    apis = load_apis(spec)
    surfaces = []
    for surface, api in sorted(apis.items()):
        rows = [
            {
                "method": r.method.upper(),
                "path": r.path,
                "op": r.operation_id,
                "summary": r.summary,
                "statuses": ", ".join(sorted(r.responses)),
                "headers": ", ".join(
                    f"{h} (required)" if h in r.required_headers else h for h in r.headers
                ),
                "errors": ", ".join(f"`{c}`" for c in r.errors),
            }
            for r in api.routes
        ]
        surfaces.append({"name": surface, "title": api.info["title"], "rows": rows})
    limits = rate_limit_table(spec)
    sources = sorted([a.file for a in apis.values()] + spec.sources(RATE_LIMITS))
    return [render("api.md.j2", sources, "docs/api.md", surfaces=surfaces, limits=limits)]
