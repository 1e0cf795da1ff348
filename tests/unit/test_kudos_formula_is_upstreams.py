"""The kudos formula is upstream AI Horde's, on spec/pricing.yaml's numbers (golden numbers
from upstream's own tests), a model's size comes from the text model reference only, and a
non-finite number is refused wherever one could enter."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from generated.pricing import EXAMPLES, PER_JOB_REWARD_CAP, TEXT_MODELS
from runtime import strict_json
from runtime.cli import build_parser
from runtime.contract import pricing
from runtime.native.accounts.kudos import NonFiniteAmount, money, quote

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_upstreams_context_multiplier_2048_is_3_4():
    """upstream tests/unit/test_kobold_text_wp.py: 1.2 + 2.2**log2(2048/1024) = 3.4."""
    assert pricing.context_multiplier(2048) == pytest.approx(3.4)
    assert pricing.context_multiplier(1024) == pytest.approx(2.2)
    assert pricing.context_multiplier(10**9) == 30  # clamped above
    assert pricing.context_multiplier(1) == pytest.approx(1.2 + 2.2 ** math.log2(1 / 1024))


def test_upstreams_quote_of_80_tokens_on_no_model_at_2048_is_35_36():
    """upstream: round(80 * 13 * 3.4 / 100, 2) = 35.36 for a request naming no model."""
    assert money(pricing.job_quote(80, 2048, [])) == money(35.36)
    # and a request's quote adds the horde tax once to each job's quote
    assert quote(80, 2048, 2, [], 1) == money(35.36) * 2 + 1


@pytest.mark.parametrize("example", EXAMPLES["context_multiplier"], ids=str)
def test_the_docs_worked_context_multipliers_are_the_functions(example):
    assert pricing.context_multiplier(example["context"]) == pytest.approx(
        example["multiplier"], abs=1e-6
    )


@pytest.mark.parametrize("example", EXAMPLES["quote"], ids=str)
def test_the_docs_worked_quotes_are_the_functions(example):
    got = pricing.job_quote(example["max_length"], example["max_context_length"], example["models"])
    assert money(got) == money(example["kudos"])


@pytest.mark.parametrize("example", EXAMPLES["reward"], ids=str)
def test_the_docs_worked_rewards_are_the_functions(example):
    got = pricing.job_reward(
        example["tokens"],
        example["model"],
        example["context"],
        trusted=example["trusted"],
        validated=example["validated"],
    )
    assert money(got) == money(example["kudos"])


def test_a_models_size_comes_from_the_reference_and_never_from_its_name():
    assert pricing.model_billions("mint-99999999B") is None
    assert pricing.model_billions("llama-3-70B") is None
    assert pricing.model_billions("meta-llama/Meta-Llama-3-70B-Instruct") == 70
    # upstream's aliases (convert.py), "model::user" names and quantisation suffixes
    assert pricing.model_billions("aphrodite/meta-llama/Meta-Llama-3-70B-Instruct") == 70
    assert pricing.model_billions("koboldcpp/Meta-Llama-3-70B-Instruct") == 70
    assert pricing.model_billions("meta-llama/Meta-Llama-3-70B-Instruct::alice") == 70
    assert pricing.model_billions("koboldcpp/Meta-Llama-3-70B-Instruct.i1-Q4_K_M") == 70
    assert pricing.model_billions("koboldcpp/Meta-Llama-3-70B-Instruct-GGUF-Q5_K_S") == 70


def test_the_reference_is_the_operators_spec_file():
    """Every entry of spec/models/text.yaml is known under its name and upstream's aliases."""
    reference = yaml.safe_load((REPO_ROOT / "spec/models/text.yaml").read_text())
    for name, billions in reference["models"].items():
        short = name.rsplit("/", 1)[-1]
        for alias in (name, f"aphrodite/{name}", f"koboldcpp/{short}"):
            assert TEXT_MODELS[alias] == billions


def test_validated_backends_are_the_bridge_agents_names():
    assert pricing.is_validated_backend("AI Horde Worker~aphrodite~oai:5:https://x")
    assert pricing.is_validated_backend("horde-chat-worker:1:https://github.com/horde-chat")
    assert not pricing.is_validated_backend("my-bridge:1:https://x")
    assert not pricing.is_validated_backend("AI Horde Worker")  # no version: unparsable
    assert not pricing.is_validated_backend("")


def test_no_one_job_earns_more_than_the_cap():
    assert pricing.job_reward(
        10**9, "meta-llama/Meta-Llama-3-70B-Instruct", 4096, trusted=True, validated=True
    ) == pytest.approx(PER_JOB_REWARD_CAP)
    # and the cap is above what any reference model earns at the largest max_length (4096)
    largest = max(TEXT_MODELS, key=lambda m: TEXT_MODELS[m])
    top = 4096 * pricing.parameter_bonus(TEXT_MODELS[largest]) * TEXT_MODELS[largest] / 125
    assert top * pricing.context_multiplier(4096) < PER_JOB_REWARD_CAP


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_a_json_body_are_not_json(text):
    with pytest.raises(ValueError, match="finite"):
        strict_json.loads(f'{{"kudos": {text}}}')


def test_a_number_too_large_for_a_float_is_found_by_its_path():
    body = strict_json.loads('{"params": {"temperature": 1e999}, "x": [1, -1e400]}')
    assert strict_json.non_finite(body) == "params.temperature"
    assert strict_json.non_finite({"x": [1.5, -math.inf]}) == "x.[1]"
    assert strict_json.non_finite(strict_json.loads('{"kudos": 1.5e3, "n": [2]}')) is None


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_the_users_cli_refuses_a_non_finite_balance(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["users", "create", "--name", "a", f"--kudos={value}"])
    assert exit_info.value.code == 2
    assert "is not a finite number" in capsys.readouterr().err


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_amount_never_becomes_money(value):
    with pytest.raises(NonFiniteAmount):
        money(value)
