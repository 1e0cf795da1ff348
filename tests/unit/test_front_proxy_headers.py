"""The front's uvicorn settings (one process or several: both build them with
runtime.front.server.uvicorn_config) trust X-Forwarded-For only from configured proxies."""

from __future__ import annotations

from starlette.applications import Starlette

from runtime.front.config import FrontConfig
from runtime.front.server import uvicorn_config


def test_no_proxy_is_trusted_by_default_not_even_loopback() -> None:
    config = FrontConfig.from_env("unix:///x", {})
    assert config.forwarded_allow_ips == ()
    settings = uvicorn_config(Starlette(), config)
    assert settings.proxy_headers is False  # uvicorn's own default trusts 127.0.0.1


def test_the_variable_names_the_trusted_proxies() -> None:
    env = {"HORDE_FRONT_FORWARDED_ALLOW_IPS": " 10.0.0.7, 10.0.0.8 ,"}
    config = FrontConfig.from_env("unix:///x", env)
    assert config.forwarded_allow_ips == ("10.0.0.7", "10.0.0.8")
    settings = uvicorn_config(Starlette(), config, workers=2)
    assert settings.proxy_headers is True
    assert settings.forwarded_allow_ips == ["10.0.0.7", "10.0.0.8"]
