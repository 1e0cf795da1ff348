"""The worker's --vision: declared only when the operator asks and a probe image is answered;
the probe measures an image's context cost, which the fit check counts per image; the
declared image transports and the body caps derived from the spec."""

from __future__ import annotations

import argparse

import pytest

from generated.chat.names import (
    DECL_CHAT_FEATURES,
    DECL_IMAGE_TRANSPORTS,
    FEATURE_VISION,
    LIMIT_MAX_IMAGE_BYTES,
)
from generated.storage import INTAKE_CAPS, TRANSPORT_BASE64, TRANSPORT_URL
from runtime.body_caps import (
    DEFAULT_MAX_BODY_BYTES,
    INLINE_IMAGE_BYTES,
    TEXT_BODY_BYTES,
    inline_image_bytes,
)
from runtime.config import Settings
from runtime.front.config import FrontConfig
from runtime.worker.backend import BackendClient
from runtime.worker.config import ALL_TRANSPORTS, WorkerConfig, add_worker_arguments
from runtime.worker.declaration import WorkerStartupError, pop_declaration, probe
from runtime.worker.vision import without_images
from tests.doubles.backend_script import Failure, Reply
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.support.vision_stack import image_data_url, image_part, text_part, user_turn

pytestmark = pytest.mark.integration

IMAGE_MARK_TOKENS = len("<image>")  # how the double's template renders an image part


def _config(backend: OpenAIBackendDouble, **options: object) -> WorkerConfig:
    return WorkerConfig("http://unused", "key", backend.openai_base_url, context=4096, **options)  # type: ignore[arg-type]


def test_vision_is_declared_only_under_the_flag_and_after_the_probe() -> None:
    with OpenAIBackendDouble(default_reply=Reply(content="red")) as backend:
        with BackendClient(backend.base_url, timeout=10) as client:
            plain = probe(client, _config(backend))
            seeing = probe(client, _config(backend, vision=True))
            tiled = probe(client, _config(backend, vision=True, image_tokens=600))
        base64_only = _config(backend, image_transports=(TRANSPORT_BASE64,))
        default = _config(backend)
    assert FEATURE_VISION not in plain.features
    assert plain.image_tokens == 0
    assert FEATURE_VISION in seeing.features
    assert seeing.image_tokens == IMAGE_MARK_TOKENS  # measured: with minus without the image
    assert tiled.image_tokens == 600  # the operator's larger figure wins
    declaration = pop_declaration(seeing, base64_only)
    assert declaration[DECL_IMAGE_TRANSPORTS] == [TRANSPORT_BASE64]
    assert FEATURE_VISION in declaration[DECL_CHAT_FEATURES]
    assert pop_declaration(plain, default)[DECL_IMAGE_TRANSPORTS] == list(ALL_TRANSPORTS)


def test_a_backend_refusing_the_probe_image_stops_a_vision_worker() -> None:
    with (
        OpenAIBackendDouble(default_reply=Reply(content="red")) as backend,
        BackendClient(backend.base_url, timeout=10) as client,
    ):
        probe(client, _config(backend))
        calls = len(backend.chat_requests())  # a probe without the image's two calls
        backend.script(*[Reply(content="red")] * calls, Failure(400, "no image input"))
        with pytest.raises(WorkerStartupError, match="refused a probe image"):
            probe(client, _config(backend, vision=True))
        image_call = backend.chat_requests()[-1].body["messages"][0]["content"]
    assert image_call[1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_the_fit_count_leaves_images_out() -> None:
    messages = user_turn(text_part("Look"), image_part(image_data_url()), image_part("https://x"))
    text_only, count = without_images([*messages, {"role": "assistant", "content": "Seen."}])
    assert count == 2
    assert text_only == [
        {"role": "user", "content": [text_part("Look")]},
        {"role": "assistant", "content": "Seen."},
    ]


def test_image_transports_argument_and_body_caps() -> None:
    parser = argparse.ArgumentParser()
    add_worker_arguments(parser)
    required = ["--horde", "h", "--api-key", "k", "--backend", "b"]
    args = parser.parse_args([*required, "--image-transports", "base64,url,base64"])
    assert args.image_transports == (TRANSPORT_BASE64, TRANSPORT_URL)
    assert parser.parse_args(required).image_transports == ALL_TRANSPORTS
    with pytest.raises(SystemExit):
        parser.parse_args([*required, "--image-transports", "ftp"])
    # the body cap is the text allowance plus the inline images', and one image
    # at the largest size the horde takes in fits the inline allowance as a data URL
    assert TEXT_BODY_BYTES + INLINE_IMAGE_BYTES == DEFAULT_MAX_BODY_BYTES
    assert inline_image_bytes(INTAKE_CAPS[LIMIT_MAX_IMAGE_BYTES]) <= INLINE_IMAGE_BYTES
    assert (
        inline_image_bytes(INTAKE_CAPS[LIMIT_MAX_IMAGE_BYTES])
        > INTAKE_CAPS[LIMIT_MAX_IMAGE_BYTES] * 4 // 3
    )
    assert FrontConfig(redis_url="unix:///x").max_body_bytes == DEFAULT_MAX_BODY_BYTES
    assert Settings.from_env({"HORDE_MAX_BODY_BYTES": "7"}).max_body_bytes == 7
    assert (
        FrontConfig.from_env("unix:///x", {"HORDE_FRONT_MAX_BODY_BYTES": "5"}).max_body_bytes == 5
    )
