"""Request bodies as RFC 8259 JSON that both services can keep: ``parse`` and ``Malformed``.

Python's json module reads ``NaN``, turns ``1e400`` into infinity, accepts lone surrogates
and answers deep nesting with RecursionError. ``parse`` is the one reader of a request body
on both services; every malformed body raises ``Malformed`` (its ``kind`` says which), so a
service answers 400, never 500. The checks after the parse are one iterative walk, linear in
the body's size. ``loads``, ``non_finite`` and ``has_nul`` are older pieces kept for callers.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from generated.storage import MAX_JSON_DEPTH

Kind = Literal["syntax", "depth", "surrogate", "nul", "non_finite"]
_SURROGATE = re.compile("[\ud800-\udfff]")
_Path = tuple[Any, str | int] | None
"""A linked path: (parent path, key or index), None at the top level."""


class Malformed(ValueError):
    """A request body that is not JSON a service can keep; ``kind`` says why.

    ``syntax``: invalid JSON, not UTF-8, or a ``NaN`` / ``Infinity`` literal; ``depth``:
    nesting deeper than ``max_depth`` (spec: body.max_depth); ``surrogate``: a lone
    surrogate in a string or key (it cannot be encoded, stored or logged); ``nul``: a NUL
    character (Postgres text cannot store it); ``non_finite``: a number too large for a
    float (``1e400``). ``path`` names where (``messages.[0].content``; ``body`` for the top
    level); ``problem`` is a sentence that quotes nothing from the body."""

    def __init__(self, kind: Kind, problem: str, path: str = "body") -> None:
        self.kind: Kind = kind
        self.problem = problem
        self.path = path
        super().__init__(problem if kind == "syntax" else f"{problem} (at {path})")


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def loads(raw: str | bytes) -> Any:
    """``json.loads`` that raises ValueError on NaN, Infinity and -Infinity (and on a body
    nested too deeply for the json module, instead of RecursionError)."""
    try:
        return json.loads(raw, parse_constant=_constant)
    except RecursionError as exc:
        raise ValueError("arrays and objects are nested too deeply") from exc


def parse(raw: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, lift: bytes = b"") -> Any:
    """The parsed body, or ``Malformed`` naming the first problem (module docstring).

    ``lift`` (bytes body only), e.g. ``b'"data:image'``: strings that begin so and hold no
    escape are taken out of the body before the parse and put back after it, so the json
    module (which holds the GIL for a whole parse) only scans the rest, and a body of large
    inline images does not hold every other thread of the process for the time it takes to
    scan them. The result is the same as without ``lift``; a body where lifting cannot be
    exact (an escaped NUL anywhere, a lifted string used as a key) is parsed whole."""
    if lift and isinstance(raw, bytes):
        spans = _liftable(raw, lift)
        if spans:
            value = _parse_lifted(raw, spans, max_depth)
            if value is not _WHOLE:
                return value
    return _parse_whole(raw, max_depth)


def _parse_whole(raw: str | bytes, max_depth: int) -> Any:
    value = _parse_unchecked(raw, max_depth)
    check(value, max_depth=max_depth)
    return value


_WHOLE = object()
_HOLE = "\x00lifted:"
"""A lifted string's stand-in (then its index): no body that is kept holds a NUL."""


def _liftable(raw: bytes, prefix: bytes) -> list[tuple[int, int]]:
    """(first, last) byte of each string of ``raw`` that begins with ``prefix`` (its opening
    quote), is not inside another string, and holds no backslash; none if ``raw`` holds an
    escaped NUL (which a stand-in could hide)."""
    if b"\\u0000" in raw:
        return []
    spans: list[tuple[int, int]] = []
    start = raw.find(prefix)
    while start >= 0:
        end = raw.find(b'"', start + 1)
        if end < 0:
            break
        slashes = 0
        while start - slashes > 0 and raw[start - slashes - 1] == 0x5C:
            slashes += 1
        if slashes % 2 == 0 and raw.find(b"\\", start, end) < 0:
            spans.append((start, end))
        start = raw.find(prefix, end + 1)
    return spans


def _parse_lifted(raw: bytes, spans: list[tuple[int, int]], max_depth: int) -> Any:
    """The body parsed with each span as a stand-in string, then put back; ``_WHOLE`` when
    the stand-ins cannot be put back exactly."""
    lifted: list[str] = []
    pieces: list[bytes] = []
    at = 0
    for start, end in spans:
        try:
            lifted.append(raw[start + 1 : end].decode("ascii"))
        except UnicodeDecodeError:
            return _WHOLE
        pieces += [raw[at:start], f'"\\u0000lifted:{len(lifted) - 1}"'.encode()]
        at = end + 1
    pieces.append(raw[at:])
    value = _parse_unchecked(b"".join(pieces), max_depth)
    restored = _put_back(value, lifted)
    if restored is _WHOLE:
        return _WHOLE
    check(restored, max_depth=max_depth)
    return restored


