"""The browsable reference both services serve: ``/openapi.json`` and ``/docs``.

``/openapi.json`` is the generated OpenAPI document as JSON, converted once per process.
``/docs`` is Swagger UI 5 (it renders OpenAPI 3.1; ``swagger-ui-bundle`` ships 4, which
refuses it) from ``swagger-ui-py``'s static files, which are read, never imported (its
``__init__`` loads every web framework it knows). The page loads only from its own origin:
no CDN, and ``validatorUrl: null`` so the document is never sent to the public validator.
"""

from __future__ import annotations

import functools
import html
import importlib.util
import json
import mimetypes
from dataclasses import dataclass
from pathlib import Path

import yaml

import generated
from generated.routes import ROUTES

ASSET_PACKAGE = "swagger_ui"
ASSET_FOLDER = "static"
ASSET_PARAM = "asset"
CACHE_CONTROL = "public, max-age=3600"
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str


@dataclass(frozen=True)
class Reference:
    """One service's reference: its operation ids and where its page finds the rest."""

    surface: str

    @property
    def openapi_op(self) -> str:
        return f"{self.surface}_openapi"

    @property
    def docs_op(self) -> str:
        return f"{self.surface}_docs"

    @property
    def asset_op(self) -> str:
        return f"{self.surface}_docs_asset"

    def asset_names(self) -> tuple[str, ...]:
        """The assets the spec's asset route names (its path parameter's enum)."""
        schema = ROUTES[self.asset_op].path_params[ASSET_PARAM]
        return tuple(str(name) for name in schema["enum"])

    def openapi_json(self) -> bytes:
        return _openapi_json(self.surface)

    def page(self) -> bytes:
        return _page(self.surface)

    def asset(self, name: str) -> Asset | None:
        """The asset ``name``, or None when the spec names no such asset."""
        if name not in self.asset_names():
            return None
        return _asset(name)


def asset_folder() -> Path:
    """swagger-ui-py's static folder, found without importing the package."""
    found = importlib.util.find_spec(ASSET_PACKAGE)
    if found is None or not found.submodule_search_locations:
        raise RuntimeError(f"the {ASSET_PACKAGE} package (swagger-ui-py) is not installed")
    return Path(next(iter(found.submodule_search_locations))) / ASSET_FOLDER


@functools.cache
def _openapi_json(surface: str) -> bytes:
    source = Path(generated.__file__).with_name("openapi") / f"{surface}.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    document = yaml.load(source.read_text(encoding="utf-8"), Loader=loader)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@functools.cache
def _asset(name: str) -> Asset:
    path = asset_folder() / name
    suffix = path.suffix
    content_type = MEDIA_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "text/plain"
    return Asset(path.read_bytes(), content_type)


@functools.cache
def _page(surface: str) -> bytes:
    """The Swagger UI page: paths relative to /docs, so it works behind a path prefix."""
    reference = Reference(surface)
    docs = ROUTES[reference.docs_op].path  # /docs
    openapi = ROUTES[reference.openapi_op].path  # /openapi.json
    base = docs.rsplit("/", 1)[-1]  # "docs": relative to /docs, "docs/x" is /docs/x
    names = reference.asset_names()
    script = next(n for n in names if n.endswith(".js"))
    styles = [n for n in names if n.endswith(".css")]
    icons = [n for n in names if n.endswith(".png")]
    title = html.escape(json.loads(_openapi_json(surface))["info"]["title"])
    options = {
        "url": openapi.lstrip("/"),
        "dom_id": "#swagger-ui",
        "deepLinking": True,
        "validatorUrl": None,
        "layout": "BaseLayout",
    }
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{title}</title>",
        *(f'<link rel="stylesheet" href="{base}/{html.escape(s)}">' for s in styles),
        *(f'<link rel="icon" type="image/png" href="{base}/{html.escape(i)}">' for i in icons),
        "</head>",
        "<body>",
        '<div id="swagger-ui"></div>',
        f'<script src="{base}/{html.escape(script)}"></script>',
        "<script>",
        "window.onload = function () {",
        "  const options = " + json.dumps(options) + ";",
        "  options.presets = [SwaggerUIBundle.presets.apis];",
        "  window.ui = SwaggerUIBundle(options);",
        "};",
        "</script>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(lines).encode("utf-8")
