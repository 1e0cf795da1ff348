"""spec/upstream_compat.yaml + spec/api/native.yaml -> generated/docs/compatibility.md: every
upstream AI Horde /api/v2 route and every field of its text-flow models, ours beside it.

Codegen refuses a served route whose operation has another method or path than upstream's
(parameter names aside), a field called same or different that our schema lacks, and a field
named twice. Our fields upstream lacks are listed by themselves (with the note ``ours_only``
gives, if any), so a field added to our schema appears in the table without an edit here.
"""

from __future__ import annotations

import re
from typing import Any

from codegen.api import Api, Route, load_apis
from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec
from codegen.targets.openapi import native_error_schema

SOURCE = "upstream_compat.yaml"
ERROR_SCHEMA = "NativeError"
"""Our name, in the table, for the native error body the OpenAPI target builds."""
_PARAM = re.compile(r"{\w+}")


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _properties(schema: dict[str, Any], schemas: dict[str, Any]) -> list[str]:
    """A schema's property names in order, through $ref and allOf."""
    if "$ref" in schema:
        return _properties(schemas[schema["$ref"].rsplit("/", 1)[-1]], schemas)
    names = [n for part in schema.get("allOf", []) for n in _properties(part, schemas)]
    return list(dict.fromkeys([*names, *schema.get("properties", {})]))


def _route_rows(data: dict[str, Any], api: Api, problems: list[SpecError]) -> list[dict[str, str]]:
    ours: dict[str, Route] = {r.operation_id: r for r in api.routes}
    rows = []
    for i, entry in enumerate(data["routes"]):
        at = f"routes[{i}]"
        served = ours.get(entry.get("ours", ""))
        if served is not None:
            mine = served.path.removeprefix(api.base_path)
            if served.method != entry["method"] or _PARAM.sub("{}", mine) != _PARAM.sub(
                "{}", entry["path"]
            ):
                problems.append(
                    SpecError(
                        f"spec/{SOURCE}",
                        at,
                        f"{entry['ours']} is {served.method.upper()} {mine}",
                        "name the operation that serves upstream's method and path",
                    )
                )
        rows.append(
            {
                "method": entry["method"].upper(),
                "path": entry["path"],
                "ours": f"`{entry['ours']}`" if served is not None else "",
                "verdict": (
                    "not served"
                    if "not_served" in entry
                    else ("differs" if "differs" in entry else "same")
                ),
                "note": _one_line(entry.get("differs") or entry.get("not_served") or ""),
            }
        )
    return rows


def _model(
    model: dict[str, Any], schemas: dict[str, Any], at: str, problems: list[SpecError]
) -> dict[str, Any]:
    ours = _properties(schemas[model["ours"]], schemas) if model["ours"] in schemas else None
    if ours is None:
        problems.append(
            SpecError(f"spec/{SOURCE}", f"{at}.ours", f"no schema {model['ours']}", "name one")
        )
        return {}
    same, differs, missing = (
        model.get("same", []),
        model.get("differs", {}),
        model.get("not_served", {}),
    )
    named = [*same, *[n for n in differs if n not in same], *missing]
    for name in {*same, *differs} - set(ours):
        problems.append(
            SpecError(f"spec/{SOURCE}", at, f"{model['ours']} has no {name}", "fix the name")
        )
    for name in {n for n in named if named.count(n) > 1} | (set(missing) & set(differs)):
        problems.append(SpecError(f"spec/{SOURCE}", at, f"{name} is named twice", "name it once"))
    rows = [
        {
            "field": f"`{name}`",
            "ours": f"`{name}`",
            "verdict": "differs" if name in differs else "same",
            "note": _one_line(differs.get(name, "")),
        }
        for name in named
        if name not in missing
    ]
    rows += [
        {"field": f"`{n}`", "ours": "", "verdict": "not served", "note": _one_line(why)}
        for n, why in missing.items()
    ]
    extra = model.get("ours_only", {})
    rows += [
        {"field": "", "ours": f"`{n}`", "verdict": "ours only", "note": _one_line(extra.get(n, ""))}
        for n in ours
        if n not in named
    ]
    return {"upstream": model["upstream"], "ours": model["ours"], "rows": rows}


def build(spec: Spec) -> list[Output]:
    data = spec[SOURCE]
    api = load_apis(spec)["native"]
    schemas = {**api.schemas, ERROR_SCHEMA: native_error_schema()}
    problems: list[SpecError] = []
    routes = _route_rows(data, api, problems)
    models = [_model(m, schemas, f"models[{i}]", problems) for i, m in enumerate(data["models"])]
    if problems:
        raise SpecErrors(problems)
    out = render(
        "compatibility.md.j2",
        spec.sources(SOURCE, api.file.removeprefix("spec/")),
        "docs/compatibility.md",
        upstream=_one_line(data["upstream"]),
        routes=routes,
        models=models,
    )
    return [out]
