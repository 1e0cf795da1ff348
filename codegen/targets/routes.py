"""spec/api/*.yaml -> generated/routes.py: the route table runtime validates requests with."""

from __future__ import annotations

import pprint
import re
from typing import Any

from codegen.api import external_schemas, load_apis, rewrite_refs
from codegen.render import render
from codegen.shared_literals import hoist
from codegen.spec import Spec
from codegen.targets.errors import collect as collect_errors

DEFS = "#/$defs/"


def _literal(value: Any) -> str:
    return pprint.pformat(value, width=96, sort_dicts=False)


def _constant(header: str) -> str:
    return "HEADER_" + re.sub(r"[^A-Za-z0-9]+", "_", header).upper()


def build(spec: Spec) -> list:
    apis = load_apis(spec)
    _, error_files = collect_errors(spec)
    routes, headers, defs, constants, base_paths = [], {}, {}, {}, {}
    for surface, api in sorted(apis.items()):
        base_paths[surface] = api.base_path
        defs[surface] = rewrite_refs({**api.schemas, **external_schemas(spec)}, DEFS)
        headers[surface] = {
            name: {
                "schema": rewrite_refs(h["schema"], DEFS),
                "invalid": h.get("invalid"),
            }
            for name, h in api.headers.items()
        }
        for name in api.headers:
            constants.setdefault(_constant(name), name)
        for r in api.routes:
            routes.append(
                {
                    "operation_id": r.operation_id,
                    "surface": surface,
                    "method": r.method.upper(),
                    "path": r.path,
                    "headers": r.headers,
                    "required_headers": r.required_headers,
                    "path_params": {
                        n: rewrite_refs(p["schema"], DEFS) for n, p in r.path_params.items()
                    },
                    "body": rewrite_refs(r.body, DEFS) if r.body is not None else None,
                    "invalid_body": r.invalid_body,
                    "errors": r.errors,
                }
            )
    # Each schema is written once: a schema recurring across surfaces, routes and headers
    # (the chat request on both surfaces, the declaration inside the pop body, ...) is a
    # module constant the places it stood refer to.
    trees = {"HEADERS": headers, "DEFS": defs}
    trees |= {f"BODY_{r['operation_id']}": r["body"] for r in routes if r["body"] is not None}
    named = {name: schema for by_name in defs.values() for name, schema in by_name.items()}
    shared, trees = hoist(trees, preferred=named)
    for r in routes:
        if r["body"] is not None:
            r["body"] = _literal(trees[f"BODY_{r['operation_id']}"])
    sources = [a.file for a in apis.values()] + spec.sources(*error_files)
    out = render(
        "routes.py.j2",
        [*sorted(sources), "codegen/api.py", "codegen/chat_schema.py"],
        "routes.py",
        routes=routes,
        schemas=[(name, _literal(value)) for name, value in shared],
        headers=_literal(trees["HEADERS"]),
        defs=_literal(trees["DEFS"]),
        constants=constants,
        base_paths=base_paths,
    )
    return [out]
