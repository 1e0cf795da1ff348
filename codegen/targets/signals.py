"""spec/signals.yaml -> generated/signals.py: channel names and event kinds of the
completion signals, so the native API (publisher) and the front (subscriber) share them."""

from __future__ import annotations

from codegen.render import Output, render
from codegen.spec import Spec

SOURCE = "signals.yaml"


def build(spec: Spec) -> list[Output]:
    channels = spec[SOURCE]["channels"]
    families = [
        {
            "name": name,
            "upper": name.upper(),
            "pattern": entry["pattern"],
            "prefix": entry["pattern"].removesuffix("{id}"),
            "description": entry["description"],
            "fields": entry["fields"],
            "events": entry["events"],
        }
        for name, entry in channels.items()
    ]
    return [render("signals.py.j2", spec.sources(SOURCE), "signals.py", families=families)]
