"""The browsable reference of both services: ``/openapi.json`` is the generated
document, ``/docs`` a Swagger UI page whose every asset comes from the same origin, and,
where Debian's Chromium is installed, the page rendered in headless Chromium shows the
service's routes while every network request it made went to the service itself.

On the native API (tests/conftest.py's native_service) and on a front in front of it. The
Chromium test skips on a machine without /usr/bin/chromium (.ci/run installs it); the
plain HTTP tests run everywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
import yaml

from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import SERVICE_PASSKEY
from tests.support.chromium import NAME_NOT_RESOLVED, needs_chromium, render
from tests.support.front import running_front

pytestmark = pytest.mark.integration

GENERATED = Path(__file__).resolve().parents[2] / "generated" / "openapi"
# a route of each service that Swagger UI renders as an operation (its path in the page)
ROUTE_SHOWN = {"native": "/api/v2/generate/chat/async", "front": "/v1/chat/completions"}


@pytest.fixture(scope="module")
def front_url(horde_stores: EmbeddedStores, native_service: NativeService) -> Iterator[str]:
    with running_front(
        horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY
    ) as front:
        yield front.url


@pytest.fixture(params=["native", "front"])
def service(request: pytest.FixtureRequest, native_service: NativeService) -> tuple[str, str]:
    """(surface, root URL) of each service."""
    surface = str(request.param)
    if surface == "native":
        return surface, native_service.url
    return surface, str(request.getfixturevalue("front_url"))


class References(HTMLParser):
    """Every URL a page names (src and href), and its inline scripts' text."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.urls.append(value)
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.scripts.append(data)


def test_openapi_json_is_the_generated_document(service: tuple[str, str]) -> None:
    surface, root = service
    response = httpx.get(root + "/openapi.json", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    expected = yaml.safe_load((GENERATED / f"{surface}.yaml").read_text(encoding="utf-8"))
    assert response.json() == expected


def test_docs_page_and_its_assets_are_served_from_the_same_origin(
    service: tuple[str, str],
) -> None:
    _surface, root = service
    page_url = root + "/docs"
    page = httpx.get(page_url, timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    found = References()
    found.feed(page.text)
    assert found.urls, "the page names no asset"
    kinds = set()
    for url in found.urls:
        absolute = urljoin(page_url, url)
        assert urlsplit(absolute).netloc == urlsplit(root).netloc, url
        asset = httpx.get(absolute, timeout=10)
        assert asset.status_code == 200, url
        assert len(asset.content) > 0
        kinds.add(asset.headers["content-type"].split(";")[0])
    assert {"text/javascript", "text/css"} <= kinds
    # the inline start-up script names the document by a relative URL and turns the
    # validator badge (a request to a public validator) off
    (script,) = found.scripts
    match = re.search(r"const options = (\{.*?\});", script)
    assert match is not None, script
    options = json.loads(match.group(1))
    assert options["validatorUrl"] is None
    assert urljoin(page_url, options["url"]) == root + "/openapi.json"
    # nothing in the page or its script spells another host
    for text in (page.text, *found.scripts):
        assert "//" not in text.replace("<!DOCTYPE html>", ""), text


def test_an_unknown_asset_is_a_404_in_the_service_envelope(service: tuple[str, str]) -> None:
    surface, root = service
    response = httpx.get(root + "/docs/swagger-ui.js.map", timeout=10)
    assert response.status_code == 404
    body = response.json()
    if surface == "native":
        assert body["rc"] == "RouteNotFound"
    else:
        assert body["error"]["code"] == "RouteNotFound"
    # a file of the package that the spec does not name is not served either
    assert httpx.get(root + "/docs/LICENSE", timeout=10).status_code == 404


@pytest.mark.slow
@needs_chromium
def test_docs_renders_the_routes_in_headless_chromium(service: tuple[str, str]) -> None:
    surface, root = service
    rendered = render(root + "/docs")
    dom, fetches = rendered.dom, rendered.fetches
    # Swagger UI rendered the document: an operation block naming one of the service's
    # routes, and no error box
    assert 'class="swagger-ui' in dom
    assert "opblock" in dom
    assert ROUTE_SHOWN[surface] in dom
    assert "Unable to render this definition" not in dom
    assert "Failed to load API definition" not in dom
    # everything the page asked for (the page's site is its requests' top-frame site) went
    # to the service itself: the page, its assets and the document
    here = urlsplit(root)
    page_site = f"{here.scheme}://{here.hostname}"
    asked = {f.url for f in fetches if f.top_site == page_site}
    assert {root + "/docs", root + "/openapi.json"} <= asked
    assert sorted(u for u in asked if urlsplit(u).netloc != here.netloc) == []
    # Chromium's own background requests (a clock, an account check) are not the page's;
    # each was refused before a name was looked up, so none left the machine either
    for fetch in fetches:
        if urlsplit(fetch.url).hostname != here.hostname:
            assert fetch.net_error == NAME_NOT_RESOLVED, fetch
