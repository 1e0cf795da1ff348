"""The services' pages over plain HTTP: the front's playground (``/``) and the native API's
dashboard (``/dashboard``), the URLs ``horde-chat up`` prints for them, their assets from
the same origin under a Content-Security-Policy, and the routes their settings name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from runtime.front.server import FrontService
from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.conftest import SERVICE_PASSKEY
from tests.support.front import running_front

pytestmark = pytest.mark.integration

SETTINGS = re.compile(r'<script type="application/json" id="settings">(.*?)</script>', re.S)
ASSET = re.compile(r'(?:src|href)="([^"#:]+)"')


@pytest.fixture(scope="module")
def front(horde_stores: EmbeddedStores, native_service: NativeService) -> Iterator[FrontService]:
    with running_front(
        horde_stores.redis_url, [native_service.url], service_passkey=SERVICE_PASSKEY
    ) as front:
        yield front


@pytest.fixture(params=["playground", "dashboard"])
def page_url(request: pytest.FixtureRequest, native_service: NativeService) -> str:
    """The URL each service prints for its page (what ``horde-chat up`` shows)."""
    if request.param == "dashboard":
        described = native_service.describe()
    else:
        described = request.getfixturevalue("front").describe()
    (line,) = [line for line in described.splitlines() if line.startswith(request.param + ":")]
    return line.split()[1]


def test_each_page_is_served_with_its_assets_from_its_own_origin(page_url: str) -> None:
    page = httpx.get(page_url, timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy
    assert "unsafe" not in policy
    assets = ASSET.findall(page.text)
    assert len(assets) == 3  # the shared style sheet, the page's own, its script
    kinds = set()
    for asset in assets:
        absolute = urljoin(page_url, asset)
        assert urlsplit(absolute).netloc == urlsplit(page_url).netloc
        response = httpx.get(absolute, timeout=10)
        assert response.status_code == 200, asset
        kinds.add(response.headers["content-type"].split(";")[0])
    assert kinds == {"text/css", "text/javascript"}
    assert "//" not in page.text.replace("<!DOCTYPE html>", "")  # no other host


def test_the_settings_name_routes_the_service_serves(page_url: str) -> None:
    page = httpx.get(page_url, timeout=10)
    match = SETTINGS.search(page.text)
    assert match is not None
    settings = json.loads(match.group(1))
    routes = settings["routes"]
    assert routes
    for name, path in routes.items():
        assert not path.startswith("/"), name  # relative: the page works behind a prefix
        response = httpx.get(urljoin(page_url, path), timeout=10)
        # the chat route takes POST only; every other one is a public read
        assert response.status_code in (200, 405), (name, response.text)


def test_an_asset_the_spec_does_not_name_is_a_404_in_the_services_envelope(
    front: FrontService, native_service: NativeService
) -> None:
    native = httpx.get(native_service.url + "/pages/playground.js", timeout=10)
    assert (native.status_code, native.json()["rc"]) == (404, "RouteNotFound")
    front_answer = httpx.get(front.url + "/pages/dashboard.js", timeout=10)
    assert front_answer.status_code == 404
    assert front_answer.json()["error"]["code"] == "RouteNotFound"
    assert httpx.get(front.url + "/pages/site.py", timeout=10).status_code == 404
