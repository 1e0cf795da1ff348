"""LlamaServer: starts the real llama-cpp-python server, reports failures, stops cleanly."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from runtime.worker.llama_server import LlamaServer, LlamaServerError, free_port
from runtime.worker.tiny_model import MODEL_NAME, build_tiny_model

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("models") / "demo.gguf")


def test_context_manager_serves_then_frees_the_port(model: Path, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "llama.log"
    with LlamaServer(model, alias="demo-alias", log_path=log) as server:
        assert server.running
        models = httpx.get(f"{server.openai_base_url}/models").json()
        assert [entry["id"] for entry in models["data"]] == ["demo-alias"]
        port = server.port
    assert not server.running
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
    assert log.stat().st_size > 0


def test_stop_is_idempotent_and_start_cannot_be_repeated(model: Path) -> None:
    server = LlamaServer(model).start()
    with pytest.raises(LlamaServerError, match="already started"):
        server.start()
    assert server.stop() is not None
    assert server.stop() is None


def test_explicit_port_is_used(model: Path) -> None:
    port = free_port()
    with LlamaServer(model, port=port) as server:
        assert server.base_url == f"http://127.0.0.1:{port}"
        assert httpx.get(f"{server.base_url}/v1/models").json()["data"][0]["id"] == MODEL_NAME


@pytest.mark.parametrize("n_ctx", [0, 64, 1000])
def test_context_must_be_a_multiple_of_256(model: Path, n_ctx: int) -> None:
    with pytest.raises(ValueError, match="multiple of 256"):
        LlamaServer(model, n_ctx=n_ctx)


def test_missing_model_is_refused_before_spawning(tmp_path: Path) -> None:
    with pytest.raises(LlamaServerError, match="model file not found"):
        LlamaServer(tmp_path / "absent.gguf").start()


def test_broken_model_reports_the_exit_and_the_log(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    server = LlamaServer(broken)
    with pytest.raises(LlamaServerError, match="exited with code") as excinfo:
        server.start()
    assert "Failed to load model" in str(excinfo.value)
    assert not server.running


def test_extra_args_reach_the_server(model: Path) -> None:
    server = LlamaServer(model, extra_args=["--no_such_flag", "1"], ready_timeout=30)
    with pytest.raises(LlamaServerError, match="no_such_flag"):
        server.start()
