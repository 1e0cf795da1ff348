"""generated/__init__.py: marks generated/ as the package runtime imports from."""

from __future__ import annotations

from codegen.render import Output
from codegen.spec import Spec

DOC = '''"""Everything codegen writes from spec/. Hand-written code imports from here.

Do not edit: change spec/ (or codegen/) and run `make generate`.
"""
'''


def build(spec: Spec) -> list[Output]:
    return [Output(path="__init__.py", body=DOC, sources=("codegen/targets/package.py",))]
