"""spec/config.yaml -> generated/config.py and generated/docs/config.md: every HORDE_*
environment variable of every service, in one table (``horde-chat <service> --help`` lists
its service's rows)."""

from __future__ import annotations

from codegen.render import Output, render
from codegen.spec import Spec

SOURCE = "config.yaml"


def build(spec: Spec) -> list[Output]:
    variables = [
        {**entry, "name": name, "services": tuple(entry["services"])}
        for name, entry in spec[SOURCE]["variables"].items()
    ]
    sources = spec.sources(SOURCE)
    return [
        render("config.py.j2", sources, "config.py", variables=variables),
        render("config.md.j2", sources, "docs/config.md", variables=variables),
    ]
