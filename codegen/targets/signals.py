"""spec/signals.yaml -> generated/signals.py: channel names and event kinds of the
completion signals, so the native API (publisher) and the front (subscriber) share them;
the worker wake channel, and the longest wait a pop may ask for (spec/api/native.yaml's
PopInput.wait), so the native API and the workers share it."""

from __future__ import annotations

from codegen.render import Output, render
from codegen.spec import Spec

SOURCE = "signals.yaml"
NATIVE_API = "api/native.yaml"


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
            "outcome": entry.get("outcome"),
        }
        for name, entry in channels.items()
    ]
    wait = spec[NATIVE_API]["schemas"]["PopInput"]["properties"]["wait"]
    return [
        render(
            "signals.py.j2",
            spec.sources(SOURCE, NATIVE_API),
            "signals.py",
            families=families,
            wake=spec[SOURCE]["wake"],
            max_wait=wait["maximum"],
        )
    ]
