"""spec/api/*.yaml -> generated/routes.py and generated/route_schemas.json.

The route table is Python, one ``runtime.tables.routes.Route`` row per operation and one
``Header`` row per header; the named JSON Schemas bodies and headers refer to are data,
each written once in route_schemas.json (the contract's chat request and worker declaration
once for both surfaces), which runtime.tables.route_schemas loads. Every body is a reference
to one: a body that is not a named schema is named after its operation
(``<operation_id>_body``).
"""

from __future__ import annotations

import re
from typing import Any

from codegen.api import external_schemas, load_apis, rewrite_refs
from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, json_body, render
from codegen.spec import Spec
from codegen.targets.errors import collect as collect_errors

DEFS = "#/$defs/"
SCHEMAS_FILE = "route_schemas.json"


_NAMED = re.compile(r"^#/\$defs/[A-Za-z0-9_]+$")


def _constant(header: str) -> str:
    return "HEADER_" + re.sub(r"[^A-Za-z0-9]+", "_", header).upper()


def _named_body(
    defs: dict[str, Any], operation_id: str, body: dict[str, Any], where: str
) -> dict[str, str]:
    """A body that is not one named schema, named after its operation among the surface's
    schemas, and the reference to it (so every route's body is a reference)."""
    name = f"{operation_id}_body"
    if name in defs:
        problem = f"the name of {operation_id}'s body, taken"
        raise SpecErrors([SpecError(where, f"schemas.{name}", problem, "rename the schema")])
    defs[name] = body
    return {"$ref": DEFS + name}


def build(spec: Spec) -> list[Output]:
    apis = load_apis(spec)
    _, error_files = collect_errors(spec)
    shared = rewrite_refs(external_schemas(spec), DEFS)
    routes: list[dict[str, Any]] = []
    constants: dict[str, str] = {}
    base_paths: dict[str, str] = {}
    defs: dict[str, Any] = {}
    headers: dict[str, Any] = {}
    for surface, api in sorted(apis.items()):
        base_paths[surface] = api.base_path
        defs[surface] = {
            name: rewrite_refs(schema, DEFS)
            for name, schema in api.schemas.items()
            if name not in shared
        }
        headers[surface] = {
            name: {"schema": rewrite_refs(h["schema"], DEFS), "invalid": h.get("invalid")}
            for name, h in api.headers.items()
        }
        for name in api.headers:
            constants.setdefault(_constant(name), name)
        for r in api.routes:
            body = rewrite_refs(r.body, DEFS) if r.body is not None else None
            if body is not None and not _NAMED.match(body.get("$ref", "")):
                body = _named_body(defs[surface], r.operation_id, body, api.file)
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
                    "query_params": {
                        n: rewrite_refs(p["schema"], DEFS) for n, p in r.query_params.items()
                    },
                    "body": body,
                    "invalid_body": r.invalid_body,
                    "errors": r.errors,
                }
            )
    sources = sorted([a.file for a in apis.values()] + spec.sources(*error_files))
    sources += ["codegen/api.py", "codegen/chat_schema.py"]
    data = {"shared_defs": shared, "defs": defs}
    table = render(
        "routes.py.j2",
        sources,
        "routes.py",
        routes=routes,
        constants=constants,
        header_constants={value: name for name, value in constants.items()},
        base_paths=base_paths,
        headers=headers,
        schemas_file=SCHEMAS_FILE,
    )
    schemas = Output(SCHEMAS_FILE, json_body(data), (*sources, "codegen/targets/routes.py"))
    return [table, schemas]
