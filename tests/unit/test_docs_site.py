"""``make docs``: mkdocs builds the site with ``--strict`` (no broken link, anchor or page
left out of the navigation), every guide, generated page and OpenAPI document is in it, and
it works from the disk: nothing it loads or names is on another host, and in headless
Chromium the OpenAPI page renders and search answers with every request a file read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.chromium import NAME_NOT_RESOLVED, Rendered, needs_chromium, render
from tools.docs_site.hooks import GENERATED_DOCS, SURFACES

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs"
LOOPBACK = {"127.0.0.1", "localhost"}
_URL = re.compile(r"\bhttps?://([^/\s\"'<>`:)]+)")
PAGE_SITE = "file://"
"""The top-frame site Chromium's network log gives a request of a page opened from the disk."""
NAMESPACE_ATTRIBUTES = {"xmlns", "xmlns:xlink"}
"""SVG namespace names: identifiers that look like URLs, never fetched."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return out


class Addresses(HTMLParser):
    """Every attribute value of a page (but namespace names) and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[tuple[str, str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is not None and name not in NAMESPACE_ATTRIBUTES:
                self.values.append((tag, name, value))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _addresses(page: Path) -> Addresses:
    found = Addresses()
    found.feed(page.read_text(encoding="utf-8"))
    return found


def test_every_guide_reference_page_and_openapi_document_is_built(site: Path) -> None:
    guides = {p.stem for p in GUIDES.glob("*.md")}
    assert {"index", "design", "using-the-front", "running", "performance"} <= guides
    for name in guides:
        assert (site / f"{name}.html").is_file(), name
    for page in GENERATED_DOCS.glob("*.md"):
        assert (site / "reference" / f"{page.stem}.html").is_file(), page.name
    for surface in SURFACES:
        assert (site / "openapi" / f"{surface}.yaml").is_file()
        assert (site / "openapi" / f"{surface}.html").is_file()
    assert (site / "changelog.html").is_file()
    # the navigation (on every page) links every generated page, so none is left out
    nav = {value for tag, name, value in _addresses(site / "index.html").values if name == "href"}
    for page in GENERATED_DOCS.glob("*.md"):
        assert f"reference/{page.stem}.html" in nav, page.name


def test_a_guide_s_link_to_a_generated_page_leads_to_its_site_page(site: Path) -> None:
    # docs/*.md link ../generated/docs/X.md (right on GitHub); the site's page is reference/X
    assert "../generated/docs/errors.md" in (GUIDES / "using-the-front.md").read_text()
    hrefs = {v for _, name, v in _addresses(site / "using-the-front.html").values if name == "href"}
    assert "reference/errors.html" in hrefs


def test_nothing_built_names_another_host(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        found = _addresses(page)
        for tag, name, value in found.values:
            parts = urlsplit(value)
            if parts.scheme in ("http", "https") or value.startswith("//"):
                assert parts.hostname in LOOPBACK, (page.name, tag, name, value)
            if name in ("src", "href") and not parts.scheme and parts.path:
                # 404.html, which only a web server shows, names its files from the root
                base = site if parts.path.startswith("/") else page.parent
                assert (base / parts.path.lstrip("/")).exists(), (page.name, value)
        # URLs in the text (examples in the guides) name this machine only
        for host in _URL.findall("".join(found.text)):
            assert host in LOOPBACK, (page.name, host)
    for sheet in site.rglob("*.css"):
        text = sheet.read_text(encoding="utf-8")
        assert "@import" not in text, sheet.name
        for url in re.findall(r"url\(([^)]*)\)", text):
            url = url.strip("\"'")
            assert url.startswith("data:") or "//" not in url, (sheet.name, url)


@pytest.mark.slow
@needs_chromium
def test_the_openapi_page_renders_from_the_disk(site: Path) -> None:
    rendered = render((site / "openapi" / "native.html").as_uri())
    assert "opblock" in rendered.dom
    assert "/api/v2/generate/chat/async" in rendered.dom
    assert "Failed to load API definition" not in rendered.dom
    assert _asked_the_network(rendered) == []


@pytest.mark.slow
@needs_chromium
def test_search_answers_from_the_disk(site: Path) -> None:
    rendered = render((site / "index.html").as_uri() + "?q=verification")
    assert "md-search-result__item" in rendered.dom
    assert "reference/verification.html" in rendered.dom
    assert _asked_the_network(rendered) == []


def _asked_the_network(rendered: Rendered) -> list[str]:
    """What the page asked of the network (its files are read from the disk, not logged).

    Chromium's own background requests (a clock, updates) are not the page's: their
    top-frame site is not the page's, and each was refused before a name was looked up.
    """
    for fetch in rendered.fetches:
        assert fetch.net_error == NAME_NOT_RESOLVED, fetch
    return [f.url for f in rendered.fetches if f.top_site == PAGE_SITE]
