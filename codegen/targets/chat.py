"""spec/chat/ + spec/workers/ -> generated/chat/: the tables and the name constants.

Only what the spec decides is generated; the logic that reads it is hand-written in
runtime/contract/. Before rendering, the spec is checked against what that engine
implements (codegen/engine_check.py), so a name it has no code for is refused here.
"""

from __future__ import annotations

import ast
import pprint
from typing import Any

from codegen import chat_tables
from codegen.engine_check import check_engine
from codegen.render import Output, render
from codegen.spec import Spec


def _literal(value: Any) -> str:
    return pprint.pformat(value, width=96, sort_dicts=False)


# The modules this target writes besides the package marker, and what each holds.
TABLE_MODULES = ("tables_request", "tables_messages", "tables_workers")
MODULES = {
    "tables": "every table below, gathered for the engine",
    "tables_request": "parameters, horde keys, sampling defaults, front drops",
    "tables_messages": "roles, content parts, tool and response_format keys",
    "tables_workers": "features, guarantees, limits, the pop declaration",
    "tables_reply": "the structured reply's keys, finish reasons and charge basis",
    "names": "every contract name as a constant",
}


def _public_names(module_text: str) -> list[str]:
    """The upper-case names a rendered table module assigns at top level."""
    names: list[str] = []
    for node in ast.parse(module_text).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names += [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
    return names


def tables_context(spec: Spec) -> dict[str, str]:
    m = chat_tables.messages(spec)
    raw = {
        "parameters": chat_tables.parameters(spec),
        "horde_keys": chat_tables.horde_keys(spec),
        "roles": m["roles"],
        "refused_roles": m["refused_roles"],
        "parts": m["parts"],
        "refused_parts": m["refused_parts"],
        "tool_function_keys": m["tool_function_keys"],
        "tool_choice_function_keys": m["tool_choice_function_keys"],
        "response_format_types": m["response_format_types"],
        "features": tuple(chat_tables.features(spec)),
        "guarantees": tuple(chat_tables.guarantees(spec)),
        "guarantee_scopes": tuple(chat_tables.guarantee_scopes(spec)),
        "guarantee_exceptions": chat_tables.guarantee_exceptions(spec),
        "limits": chat_tables.limits(spec),
        "chars_per_token": chat_tables.chars_per_token(spec),
        "reply_reserve_tokens": chat_tables.reply_reserve_tokens(spec),
        "fit_flag": chat_tables.fit_flag(spec),
        "declaration": chat_tables.declaration(spec),
        "sampling_defaults": chat_tables.sampling_defaults(spec),
        "front_default_drops": chat_tables.front_default_drops(spec),
    }
    return {k: _literal(v) for k, v in raw.items()}


def build(spec: Spec) -> list[Output]:
    check_engine(spec)
    sources = spec.sources(*chat_tables.ALL_FILES)
    tables = tables_context(spec)
    outputs = [
        render(f"chat/{name}.py.j2", sources, f"chat/{name}.py", **tables) for name in TABLE_MODULES
    ]
    gathered = {
        name: _public_names(out.text()) for name, out in zip(TABLE_MODULES, outputs, strict=True)
    }
    outputs.insert(
        0,
        render(
            "chat/tables.py.j2",
            sources,
            "chat/tables.py",
            modules=list(gathered),
            gathered={module: sorted(names) for module, names in sorted(gathered.items())},
            all_names=sorted(name for names in gathered.values() for name in names),
        ),
    )
    names = {
        "parameters": list(chat_tables.parameters(spec)),
        "horde_keys": list(chat_tables.horde_keys(spec)),
        "features": chat_tables.features(spec),
        "guarantees": chat_tables.guarantees(spec),
        "guarantee_scopes": chat_tables.guarantee_scopes(spec),
        "limits": list(chat_tables.limits(spec)),
        "declaration": list(chat_tables.declaration(spec)),
        "roles": list(chat_tables.messages(spec)["roles"]),
        "response_format_types": list(chat_tables.messages(spec)["response_format_types"]),
        "reply_keys": chat_tables.reply_keys(spec),
        "finish_reasons": chat_tables.finish_reasons(spec),
        "enum_values": chat_tables.enum_values(spec),
    }
    names_sources = spec.sources(*chat_tables.ALL_FILES, chat_tables.REPLY_FILE)
    outputs.append(render("chat/names.py.j2", names_sources, "chat/names.py", **names))
    outputs.append(render("chat/__init__.py.j2", sources, "chat/__init__.py", modules=MODULES))
    return outputs
