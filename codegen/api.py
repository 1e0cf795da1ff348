"""spec/api/*.yaml -> resolved routes, shared by the OpenAPI, route-table and docs targets.

A route's schemas name each other as ``#/schemas/NAME`` and the contract's schemas as
``#/external/chat_request`` / ``#/external/responses_request`` /
``#/external/worker_declaration`` (from codegen.chat_schema and codegen.responses_schema).
``load_apis`` checks every reference (schemas, headers, path parameters, errors and their
status on the route's surface) and refuses a bad one with file, path and suggestion;
``rewrite_refs`` points references at ``#/components/schemas/`` or ``#/$defs/``.
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass
from typing import Any

from codegen.chat_schema import chat_request_schema, worker_declaration_schema
from codegen.chat_tables import REPLY_FILE
from codegen.errors import SpecError, SpecErrors
from codegen.responses_schema import responses_request_schema
from codegen.spec import Spec
from codegen.targets.errors import ERRORS_SCHEMA
from codegen.targets.errors import collect as collect_errors

API_SCHEMA = "schema/api.schema.json"
EXTERNAL = {
    "chat_request": "ChatRequest",
    "responses_request": "ResponsesRequest",
    "worker_declaration": "WorkerDeclaration",
}
_REF = re.compile(r"^#/(schemas|external)/([A-Za-z0-9_]+)$")


@dataclass(frozen=True)
class Route:
    """One operation, with its path in full and every error it can return."""

    operation_id: str
    method: str
    path: str
    summary: str
    description: str
    tags: tuple[str, ...]
    headers: tuple[str, ...]
    required_headers: tuple[str, ...]
    path_params: dict[str, Any]
    query_params: dict[str, Any]
    body: dict[str, Any] | None
    body_description: str
    invalid_body: str
    responses: dict[str, Any]
    errors: tuple[str, ...]


@dataclass(frozen=True)
class Api:
    """One surface (native or front): its file, routes and named schemas (refs unresolved)."""

    file: str
    surface: str
    info: dict[str, Any]
    base_path: str
    headers: dict[str, Any]
    schemas: dict[str, Any]
    routes: tuple[Route, ...]


def rewrite_refs(node: Any, prefix: str) -> Any:
    """A deep copy with ``#/schemas/X`` and ``#/external/x`` refs pointing under ``prefix``."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and (m := _REF.match(value)):
                name = m.group(2) if m.group(1) == "schemas" else EXTERNAL[m.group(2)]
                out[key] = prefix + name
            else:
                out[key] = rewrite_refs(value, prefix)
        return out
    if isinstance(node, list):
        return [rewrite_refs(v, prefix) for v in node]
    return node


