"""The demo model's build: deterministic, small, cached, and a real GGUF llama.cpp loads."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest
from llama_cpp import Llama
from pydantic import BaseModel

from runtime.worker.tiny_model import (
    CHATML_TEMPLATE,
    DEMO_REPLY,
    IM_END,
    MODEL_NAME,
    build_tiny_model,
    default_model_path,
    reply_chain,
    train_tokenizer,
)


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def test_build_is_deterministic_and_small(tmp_path: Path) -> None:
    first = build_tiny_model(tmp_path / "a.gguf")
    second = build_tiny_model(tmp_path / "b.gguf")
    assert first.read_bytes() == second.read_bytes()
    assert 300_000 < first.stat().st_size < 900_000
    assert not list(tmp_path.glob(".building-*"))


def test_cached_file_is_reused_unless_rebuild_is_asked(tmp_path: Path) -> None:
    path = build_tiny_model(tmp_path / "m.gguf")
    path.write_bytes(b"stale")
    assert build_tiny_model(path).read_bytes() == b"stale"
    assert build_tiny_model(path, rebuild=True).read_bytes()[:4] == b"GGUF"


def test_default_location_is_under_the_data_folder(tmp_path: Path) -> None:
    assert default_model_path().parts[:2] == ("var", "models")
    assert default_model_path(tmp_path).parent == tmp_path / "models"
    assert MODEL_NAME in default_model_path(tmp_path).name


def test_gguf_metadata_describes_the_tokenizer_and_template(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(build_tiny_model(tmp_path / "m.gguf"))
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.embedding_length") == 64
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.add_bos_token") is False
    assert _field(reader, "tokenizer.chat_template") == CHATML_TEMPLATE
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert isinstance(tokens, list)
    assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert tokens[_field(reader, "tokenizer.ggml.eos_token_id")] == IM_END  # type: ignore[index]
    zeroed = [
        t for t in reader.tensors if t.name.endswith(("attn_output.weight", "ffn_down.weight"))
    ]
    assert len(zeroed) == 4
    assert all(not t.data.any() for t in zeroed)


def test_bos_variant_only_flips_the_flag(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(build_tiny_model(tmp_path / "bos.gguf", add_bos_token=True))
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True


def test_tokenizer_has_every_byte_and_a_chain_of_distinct_tokens() -> None:
    tokenizer = train_tokenizer()
    chain = reply_chain(tokenizer)
    assert len(set(chain)) == len(chain)
    assert tokenizer.decode(chain[1:-1]) == DEMO_REPLY
    text = "ünï 日本 \x00\x7f 🙂"
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


@pytest.mark.parametrize(
    "conversation",
    [
        [{"role": "user", "content": "Who are you?"}],
        [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "日本語で答えて 🙂"},
            {"role": "assistant", "content": "Non."},
            {"role": "user", "content": "the tiny demo model " * 20},
        ],
    ],
)
def test_llama_cpp_answers_the_demo_reply_whatever_it_is_asked(
    tmp_path: Path, conversation: list[dict[str, str]]
) -> None:
    llama = Llama(str(build_tiny_model(tmp_path / "m.gguf")), n_ctx=1024, verbose=False)
    result = llama.create_chat_completion(messages=conversation, temperature=1.0, seed=1)  # type: ignore[arg-type]
    choice = result["choices"][0]  # type: ignore[index]
    assert choice["message"]["content"] == DEMO_REPLY
    assert choice["finish_reason"] == "stop"


class _Person(BaseModel):
    name: str
    age: int
    likes_tea: bool


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_grammar_constrained_output_closes_within_a_few_tokens(
    tmp_path: Path, temperature: float
) -> None:
    # Under a grammar llama.cpp samples from the model's logits among the allowed tokens;
    # the demo model prefers whatever closes, so the JSON ends long before max_tokens.
    llama = Llama(str(build_tiny_model(tmp_path / "m.gguf")), n_ctx=1024, verbose=False)
    schema = _Person.model_json_schema()
    formats = [{"type": "json_object"}, {"type": "json_object", "schema": schema}]
    for response_format in formats:
        result = llama.create_chat_completion(
            messages=[{"role": "user", "content": "Who are you?"}],
            response_format=response_format,  # type: ignore[arg-type]
            temperature=temperature,
            seed=1,
            max_tokens=300,
        )
        choice = result["choices"][0]  # type: ignore[index]
        assert choice["finish_reason"] == "stop"
        assert result["usage"]["completion_tokens"] < 50  # type: ignore[index]
        value = json.loads(choice["message"]["content"])
        assert isinstance(value, dict)
        if "schema" in response_format:
            _Person.model_validate(value)


def test_a_raw_text_prompt_is_continued_with_the_demo_reply(tmp_path: Path) -> None:
    llama = Llama(str(build_tiny_model(tmp_path / "m.gguf")), n_ctx=1024, verbose=False)
    result = llama.create_completion("Once upon a time", max_tokens=64, temperature=1.0, seed=1)
    assert result["choices"][0]["text"] == "\n" + DEMO_REPLY  # type: ignore[index]
