"""Both servers read requests with uvicorn's httptools protocol: h11 spends ~87 ms
of the event loop's CPU on a 30 MB body even when it is refused from its Content-Length,
httptools ~7 ms, so a large body held up the front's other clients (bench/front_hostile.py).
The choice is explicit (uvicorn's "auto" would fall back to h11 silently without httptools),
and each service's protocol adds the header caps (``runtime.http_guard``)."""

from __future__ import annotations

from starlette.applications import Starlette
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from runtime.front.config import FrontConfig
from runtime.front.server import FrontHttp
from runtime.front.server import uvicorn_config as front_uvicorn_config
from runtime.http_guard import GuardedHttpTools
from runtime.native.server import NativeHttp
from runtime.native.server import uvicorn_config as native_uvicorn_config


def test_the_front_serves_with_httptools() -> None:
    settings = front_uvicorn_config(Starlette(), FrontConfig.from_env("unix:///x", {}))
    settings.load()
    assert settings.http_protocol_class is FrontHttp
    assert issubclass(FrontHttp, GuardedHttpTools)
    assert issubclass(FrontHttp, HttpToolsProtocol)


def test_the_native_api_serves_with_httptools() -> None:
    settings = native_uvicorn_config(Starlette())
    settings.load()
    assert settings.http_protocol_class is NativeHttp
    assert issubclass(NativeHttp, GuardedHttpTools)
    assert issubclass(NativeHttp, HttpToolsProtocol)
