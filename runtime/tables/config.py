"""The rows of generated.config (one HORDE_* variable each) and the one reader of them.

A service's settings are a frozen dataclass whose fields are bound to variables with
``setting``; ``read_settings`` builds it from the environment: a variable set (not empty)
is parsed by its kind, and an unset one leaves the field its default, which is the
variable's own (``derived_setting``: a value the service derives from the spec instead).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
SettingsT = TypeVar("SettingsT", bound="DataclassInstance")

VARIABLE = "horde_variable"
"""The key of a bound field's metadata that holds its ``Variable``."""


class Kind(Generic[T_co]):
    """How a variable's text becomes its value; a text that is not one raises ValueError
    naming the variable."""

    def parse(self, name: str, raw: str, default: object) -> T_co:
        raise NotImplementedError


class Text(Kind[str]):
    """The text as given."""

    def parse(self, name: str, raw: str, default: object) -> str:
        return raw


class Url(Kind[str]):
    """An http(s) URL with a host, without its trailing slashes."""

    def parse(self, name: str, raw: str, default: object) -> str:
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{name} must be an http:// or https:// URL with a host, got {raw!r}")
        return raw.rstrip("/")


class FilePath(Kind[Path]):
    """A filesystem path."""

    def parse(self, name: str, raw: str, default: object) -> Path:
        return Path(raw)


@dataclass(frozen=True)
class Integer(Kind[int]):
    """A whole number; a smaller one than ``at_least`` counts as ``at_least``."""

    at_least: int | None = None

    def parse(self, name: str, raw: str, default: object) -> int:
        try:
            value = int(raw)
        except ValueError as exc:
            raise ValueError(f"{name} must be an integer, got {raw!r}") from exc
        return value if self.at_least is None else max(self.at_least, value)


def _finite(name: str, raw: str, above: float | None) -> float:
    """``raw`` as a finite number, above ``above`` when that is given."""
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number, got {raw!r}") from exc
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {raw!r}")
    if above is not None and value <= above:
        raise ValueError(f"{name} must be greater than {above}, got {raw!r}")
    return value


@dataclass(frozen=True)
class Number(Kind[float]):
    """A finite number, greater than ``above`` when that is given."""

    above: float | None = None

    def parse(self, name: str, raw: str, default: object) -> float:
        return _finite(name, raw, self.above)


@dataclass(frozen=True)
class WholeNumber(Kind[int]):
    """A finite number, of which the whole part is kept (``64.5`` counts as 64); that part
    greater than ``above`` when that is given."""

    above: float | None = None

    def parse(self, name: str, raw: str, default: object) -> int:
        value = int(_finite(name, raw, None))
        if self.above is not None and value <= self.above:
            raise ValueError(f"{name} must be greater than {self.above}, got {raw!r}")
        return value


class Switch(Kind[bool]):
    """``on`` or ``off`` (any case); any other text leaves the default."""

    ON = "on"
    OFF = "off"

    def parse(self, name: str, raw: str, default: object) -> bool:
        word = raw.lower()
        return word == self.ON if word in (self.ON, self.OFF) else bool(default)


@dataclass(frozen=True)
class Choice(Kind[str]):
    """One of ``choices``, in any case (read in lower case)."""

    choices: tuple[str, ...]

    def parse(self, name: str, raw: str, default: object) -> str:
        value = raw.lower()
        if value not in self.choices:
            raise ValueError(f"{name} must be one of {', '.join(self.choices)}, got {value!r}")
        return value


class Lines(Kind[tuple[str, ...]]):
    """One item a line; empty lines are skipped."""

    def parse(self, name: str, raw: str, default: object) -> tuple[str, ...]:
        return tuple(line for line in raw.splitlines() if line)


class Items(Kind[tuple[str, ...]]):
    """Comma-separated items, each stripped of spaces; empty ones are skipped."""

    def parse(self, name: str, raw: str, default: object) -> tuple[str, ...]:
        return tuple(item.strip() for item in raw.split(",") if item.strip())


class Urls(Kind[tuple[str, ...]]):
    """Comma-separated URLs, as ``Items``, each an http(s) URL as ``Url`` reads it."""

    def parse(self, name: str, raw: str, default: object) -> tuple[str, ...]:
        return tuple(Url().parse(name, url, default) for url in Items().parse(name, raw, default))


@dataclass(frozen=True)
class Variable(Generic[T]):
    """One environment variable: how it is read, its value when unset, the ``horde-chat``
    commands that read it, and what the operator's table says of it (``shown_default``:
    the default as the operator would write it, or what unset means). An ``internal``
    variable is a knob of the tests and load rigs, kept out of that table."""

    name: str
    kind: Kind[T]
    default: T
    services: tuple[str, ...]
    meaning: str
    shown_default: str
    internal: bool = False

    def read(self, env: Mapping[str, str] | None = None) -> T:
        """The value in ``env`` (the process's environment by default)."""
        raw = (os.environ if env is None else env).get(self.name)
        return self.kind.parse(self.name, raw, self.default) if raw else self.default


def setting(variable: Variable[T]) -> T:
    """A settings field bound to ``variable``, with the variable's default."""
    bound: T = field(default=variable.default, metadata={VARIABLE: variable})
    return bound


def derived_setting(variable: Variable[T | None], default: T) -> T:
    """A settings field bound to ``variable``, which the spec leaves unset; ``default`` is
    what the service derives for it (named in the variable's ``shown_default``)."""
    bound: T = field(default=default, metadata={VARIABLE: variable})
    return bound


def bound_variables(settings: type[DataclassInstance]) -> dict[str, Variable[Any]]:
    """The variable each bound field of a settings dataclass reads, by field name."""
    return {
        f.name: f.metadata[VARIABLE] for f in dataclasses.fields(settings) if VARIABLE in f.metadata
    }


def read_settings(
    settings: type[SettingsT], env: Mapping[str, str] | None = None, /, **values: Any
) -> SettingsT:
    """``settings`` built from ``env`` (the process's environment by default): a bound
    field takes its variable's value when the variable is set; ``values`` stand for the
    unset variables and fill the fields no variable binds; the rest keep their default."""
    env = os.environ if env is None else env
    for name, variable in bound_variables(settings).items():
        if env.get(variable.name):
            values[name] = variable.read(env)
    return settings(**values)


def help_text(variables: Iterable[Variable[Any]], service: str | None = None) -> str:
    """The operator's variables of ``service`` (None: every service's), for its --help."""
    rows = [v for v in variables if not v.internal and (service is None or service in v.services)]
    width = max(len(v.name) for v in rows)
    lines = [f"  {v.name:<{width}}  {v.meaning} (default {v.shown_default})" for v in rows]
    return "environment (every service's: generated/docs/config.md):\n" + "\n".join(lines)
