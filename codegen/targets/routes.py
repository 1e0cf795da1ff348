"""spec/api/*.yaml -> generated/routes.py and generated/route_schemas.json.

The route table is Python, one ``Route`` record per operation; the JSON Schemas it checks
bodies and headers with are data, each written once in route_schemas.json (the contract's
chat request and worker declaration once for both surfaces) and loaded once when
generated.routes is imported. A body that is one named schema is written as its name.
"""

from __future__ import annotations

import re
from typing import Any

from codegen.api import external_schemas, load_apis, rewrite_refs
from codegen.render import Output, json_body, render
from codegen.spec import Spec
from codegen.targets.errors import collect as collect_errors

DEFS = "#/$defs/"
SCHEMAS_FILE = "route_schemas.json"
DEFAULT_INVALID_BODY = "InvalidPayload"  # codegen.api: a route's body error unless it names one
_NAMED = re.compile(r"^#/\$defs/([A-Za-z0-9_]+)$")


def _constant(header: str) -> str:
    return "HEADER_" + re.sub(r"[^A-Za-z0-9]+", "_", header).upper()


def _named(body: dict[str, Any]) -> str | None:
    """The schema name of a body that is nothing but a reference to one."""
    if list(body) == ["$ref"] and (m := _NAMED.match(body["$ref"])):
        return m.group(1)
    return None


def build(spec: Spec) -> list[Output]:
    apis = load_apis(spec)
    _, error_files = collect_errors(spec)
    shared = rewrite_refs(external_schemas(spec), DEFS)
    routes: list[dict[str, Any]] = []
    constants: dict[str, str] = {}
    base_paths: dict[str, str] = {}
    defs: dict[str, Any] = {}
    headers: dict[str, Any] = {}
    bodies: dict[str, Any] = {}
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
            named = _named(body) if body is not None else None
            if body is not None and named is None:
                bodies[r.operation_id] = body
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
                    "body": "none" if body is None else ("ref" if named is None else "named"),
                    "body_name": named,
                    "invalid_body": r.invalid_body,
                    "errors": r.errors,
                }
            )
    sources = sorted([a.file for a in apis.values()] + spec.sources(*error_files))
    sources += ["codegen/api.py", "codegen/chat_schema.py"]
    data = {"shared_defs": shared, "defs": defs, "headers": headers, "bodies": bodies}
    table = render(
        "routes.py.j2",
        sources,
        "routes.py",
        routes=routes,
        constants=constants,
        header_constants={value: name for name, value in constants.items()},
        base_paths=base_paths,
        schemas_file=SCHEMAS_FILE,
        default_invalid_body=DEFAULT_INVALID_BODY,
    )
    schemas = Output(SCHEMAS_FILE, json_body(data), (*sources, "codegen/targets/routes.py"))
    return [table, schemas]
