"""The docs site's mkdocs hooks (mkdocs.yml): what the site holds beside docs/*.md.

generated/docs/*.md become reference/*.md and generated/openapi/*.yaml openapi/*.yaml, as
they sit side by side in the repository; each OpenAPI document also gets a Swagger UI page
with the document inlined, since a page opened from the disk may not fetch one. Swagger UI's
files come from the swagger-ui-py package the services serve them from, and the iframe-worker
shim lets search run from the disk. Links right on GitHub are moved to the site's layout:
a guide's ../generated/docs/X.md becomes reference/X.md, a generated page's ../../docs/X.md
becomes ../X.md. The Reference section of the navigation lists every generated page, so
a new one is never left out, titled by its heading.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from runtime.observability.reference import Reference, asset_folder
from tools.docs_site.vendor import FILES, iframe_worker

ROOT = Path(__file__).resolve().parents[2]
GENERATED_DOCS = ROOT / "generated" / "docs"
OPENAPI = ROOT / "generated" / "openapi"
CHANGELOG = ROOT / "CHANGELOG.md"
REFERENCE = "reference"
OPENAPI_DIR = "openapi"
SWAGGER_DIR = "assets/swagger-ui"
VENDOR = "assets/vendor/iframe-worker"
SHIM = f"{VENDOR}/shim.js"
SURFACES = {"native": "Native API", "front": "Chat front"}
"""The two OpenAPI documents (generated/openapi/NAME.yaml) and their pages' titles."""
_GUIDE_LINK = re.compile(r"\]\(\.\./generated/(docs|openapi)/")
_GUIDE_TARGET = {"docs": f"{REFERENCE}/", "openapi": f"{OPENAPI_DIR}/"}
_REFERENCE_LINK = re.compile(r"\]\(\.\./\.\./docs/")
_DO_NOT_EDIT = re.compile(r"\A<!--.*?-->\n")
"""The line codegen puts first; left there, mkdocs would not take the page's title."""


def reference_pages() -> list[str]:
    """The site paths of the generated reference pages, in name order."""
    return [f"{REFERENCE}/{p.name}" for p in sorted(GENERATED_DOCS.glob("*.md"))]


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    # Material's offline plugin adds the shim from a CDN unless a polyfill names iframe-worker
    config.extra["polyfills"] = [SHIM]
    reference = [
        *reference_pages(),
        *({f"{SURFACES[s]} (OpenAPI)": f"{OPENAPI_DIR}/{s}.md"} for s in SURFACES),
    ]
    config.nav = [*(config.nav or []), {"Reference": reference}, {"Changelog": "changelog.md"}]
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path in sorted(GENERATED_DOCS.glob("*.md")):
        files.append(File.generated(config, f"{REFERENCE}/{path.name}", abs_src_path=str(path)))
    files.append(File.generated(config, "changelog.md", abs_src_path=str(CHANGELOG)))
    for surface, title in SURFACES.items():
        document = OPENAPI / f"{surface}.yaml"
        files.append(
            File.generated(config, f"{OPENAPI_DIR}/{surface}.yaml", abs_src_path=str(document))
        )
        files.append(
            File.generated(config, f"{OPENAPI_DIR}/{surface}.js", content=_swagger_script(surface))
        )
        files.append(
            File.generated(
                config, f"{OPENAPI_DIR}/{surface}.md", content=_swagger_page(surface, title)
            )
        )
    for name in Reference("native").asset_names():
        files.append(
            File.generated(config, f"{SWAGGER_DIR}/{name}", abs_src_path=str(asset_folder() / name))
        )
    vendored = iframe_worker()
    for name in FILES:
        files.append(File.generated(config, f"{VENDOR}/{name}", abs_src_path=str(vendored / name)))
    return files


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    folder = page.file.src_uri.rpartition("/")[0]
    if folder == "":
        return _GUIDE_LINK.sub(lambda m: f"]({_GUIDE_TARGET[m.group(1)]}", markdown)
    if folder == REFERENCE:
        return _REFERENCE_LINK.sub("](../", _DO_NOT_EDIT.sub("", markdown, count=1))
    return markdown


def _swagger_script(surface: str) -> str:
    """Swagger UI over the inlined document: no fetch, no validator badge."""
    options = {"dom_id": "#swagger-ui", "deepLinking": True, "validatorUrl": None}
    document = Reference(surface).openapi_json().decode("utf-8")
    return (
        f"const options = {json.dumps(options)};\n"
        f"options.spec = {document};\n"
        "options.presets = [SwaggerUIBundle.presets.apis];\n"
        "window.ui = SwaggerUIBundle(options);\n"
    )


def _swagger_page(surface: str, title: str) -> str:
    names = Reference(surface).asset_names()
    script = next(n for n in names if n.endswith(".js"))
    styles = [n for n in names if n.endswith(".css")]
    return "\n".join(
        [
            f"# {title} (OpenAPI)",
            "",
            f"[`{surface}.yaml`]({surface}.yaml), the OpenAPI 3.1 document the running service",
            "shows at `/docs`.",
            "",
            *(f'<link rel="stylesheet" href="../{SWAGGER_DIR}/{s}">' for s in styles),
            '<div id="swagger-ui"></div>',
            f'<script src="../{SWAGGER_DIR}/{script}"></script>',
            f'<script src="{surface}.js"></script>',
            "",
        ]
    )
