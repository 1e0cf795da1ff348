"""spec/wire.yaml + spec/api/*.yaml -> generated/wire/: the typed wire between services.

``generated/wire/__init__.py`` holds spec/wire.yaml's constants; ``{native,front}.py`` are
TypedDicts datamodel-code-generator writes from the component schemas each API file declares
(the chat contract's own schemas are the shared validator's). TypedDicts, not pydantic: they
cost nothing at run time, and the type checker holds every key the services read or write
to the spec. Codegen refuses a ``state`` enum that differs from spec/wire.yaml's generation
states, and an anonymous key the native ``apikey`` header would refuse.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from importlib.metadata import version
from typing import Any

from jsonschema import Draft202012Validator

from codegen.api import Api, load_apis
from codegen.errors import SpecError, SpecErrors
from codegen.render import Output, render
from codegen.spec import Spec
from codegen.targets.openapi import document

SOURCE = "wire.yaml"
GENERATOR = "datamodel-code-generator"
CODEGEN_SOURCES = ("codegen/targets/openapi.py", "codegen/targets/wire.py")
_REF = re.compile(r"^#/components/schemas/(.+)$")


def _state_enums(node: Any, at: str) -> list[tuple[str, list[Any]]]:
    """Every ``state`` property's enum under ``node``, with where it stands."""
    found: list[tuple[str, list[Any]]] = []
    if isinstance(node, dict):
        prop = node.get("properties", {}).get("state")
        if isinstance(prop, dict) and "enum" in prop:
            found.append((f"{at}.properties.state.enum", list(prop["enum"])))
        for key, value in node.items():
            found += _state_enums(value, f"{at}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _state_enums(value, f"{at}[{i}]")
    return found


def _check(data: dict[str, Any], apis: dict[str, Api]) -> None:
    states = list(data["generation_states"])
    problems = []
    defaults = [s for s, entry in data["generation_states"].items() if entry.get("default")]
    if len(defaults) != 1:
        problems.append(
            SpecError(
                f"spec/{SOURCE}",
                "generation_states",
                f"{len(defaults)} states are marked default",
                "mark exactly one state with default: true",
            )
        )
    for api in apis.values():
        for at, enum in _state_enums(api.schemas, "schemas"):
            if sorted(map(str, enum)) != sorted(states):
                problems.append(
                    SpecError(
                        api.file,
                        at,
                        f"state enum {enum} differs from spec/{SOURCE} generation_states",
                        f"use {states} (or change generation_states in spec/{SOURCE})",
                    )
                )
    native = apis.get("native")
    key = data["anonymous_api_key"]["value"]
    if native is not None and "apikey" in native.headers:
        for error in Draft202012Validator(native.headers["apikey"]["schema"]).iter_errors(key):
            problems.append(
                SpecError(
                    f"spec/{SOURCE}",
                    "anonymous_api_key.value",
                    f"the native apikey header would refuse it: {error.message}",
                    f"give a key that satisfies headers.apikey of {native.file}",
                )
            )
    if problems:
        raise SpecErrors(problems)


def _const(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).upper()


def _tuple(consts: Iterable[str]) -> str:
    """The inside of a tuple display of STATE_* names (a trailing comma for one)."""
    names = [f"STATE_{c}" for c in consts]
    return ", ".join(names) + ("," if len(names) == 1 else "")


def _constants(spec: Spec) -> Output:
    data = spec[SOURCE]
    states = [
        {
            "name": name,
            "const": _const(name),
            "answers": entry["answers"],
            "description": " ".join(entry["description"].split()),
        }
        for name, entry in data["generation_states"].items()
    ]
    default = next(s for s, e in data["generation_states"].items() if e.get("default"))
    headers = [
        {
            "const": _const(name),
            "name": h["name"],
            "description": " ".join(h["description"].split()),
        }
        for name, h in data["headers"].items()
    ]
    anonymous = {
        "value": data["anonymous_api_key"]["value"],
        "description": " ".join(data["anonymous_api_key"]["description"].split()),
    }
    return render(
        "wire.py.j2",
        spec.sources(SOURCE),
        "wire/__init__.py",
        anonymous=anonymous,
        headers=headers,
        states=states,
        default_state=_const(default),
        all_states=_tuple(s["const"] for s in states),
        answering_states=_tuple(s["const"] for s in states if s["answers"]),
    )


def _referenced(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = set()
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and (m := _REF.match(value)):
                found.add(m.group(1))
            else:
                found |= _referenced(value)
        return found
    if isinstance(node, list):
        return set().union(*(_referenced(v) for v in node)) if node else set()
    return set()


def wire_schemas(api: Api, spec: Spec) -> dict[str, Any]:
    """The OpenAPI document's component schemas the API file declares, with what they use."""
    components = document(api, spec)["components"]["schemas"]
    wanted, todo = set(), list(api.schemas)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += sorted(_referenced(components[name]) - wanted)
    return {name: schema for name, schema in components.items() if name in wanted}


def _models(api: Api, spec: Spec) -> str:
    """The TypedDicts of one surface, from datamodel-code-generator (no clock, no paths)."""
    from datamodel_code_generator import (
        Formatter,
        InputFileType,
        LiteralType,
        PythonVersion,
        generate,
    )
    from datamodel_code_generator.enums import DataModelType

    doc = {
        "openapi": "3.1.0",
        "info": {"title": f"{api.surface} wire", "version": "0"},
        "paths": {},
        "components": {"schemas": wire_schemas(api, spec)},
    }
    header = (
        f'"""The {api.surface} surface\'s bodies as TypedDicts, from the component schemas of\n'
        f"generated/openapi/{api.surface}.yaml that {api.file} declares\n"
        f"({GENERATOR} {version(GENERATOR)}, by codegen/targets/wire.py).\n"
        '"""'
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = generate(
            doc,
            input_file_type=InputFileType.OpenAPI,
            output_model_type=DataModelType.TypingTypedDict,
            target_python_version=PythonVersion.PY_311,
            enum_field_as_literal=LiteralType.All,
            use_standard_collections=True,
            use_union_operator=True,
            use_schema_description=True,
            use_field_description=True,
            disable_timestamp=True,
            formatters=[Formatter.BUILTIN],
            custom_file_header=header,
        )
    if not isinstance(out, str):
        raise RuntimeError(f"{GENERATOR} wrote more than one module for {api.file}")
    return out


def build(spec: Spec) -> list[Output]:
    apis = load_apis(spec)
    _check(spec[SOURCE], apis)
    outputs = [_constants(spec)]
    for surface, api in sorted(apis.items()):
        outputs.append(
            Output(f"wire/{surface}.py", _models(api, spec), (api.file, *CODEGEN_SOURCES))
        )
    return outputs