def _refs(node: Any) -> list[tuple[str, str]]:
    if isinstance(node, dict):
        found = []
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                m = _REF.match(value)
                found.append((m.group(1), m.group(2)) if m else ("bad", value))
            else:
                found.extend(_refs(value))
        return found
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def _hoist(schema: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """A contract schema plus its ``$defs`` as separate named schemas (``NameDef``)."""
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", {})
    schema.pop("$schema", None)
    named = {name: schema, **{f"{name}{k[:1].upper()}{k[1:]}": v for k, v in defs.items()}}

    def point(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: (
                    f"#/schemas/{name}{v[8:9].upper()}{v[9:]}"
                    if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/")
                    else point(v)
                )
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [point(v) for v in node]
        return node

    return {k: point(v) for k, v in named.items()}


def external_schemas(spec: Spec) -> dict[str, dict[str, Any]]:
    """The contract's schemas, by component name, their local $defs hoisted beside them."""
    return {
        **_hoist(chat_request_schema(spec), EXTERNAL["chat_request"]),
        **_hoist(responses_request_schema(spec), EXTERNAL["responses_request"]),
        **_hoist(worker_declaration_schema(spec), EXTERNAL["worker_declaration"]),
    }


def _problem(file: str, path: str, problem: str, name: str, known: list[str]) -> SpecError:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"use one of: {', '.join(known)}"
    return SpecError(file, path, problem, hint)


def _merge_declaration(
    body: dict[str, Any], schemas: dict[str, Any], decl: dict[str, Any]
) -> dict[str, Any]:
    """The pop body: upstream's pop fields with the declaration's properties beside them."""
    base = copy.deepcopy(body)
    while "$ref" in base and len(base) == 1:
        base = copy.deepcopy(schemas[base["$ref"].rsplit("/", 1)[1]])
    base.setdefault("properties", {}).update(copy.deepcopy(decl.get("properties", {})))
    required = base.get("required", []) + [
        r for r in decl.get("required", []) if r not in base.get("required", [])
    ]
    if required:
        base["required"] = required
    return base


def _errors_under(spec: Spec, folder: str, surface: str) -> list[str]:
    """Codes of the errors files under spec/<folder> that have a status on ``surface``."""
    codes = []
    for rel, data in sorted(spec.files.items()):
        if rel.startswith(folder) and data["$schema"] == ERRORS_SCHEMA:
            codes += [c for c, e in data["errors"].items() if surface in e]
    return codes


def _route(api_file: str, data: dict[str, Any], op: str, r: dict[str, Any], spec: Spec) -> Route:
    common = data["common_errors"]
    body = r.get("body")
    under = _errors_under(spec, r["errors_under"], data["surface"]) if "errors_under" in r else []
    errors = [*r["errors"], *under, *common["all"], *(common["with_body"] if body else [])]
    schema = None
    if body:
        schema = body["schema"]
        if "worker_declaration" in body.get("merge", []):
            decl = worker_declaration_schema(spec)
            schema = _merge_declaration(schema, data["schemas"], decl)
    return Route(
        operation_id=op,
        method=r["method"],
        path=r["path"] if r.get("at_root") else data["base_path"] + r["path"],
        summary=r["summary"],
        description=r.get("description", ""),
        tags=tuple(r["tags"]),
        headers=tuple(r.get("headers", [])),
        required_headers=tuple(r.get("required_headers", [])),
        path_params=r.get("path_params", {}),
        query_params=r.get("query_params", {}),
        body=schema,
        body_description=(body or {}).get("description", ""),
        invalid_body=r.get("invalid_body", "InvalidPayload"),
        responses=r["responses"],
        errors=tuple(dict.fromkeys(errors)),
    )


def _check(api: Api, raw: dict[str, Any], errors: dict[str, dict[str, Any]]) -> list[SpecError]:
    problems = _check_refs(api, raw)
    for route in api.routes:
        problems += _check_route(api, route, errors)
        problems += _check_links(api, route)
    return problems


def link_parameter_place(target: Route, name: str) -> str | None:
    """Where a link's parameter ``name`` goes in ``target``: path, query, header or None."""
    if name in target.path_params:
        return "path"
    if name in target.query_params:
        return "query"
    if name in target.headers:
        return "header"
    return None


def _check_links(api: Api, route: Route) -> list[SpecError]:
    """Every link of a route's responses names a route of this surface and its parameters."""
    f, problems = api.file, []
    by_id = {r.operation_id: r for r in api.routes}
    for status, resp in route.responses.items():
        for name, link in resp.get("links", {}).items():
            at = f"routes.{route.operation_id}.responses.{status}.links.{name}"
            target = by_id.get(link["operation"])
            if target is None:
                problems.append(
                    _problem(
                        f,
                        at,
                        f"no route {link['operation']!r} on the {api.surface} surface",
                        link["operation"],
                        sorted(by_id),
                    )
                )
                continue
            for param in link.get("parameters", {}):
                if link_parameter_place(target, param) is None:
                    known = [*target.path_params, *target.query_params, *target.headers]
                    problems.append(
                        _problem(
                            f,
                            f"{at}.parameters",
                            f"{target.operation_id} has no parameter {param!r}",
                            param,
                            known or ["(none)"],
                        )
                    )
            if "request_body" in link and target.body is None:
                problems.append(
                    SpecError(
                        f,
                        f"{at}.request_body",
                        f"{target.operation_id} takes no body",
                        "drop request_body",
                    )
                )
    return problems


def _check_refs(api: Api, raw: dict[str, Any]) -> list[SpecError]:
    """Every $ref of the file's schemas and routes names a schema that exists."""
    f, problems = api.file, []
    for where, node in [("schemas", raw["schemas"]), ("routes", raw["routes"])]:
        for kind, name in _refs(node):
            if kind == "bad":
                problems.append(
                    SpecError(f, where, f"unknown reference {name!r}", "use '#/schemas/NAME'")
                )
            elif kind == "schemas" and name not in api.schemas:
                problems.append(
                    _problem(f, where, f"no schema named {name!r}", name, sorted(api.schemas))
                )
            elif kind == "external" and name not in EXTERNAL:
                problems.append(
                    _problem(f, where, f"no contract schema {name!r}", name, sorted(EXTERNAL))
                )
    return problems


def _check_route(api: Api, route: Route, errors: dict[str, dict[str, Any]]) -> list[SpecError]:
    """One route's headers, path parameters and errors agree with the file and the errors."""
    f, problems, status_key = api.file, [], api.surface
    at = f"routes.{route.operation_id}"
    for h in (*route.headers, *route.required_headers):
        if h not in api.headers:
            problems.append(
                _problem(f, f"{at}.headers", f"no header {h!r}", h, sorted(api.headers))
            )
    for h in route.required_headers:
        if h not in route.headers:
            problems.append(
                SpecError(f, f"{at}.required_headers", f"{h!r} is not among headers", "add it")
            )
    in_path = re.findall(r"{([^}]+)}", route.path)
    if sorted(in_path) != sorted(route.path_params):
        problems.append(
            SpecError(
                f,
                f"{at}.path_params",
                f"path parameters {in_path} differ from {sorted(route.path_params)}",
                "describe each {name} of the path in path_params, and only those",
            )
        )
    for code in (*route.errors, route.invalid_body):
        if code in errors and status_key not in errors[code]:
            problems.append(
                SpecError(
                    f,
                    f"{at}.errors",
                    f"error {code!r} has no {status_key} status",
                    f"give errors.{code}.{status_key} a status in its errors file, "
                    "or drop it from this route",
                )
            )
    return problems


def _finish_reason_enums(node: Any, at: str) -> list[tuple[str, Any]]:
    """Every ``finish_reason`` property's enum under ``node``, with where it stands."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        prop = node.get("properties", {}).get("finish_reason")
        if isinstance(prop, dict) and "enum" in prop:
            found.append((f"{at}.properties.finish_reason.enum", prop["enum"]))
        for key, value in node.items():
            found += _finish_reason_enums(value, f"{at}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _finish_reason_enums(value, f"{at}[{i}]")
    return found


def _check_finish_reasons(file: str, raw: dict[str, Any], spec: Spec) -> list[SpecError]:
    """A finish_reason enum spelled in an API file must list spec/chat/reply.yaml's reasons."""
    reasons = list(spec[REPLY_FILE]["finish_reasons"])
    return [
        SpecError(
            file,
            at,
            f"finish_reason enum {enum} differs from spec/{REPLY_FILE}",
            f"use {reasons} (or change finish_reasons in spec/{REPLY_FILE})",
        )
        for at, enum in _finish_reason_enums(raw["schemas"], "schemas")
        if list(enum) != reasons
    ]


def load_apis(spec: Spec) -> dict[str, Api]:
    """Every API file by surface; raises SpecErrors on a broken reference."""
    errors, _ = collect_errors(spec)
    apis: dict[str, Api] = {}
    problems: list[SpecError] = []
    for rel in sorted(r for r, d in spec.files.items() if d["$schema"] == API_SCHEMA):
        data = spec[rel]
        routes = tuple(_route(f"spec/{rel}", data, op, r, spec) for op, r in data["routes"].items())
        api = Api(
            file=f"spec/{rel}",
            surface=data["surface"],
            info=data["info"],
            base_path=data["base_path"],
            headers=data["headers"],
            schemas=data["schemas"],
            routes=routes,
        )
        problems += _check(api, data, errors)
        problems += _check_finish_reasons(api.file, data, spec)
        if api.surface in apis:
            problems.append(
                SpecError(api.file, "surface", f"a second {api.surface} file", "one per surface")
            )
        apis[api.surface] = api
    if problems:
        raise SpecErrors(problems)
    return apis
