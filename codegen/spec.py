"""Load spec/, check every file against its own JSON Schema, and check cross-references.

Each spec file names its schema in a top-level ``$schema`` key, relative to ``spec/``.
Schemas are JSON Schema 2020-12 with three keywords of ours (docs/maintaining-the-spec.md):
``x-defines: NAME`` (a mapping's keys are names of kind NAME), ``x-ref: NAME`` (a string, or
each string of an array, must be a defined NAME) and ``x-default-in: KEY`` (an object's
``default`` must validate against the schema in its ``KEY`` member, so every OpenAI default
is checked against its own parameter).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, ValidationError, validators

from codegen.errors import SpecError, SpecErrors

SPEC_ROOT = Path(__file__).resolve().parent.parent / "spec"


@dataclass
class Spec:
    """Every spec file, by its path relative to spec/ (``chat/parameters.yaml``)."""

    root: Path
    files: dict[str, dict[str, Any]]
    names: dict[str, set[str]] = field(default_factory=dict)

    def __getitem__(self, relpath: str) -> dict[str, Any]:
        return self.files[relpath]

    def sources(self, *relpaths: str) -> list[str]:
        """Repository-relative names of spec files, for generated headers."""
        return [f"spec/{p}" for p in relpaths]


class _UndefinedName(ValidationError):
    """An ``x-ref`` to a name nothing defines; ``hint`` names the closest defined one."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def _json_path(error: ValidationError) -> str:
    parts: list[str] = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts)


def _suggest(error: ValidationError) -> str:
    """A concrete next step for the usual mistakes; otherwise the schema's description."""
    kw, inst = error.validator, error.instance
    schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
    if kw == "additionalProperties" and isinstance(inst, dict):
        allowed = sorted(schema.get("properties", {}))
        extra = [k for k in inst if k not in allowed]
        hints = [
            f"did you mean {m[0]!r} for {k!r}?"
            for k in extra
            if (m := difflib.get_close_matches(k, allowed, n=1))
        ]
        return " ".join(hints) or f"remove the key; allowed keys are {', '.join(allowed)}"
    if kw == "enum":
        close = difflib.get_close_matches(str(inst), [str(v) for v in schema["enum"]], n=1)
        choices = ", ".join(map(str, schema["enum"]))
        return f"use {close[0]!r}" if close else f"use one of: {choices}"
    if kw == "required":
        return "add the missing key (see the schema's description of it)"
    if kw == "x-ref":
        return error.hint if isinstance(error, _UndefinedName) else "define it first"
    if kw == "type":
        return f"give a value of type {schema.get('type')}"
    return schema.get("description") or "see the schema file named in $schema"


def _checker(
    registry: dict[str, set[str]] | None, collected: dict[str, set[str]] | None = None
) -> type[Draft202012Validator]:
    """The validator class; with ``registry`` None it only collects defined names (into
    ``collected``)."""
    collected = {} if collected is None else collected

    def x_defines(_v: Any, kind: str, instance: Any, _s: Any) -> Iterator[ValidationError]:
        if registry is None and isinstance(instance, dict):
            collected.setdefault(kind, set()).update(instance)
        return iter(())

    def x_ref(_v: Any, kind: str, instance: Any, _s: Any) -> Iterator[ValidationError]:
        if registry is None:
            return
        values = instance if isinstance(instance, list) else [instance]
        known = registry.get(kind, set())
        for value in values:
            if isinstance(value, str) and value not in known:
                close = difflib.get_close_matches(value, sorted(known), n=1)
                hint = (
                    f"did you mean {close[0]!r}?" if close else f"define {value!r} among the {kind}"
                )
                yield _UndefinedName(
                    f"{value!r} is not a defined {kind[:-1] if kind.endswith('s') else kind}", hint
                )

    def x_default_in(v: Any, key: str, instance: Any, _s: Any) -> Iterator[ValidationError]:
        if not isinstance(instance, dict) or "default" not in instance or key not in instance:
            return
        inner = Draft202012Validator(instance[key])
        for e in inner.iter_errors(instance["default"]):
            yield ValidationError(
                f"default {instance['default']!r} does not satisfy its own schema: {e.message}"
            )

    # types-jsonschema leaves validators.extend unannotated; it returns a validator class.
    cls: type[Draft202012Validator] = validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator,
        {"x-defines": x_defines, "x-ref": x_ref, "x-default-in": x_default_in},
    )
    return cls


def _read(path: Path, rel: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecErrors(
            [SpecError(rel, "", f"not valid YAML: {exc}", "fix the YAML syntax")]
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("$schema"), str):
        raise SpecErrors(
            [
                SpecError(
                    rel,
                    "$schema",
                    "missing",
                    "start the file with `$schema: schema/<name>.schema.json`",
                )
            ]
        )
    return data


def load_spec(root: Path = SPEC_ROOT) -> Spec:
    """Read every ``*.yaml`` under ``root``; raise SpecErrors listing every problem."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root).as_posix()
        files[rel] = _read(path, rel)
    schemas: dict[str, dict[str, Any]] = {}
    problems: list[SpecError] = []
    for rel, data in files.items():
        schema_path = root / data["$schema"]
        if not schema_path.is_file():
            problems.append(
                SpecError(
                    f"spec/{rel}",
                    "$schema",
                    f"no schema at spec/{data['$schema']}",
                    "name an existing file under spec/schema/",
                )
            )
            continue
        schemas[rel] = json.loads(schema_path.read_text(encoding="utf-8"))
    if problems:
        raise SpecErrors(problems)
    collected: dict[str, set[str]] = {}
    collector = _checker(None, collected)
    for rel, data in files.items():
        for e in collector(schemas[rel]).iter_errors(data):
            problems.append(SpecError(f"spec/{rel}", _json_path(e), e.message, _suggest(e)))
    names = {k: set(v) for k, v in collected.items()}
    if not problems:
        checker = _checker(names)
        for rel, data in files.items():
            for e in checker(schemas[rel]).iter_errors(data):
                problems.append(SpecError(f"spec/{rel}", _json_path(e), e.message, _suggest(e)))
    if problems:
        raise SpecErrors(problems)
    return Spec(root=root, files=files, names=names)
