"""Both servers serve on uvloop's event loop: uvicorn's ``loop="auto"`` takes it when it is
installed, and the project depends on it wherever uvloop runs (docs/performance.md has what
it saves a completion)."""

from __future__ import annotations

import pytest
import uvloop

from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from tests.support.front import running_front

pytestmark = pytest.mark.integration


def test_the_native_api_serves_on_uvloop(native_service: NativeService) -> None:
    assert isinstance(native_service.app.hub.loop, uvloop.Loop)


def test_the_front_serves_on_uvloop(
    horde_stores: EmbeddedStores, native_service: NativeService
) -> None:
    with running_front(horde_stores.redis_url, [native_service.url]) as front:
        assert isinstance(front.drain.loop, uvloop.Loop)
