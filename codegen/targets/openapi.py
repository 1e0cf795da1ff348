"""spec/api/{native,front}.yaml + the errors -> generated/openapi/{native,front}.yaml (3.1).

Every error status a route can return gets a response with that surface's envelope:
upstream's ``{message, rc}`` on the native API, OpenAI's ``{"error": {...}}`` on the front,
``rc`` / ``code`` limited to the codes the route returns at that status. Errors the front
only sends after the stream's headers (``when: [stream]``) are described on the event
stream, not as statuses. Key order follows the spec; nothing reads a clock.
"""

from __future__ import annotations

from typing import Any

import yaml

from codegen.api import (
    Api,
    Route,
    external_schemas,
    link_parameter_place,
    load_apis,
    rewrite_refs,
)
from codegen.render import Output
from codegen.spec import Spec
from codegen.targets.errors import collect as collect_errors
from runtime.contract.errors import RETRY_AFTER, RETRY_AFTER_MS

COMPONENTS = "#/components/schemas/"
CODEGEN_SOURCES = (
    "codegen/api.py",
    "codegen/chat_schema.py",
    "codegen/targets/openapi.py",
    "runtime/contract/errors.py",  # the retry headers' names
)


def _param(name: str, where: str, p: dict[str, Any], required: bool) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required,
        "description": p["description"],
        "schema": rewrite_refs(p["schema"], COMPONENTS),
    }


def native_error_schema(codes: list[str] | None = None) -> dict[str, Any]:
    """The native API's error body (upstream's ``{message, rc}``, our ``param`` and
    upstream's validation ``errors``); ``rc`` limited to ``codes`` when given."""
    return {
        "type": "object",
        "required": ["message", "rc"],
        "properties": {
            "message": {"type": "string"},
            "rc": {"enum": codes} if codes is not None else {"type": "string"},
            "param": {
                "type": "string",
                "description": "The request field the refusal names (absent when none).",
            },
            "errors": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": (
                    "A validation refusal's field and problem, as upstream's"
                    " flask-restx validation errors carry them (InvalidPayload)."
                ),
            },
        },
    }


def _error_schema(
    surface: str, codes: list[str], errors: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    if surface == "native":
        return native_error_schema(codes)
    types = sorted({errors[c]["front"]["type"] for c in codes})
    return {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"enum": types},
                    "param": {"type": ["string", "null"]},
                    "code": {"enum": codes},
                    "metadata": {"type": ["object", "null"]},
                },
            }
        },
    }


def _front_headers(codes: list[str], errors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    headers: dict[str, Any] = {
        "x-should-retry": {
            "description": "false once the horde may hold the request (or the error says so).",
            "schema": {"enum": ["false"]},
        }
    }
    if any(errors[c].get("retry_after") for c in codes):
        headers[RETRY_AFTER] = {
            "description": "Seconds to wait before trying again, rounded up.",
            "schema": {"type": "string", "pattern": "^[0-9]+$"},
        }
        headers[RETRY_AFTER_MS] = {
            "description": (
                "The same wait in milliseconds (OpenAI's SDKs read it first): for a rate "
                "limit, until its window ends."
            ),
            "schema": {"type": "string", "pattern": "^[0-9]+$"},
        }
    return headers


def _error_responses(api: Api, route: Route, errors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    by_status: dict[int, list[str]] = {}
    for code in route.errors:
        side = errors[code][api.surface]
        if api.surface == "front" and side["when"] == ["stream"]:
            continue
        by_status.setdefault(side["status"], []).append(code)
    out: dict[str, Any] = {}
    for status in sorted(by_status):
        codes = by_status[status]
        lines = "; ".join(f"{c}: {errors[c]['description'].strip()}" for c in codes)
        resp: dict[str, Any] = {
            "description": lines,
            "content": {"application/json": {"schema": _error_schema(api.surface, codes, errors)}},
        }
        if api.surface == "front":
            resp["headers"] = _front_headers(codes, errors)
        out[str(status)] = resp
    return out


def _link(link: dict[str, Any], routes: dict[str, Route]) -> dict[str, Any]:
    """An OpenAPI link; each parameter qualified by where the target takes it (path.id)."""
    target = routes[link["operation"]]
    out: dict[str, Any] = {"operationId": target.operation_id, "description": link["description"]}
    if "parameters" in link:
        out["parameters"] = {
            f"{link_parameter_place(target, name)}.{name}": expression
            for name, expression in link["parameters"].items()
        }
    if "request_body" in link:
        out["requestBody"] = dict(link["request_body"])
    return out


def _success(resp: dict[str, Any], routes: dict[str, Route]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    if "schema" in resp:
        content["application/json"] = {"schema": rewrite_refs(resp["schema"], COMPONENTS)}
    if "event_stream" in resp:
        content["text/event-stream"] = {
            "schema": {"type": "string", "description": resp["event_stream"].strip()}
        }
    if "text" in resp:
        content["text/plain"] = {"schema": {"type": "string", "description": resp["text"].strip()}}
    for media_type, about in resp.get("media", {}).items():
        content[media_type] = {"schema": {"type": "string", "description": about.strip()}}
    out: dict[str, Any] = {"description": resp["description"]}
    if content:
        out["content"] = content
    if "links" in resp:
        out["links"] = {name: _link(link, routes) for name, link in resp["links"].items()}
    return out


def operation(api: Api, route: Route, errors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    params = [_param(n, "path", p, True) for n, p in route.path_params.items()]
    params += [
        _param(n, "query", p, p.get("required", False)) for n, p in route.query_params.items()
    ]
    params += [
        _param(h, "header", api.headers[h], h in route.required_headers) for h in route.headers
    ]
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": list(route.tags),
    }
    if route.description:
        op["description"] = route.description
    if params:
        op["parameters"] = params
    if route.body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": rewrite_refs(route.body, COMPONENTS)}},
        }
        if route.body_description:
            op["requestBody"]["description"] = route.body_description
    routes = {r.operation_id: r for r in api.routes}
    responses = {s: _success(r, routes) for s, r in route.responses.items()}
    responses.update(_error_responses(api, route, errors))
    op["responses"] = dict(sorted(responses.items()))
    return op


def document(api: Api, spec: Spec) -> dict[str, Any]:
    errors, _ = collect_errors(spec)
    paths: dict[str, dict[str, Any]] = {}
    for route in api.routes:
        paths.setdefault(route.path, {})[route.method] = operation(api, route, errors)
    schemas = {**api.schemas, **external_schemas(spec)}
    return {
        "openapi": "3.1.0",
        "info": dict(api.info),
        "paths": paths,
        "components": {"schemas": rewrite_refs(schemas, COMPONENTS)},
    }


def dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


def build(spec: Spec) -> list[Output]:
    apis = load_apis(spec)
    _, error_files = collect_errors(spec)
    outputs = []
    for surface, api in sorted(apis.items()):
        sources = (api.file, *spec.sources(*error_files), *CODEGEN_SOURCES)
        outputs.append(Output(f"openapi/{surface}.yaml", dump(document(api, spec)), sources))
    return outputs
