"""spec/rate_limits.yaml -> generated/rate_limits.py: every native route's limits and keys.

Every native operation of spec/api/native.yaml must be listed (an empty list says it has
none), no other; an ``anonymous`` value only on a key_route limit (it is the anonymous
key's own). The reference section of generated/docs/api.md is rendered by docs_api from
the same ``table``.
"""

from __future__ import annotations

from typing import Any

from codegen.api import load_apis
from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec

RATE_LIMITS = "rate_limits.yaml"
NATIVE = "native"
KEY_ROUTE = "key_route"


def table(spec: Spec) -> dict[str, Any]:
    """The checked spec file: keys, service budget and each native route's limits in the
    native API file's order."""
    data: dict[str, Any] = spec[RATE_LIMITS]
    native = load_apis(spec)[NATIVE]
    where = f"spec/{RATE_LIMITS}"
    operations = [r.operation_id for r in native.routes]
    problems = [
        SpecError(where, "routes", f"native operation {op!r} has no entry", "list it ([] for none)")
        for op in operations
        if op not in data["routes"]
    ]
    problems += [
        SpecError(where, f"routes.{op}", "not a native operation", f"use one of {operations}")
        for op in data["routes"]
        if op not in operations
    ]
    for op, limits in data["routes"].items():
        for i, limit in enumerate(limits):
            if "anonymous" in limit and limit["key"] != KEY_ROUTE:
                problems.append(
                    SpecError(
                        where,
                        f"routes.{op}[{i}].anonymous",
                        "an anonymous value on a limit not keyed on the API key",
                        f"use key: {KEY_ROUTE}, or drop anonymous",
                    )
                )
    if problems:
        raise SpecErrors(problems)
    paths = {r.operation_id: (r.method.upper(), r.path) for r in native.routes}
    routes = {op: data["routes"][op] for op in operations}
    return {
        "keys": data["keys"],
        "service": data.get("service_budget"),
        "routes": routes,
        "paths": paths,
    }


def build(spec: Spec) -> list[Output]:
    data = table(spec)
    sources = spec.sources(RATE_LIMITS, "api/native.yaml")
    return [render("rate_limits.py.j2", sources, "rate_limits.py", **data)]
