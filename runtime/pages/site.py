"""A page of a service: its HTML, with the page's settings filled in, and its assets.

``Page(page_op, asset_op, template, settings)``: ``html()`` is ``static/<template>`` with
``{{settings}}`` replaced by ``settings()`` as JSON (in a ``<script type="application/json">``
block, so ``<`` is escaped) and ``{{assets}}`` by the asset route's folder; ``asset(name)`` is
one of the assets the spec's asset route names (its path parameter's enum), or None. Both are
read once per process. ``HEADERS``: what a page answers with, a Content-Security-Policy that
allows this origin only, since the page handles an API key.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import PurePosixPath

from generated.routes import ROUTES
from runtime.observability.reference import ASSET_PARAM, MEDIA_TYPES, Asset

SETTINGS = "{{settings}}"
ASSETS = "{{assets}}"
STATIC = "static"
CACHE_CONTROL = "no-cache"
"""Assets are revalidated (they change with the code; the ETag-less revalidation is cheap)."""
HEADERS = {
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
        "base-uri 'none'; form-action 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def relative(operation_id: str) -> str:
    """The route's path relative to a page at the server's root (``v1/models``), so a page
    works behind a path prefix too."""
    return ROUTES[operation_id].path.lstrip("/")


@dataclass(frozen=True)
class Page:
    page_op: str
    asset_op: str
    template: str
    settings: Callable[[], Mapping[str, object]] = field(compare=False)

    def asset_names(self) -> tuple[str, ...]:
        schema = ROUTES[self.asset_op].path_params[ASSET_PARAM]
        return tuple(str(name) for name in schema["enum"])

    def asset_base(self) -> str:
        """The asset route's folder, relative to the page (``pages``)."""
        return str(PurePosixPath(relative(self.asset_op)).parent)

    def html(self) -> bytes:
        return _html(self)

    def asset(self, name: str) -> Asset | None:
        if name not in self.asset_names():
            return None
        return _asset(name)


def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath(STATIC, name).read_bytes()


@functools.cache
def _html(page: Page) -> bytes:
    settings = json.dumps(page.settings(), separators=(",", ":")).replace("<", "\\u003c")
    template = _read(page.template).decode("utf-8")
    return template.replace(ASSETS, page.asset_base()).replace(SETTINGS, settings).encode()


@functools.cache
def _asset(name: str) -> Asset:
    return Asset(_read(name), MEDIA_TYPES[PurePosixPath(name).suffix])
