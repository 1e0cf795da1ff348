"""spec/responses/ -> generated/responses/ (tables, name constants) and docs/responses.md.

Only what the spec decides is generated; the translation that reads it is hand-written in
runtime/front/responses_api/. The rules it names are checked against the engine with the chat
contract's (codegen/engine_check.py), the rest here (codegen/responses_tables.check).
"""

from __future__ import annotations

import pprint
from typing import Any

from codegen import responses_tables as T
from codegen.render import Output, render
from codegen.spec import Spec
from codegen.targets.docs_chat import schema_words, value_words

MODULES = {
    "tables": (
        "the parameters and what each becomes, the input items, content parts, tools, "
        "tool_choice and text formats, the Response object's ids and statuses"
    ),
    "names": "every name of it as a constant",
}


def _literal(value: Any) -> str:
    return pprint.pformat(value, width=96, sort_dicts=False)


def build(spec: Spec) -> list[Output]:
    T.check(spec)
    sources = spec.sources(*T.ALL_FILES)
    inputs = T.input_tables(spec)
    replies = T.reply_tables(spec)
    tables = {
        "parameters": T.parameters(spec),
        "echo": T.echo(spec),
        "chat_names": T.chat_names(spec),
        **inputs,
        **replies,
    }
    names = {
        "parameters": list(spec[T.PARAMETERS_FILE]["parameters"]),
        "items": [*inputs["items"], *inputs["refused_items"]],
        "parts": [*inputs["parts"], *inputs["refused_parts"]],
        "tools": list(spec[T.INPUT_FILE]["tools"]),
        "id_kinds": list(replies["id_prefixes"]),
    }
    return [
        render("responses/__init__.py.j2", sources, "responses/__init__.py", modules=MODULES),
        render(
            "responses/tables.py.j2",
            sources,
            "responses/tables.py",
            **{k: _literal(v) for k, v in tables.items()},
        ),
        render("responses/names.py.j2", sources, "responses/names.py", **names),
        docs(spec),
    ]


def _becomes(p: dict[str, Any]) -> str:
    if "chat" in p:
        return f"chat `{p['chat']}`"
    if "translation" in p:
        return f"rule `{p['translation']}`"
    if "keys" in p:
        return "its keys (below it)"
    return ""


def _rows(params: dict[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, p in params.items():
        rows.append(
            {
                "name": f"{prefix}{name}",
                "origin": p.get("origin", "openai"),
                "treatment": p["treatment"],
                "schema": schema_words(p["schema"]),
                "default": value_words(p["default"]) if "default" in p else "",
                "noop": ", ".join(value_words(v) for v in p.get("noop_values", [])),
                "becomes": _becomes(p),
                "echo": value_words(p["echo"]) if "echo" in p else "",
                "description": " ".join(p["description"].split()),
                "reason": " ".join(p.get("reason", "").split()),
            }
        )
        rows += _rows(p.get("keys", {}), f"{prefix}{name}.")
    return rows


def docs(spec: Spec) -> Output:
    return render(
        "docs_responses.md.j2",
        spec.sources(*T.ALL_FILES),
        "docs/responses.md",
        rows=_rows(spec[T.PARAMETERS_FILE]["parameters"]),
        input=spec[T.INPUT_FILE],
        reply=spec[T.REPLY_FILE],
    )
