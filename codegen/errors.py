"""The one exception codegen raises for a bad spec: it names file, path and a fix."""

from __future__ import annotations


class SpecError(Exception):
    """A spec file breaks its schema or refers to something that does not exist."""

    def __init__(self, file: str, path: str, problem: str, suggestion: str) -> None:
        self.file = file
        self.path = path
        self.problem = problem
        self.suggestion = suggestion
        super().__init__(
            f"{file}: at {path or '(top level)'}: {problem}\n  suggestion: {suggestion}"
        )


class SpecErrors(Exception):
    """Every problem found in one load, so a maintainer fixes them in one pass."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))
