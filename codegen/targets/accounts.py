"""spec/accounts.yaml -> generated/accounts.py (shared key allowances, the transfer's reverse
wait, its Redis key) and generated/docs/accounts.md (with the shared key and transfer routes'
bounds from spec/api/native.yaml)."""

from __future__ import annotations

from typing import Any

from codegen.render import Output, render
from codegen.spec import Spec

SOURCE = "accounts.yaml"
NATIVE_API = "api/native.yaml"


def build(spec: Spec) -> list[Output]:
    data: dict[str, Any] = spec[SOURCE]
    schemas = spec[NATIVE_API]["schemas"]
    context = {
        "a": data,
        "key_input": schemas["SharedKeyInput"]["properties"],
        "transfer_input": schemas["KudosTransferInput"]["properties"],
    }
    return [
        render("accounts.py.j2", spec.sources(SOURCE), "accounts.py", **context),
        render(
            "docs_accounts.md.j2", spec.sources(SOURCE, NATIVE_API), "docs/accounts.md", **context
        ),
    ]