def _parse_unchecked(raw: str | bytes, max_depth: int) -> Any:
    try:
        return json.loads(raw, parse_constant=_constant)
    except RecursionError as exc:
        problem = f"arrays and objects are nested deeper than {max_depth} levels"
        raise Malformed("depth", problem) from exc
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise Malformed("syntax", _syntax_problem(exc)) from exc


def _stand_in(item: Any, lifted: list[str]) -> str | None:
    if type(item) is str and item.startswith(_HOLE):
        return lifted[int(item[len(_HOLE) :])]
    return None


def _put_back(value: Any, lifted: list[str]) -> Any:
    """``value`` with every stand-in replaced by its string (in place), or ``_WHOLE``."""
    found = _stand_in(value, lifted)
    if found is not None:
        return found
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            for key, child in item.items():
                if key.startswith(_HOLE):
                    return _WHOLE
                found = _stand_in(child, lifted)
                if found is not None:
                    item[key] = found
                elif type(child) is dict or type(child) is list:
                    stack.append(child)
        elif type(item) is list:
            for i, child in enumerate(item):
                found = _stand_in(child, lifted)
                if found is not None:
                    item[i] = found
                elif type(child) is dict or type(child) is list:
                    stack.append(child)
    return value


def _syntax_problem(exc: ValueError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"the body is not UTF-8 (an invalid byte at position {exc.start})"
    return str(exc)  # json's own message: what was expected, with line, column and position


def check(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ``Malformed`` for the first (in document order) container nested deeper than
    ``max_depth``, string or key holding NUL or a lone surrogate, or non-finite number."""
    if _clean(value, max_depth):
        return
    _locate(value, max_depth)  # raises: paths are built only once a problem is known


def _bad_string(text: str) -> bool:
    return "\x00" in text or (not text.isascii() and _SURROGATE.search(text) is not None)


def _bad_scalar(item: Any) -> bool:
    kind = type(item)
    if kind is str:
        return _bad_string(item)
    return kind is float and not math.isfinite(item)


def _clean(value: Any, max_depth: int) -> bool:
    """Whether nothing in ``value`` is malformed: one walk that keeps no paths (an empty
    container is checked where it stands, never pushed)."""
    if type(value) is not dict and type(value) is not list:
        return not _bad_scalar(value)
    if max_depth < 1:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is dict:
            if any(_bad_string(key) for key in item):
                return False
            item = item.values()
        if not _children_clean(item, depth, max_depth, stack):
            return False
    return True


def _children_clean(
    children: Any, depth: int, max_depth: int, stack: list[tuple[Any, int]]
) -> bool:
    """Whether the children of a container at ``depth`` are clean so far; their own
    non-empty containers go on ``stack``."""
    for child in children:
        kind = type(child)
        if kind is dict or kind is list:
            if depth >= max_depth:
                return False
            if child:
                stack.append((child, depth + 1))
        elif kind is str:
            if _bad_string(child):
                return False
        elif kind is float and not math.isfinite(child):
            return False
    return True


def _locate(value: Any, max_depth: int) -> None:
    """Raise the first problem in document order, with its path."""
    stack: list[tuple[Any, int, _Path]] = [(value, 1, None)]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            _string(item, where)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise Malformed("non_finite", "a number must be finite", _format(where))
        elif isinstance(item, dict | list):
            if depth > max_depth:
                problem = f"arrays and objects are nested deeper than {max_depth} levels"
                raise Malformed("depth", problem, _format(where))
            if isinstance(item, dict):
                children: list[tuple[Any, int, _Path]] = []
                for key, child in item.items():
                    _string(key, (where, key))
                    children.append((child, depth + 1, (where, key)))
                stack.extend(reversed(children))
            else:
                stack.extend((item[i], depth + 1, (where, i)) for i in range(len(item) - 1, -1, -1))


def _string(text: str, where: _Path) -> None:
    if "\x00" in text:
        raise Malformed("nul", "a string holds a NUL character (\\u0000)", _format(where))
    if not text.isascii() and _SURROGATE.search(text):
        problem = "a string holds a lone UTF-16 surrogate, which is not Unicode text"
        raise Malformed("surrogate", problem, _format(where))


def _format(where: _Path) -> str:
    steps: list[str] = []
    while where is not None:
        where, step = where
        if isinstance(step, int):
            steps.append(f"[{step}]")
        elif step.isascii() and step.isprintable():
            steps.append(step)
        else:  # a key holding the problem (a NUL, a lone surrogate) is named escaped
            steps.append(json.dumps(step)[1:-1])
    return ".".join(reversed(steps)) or "body"


def non_finite(value: Any, path: str = "") -> str | None:
    """The path (``params.temperature``, ``messages.[0]``) of the first number that is not
    finite in a parsed body, or None."""
    stack: list[tuple[Any, _Path]] = [(value, None)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            found = _format(where)
            return (f"{path}.{found}" if where is not None else path) if path else found
        if isinstance(item, dict):
            stack.extend(reversed([(v, (where, k)) for k, v in item.items()]))
        elif isinstance(item, list):
            stack.extend((item[i], (where, i)) for i in range(len(item) - 1, -1, -1))
    return None


def has_nul(value: Any) -> bool:
    """Whether a NUL character stands in any string or key of a parsed body."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
