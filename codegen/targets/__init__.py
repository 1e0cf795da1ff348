"""Every module in this package is a target: ``build(spec) -> list[Output]``.

Targets are discovered, not listed, so adding one is adding a module.
"""

from __future__ import annotations

import importlib
import pkgutil

from codegen.render import Output
from codegen.spec import Spec


def build_all(spec: Spec) -> list[Output]:
    outputs: list[Output] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        outputs.extend(module.build(spec))
    paths = [o.path for o in outputs]
    duplicates = sorted({p for p in paths if paths.count(p) > 1})
    if duplicates:
        raise RuntimeError(f"two targets write the same file: {duplicates}")
    return sorted(outputs, key=lambda o: o.path)
