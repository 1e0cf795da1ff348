"""The horde-chat demo model: a tiny GGUF the project builds itself, so no download is needed.

A 2-layer llama-architecture network (hidden size 64, about 600 KB) with a byte-level BPE
tokenizer trained on a few sentences and a ChatML template. It knows no language: whatever
it is asked it answers :data:`DEMO_REPLY` and stops, and under a grammar it closes as soon as
the grammar lets it (``{}``, empty strings, ``0``), in a dozen tokens (``_weights`` says how).
It exists so ``make run`` and the tests serve real chat completions, tool calls and structured
output through a real llama.cpp server on a fresh machine; the build is deterministic and cached.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path

import gguf
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

MODEL_NAME = "horde-chat-demo"
DEMO_REPLY = "I am the tiny horde-chat demo model and always give this one answer."
DEFAULT_MODELS_DIR = Path("var") / "models"
# Bump when the build changes, so a cached file from an older build is not reused.
BUILD_VERSION = 2

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

N_LAYERS = 2
N_EMBD = 64
N_HEAD = 4
N_FF = 128
N_CTX_TRAIN = 4096
VOCAB_LIMIT = 512
SEED = 7
# Logits are 8 (sqrt(N_EMBD), the RMS norm) times these. A chain step's margin is about
# CHAIN_GAIN, far above every preference; the chain tokens see the preferences scaled by
# CHAIN_JSON_SHARE (for when a grammar bans the chain's next token).
CHAIN_GAIN = 3000.0
CHAIN_JSON_SHARE = 0.25
TOP_LEVEL = 1000.0
LEVEL_RATIO = 0.75  # 1 / 1.1 (llama.cpp's default repeat penalty) is 0.909: gaps survive it
LOWEST_LEVEL = -TOP_LEVEL
# The closing preference after a JSON token, best first: each entry is a token text (or a
# set of texts) sharing one level; OTHER stands for every token not listed. Tokens of
# whitespace alone come after all of them.
OTHER = "<other>"
JSON_PREFERENCE: list[str | tuple[str, ...]] = [
    IM_END,
    '"',
    "}",
    "]",
    ",",
    ":",
    "0",
    tuple("123456789"),
    "{",
    "[",
    OTHER,
    "-",
]
OPENERS = ("{", "[")
JSON_CHARS = frozenset('{}[]",:0123456789-.+ \t\n\r')

_CORPUS = [
    DEMO_REPLY,
    "system user assistant tool",
    "You are a helpful assistant.",
    "Hello! How are you today? Say hello in one word.",
    '{"type": "object", "properties": {"name": "string"}, "required": []}',
]


def default_model_path(data_dir: Path | None = None) -> Path:
    """Where the demo model is cached: ``<data_dir>/models/`` (``./var/models/`` by default)."""
    models_dir = DEFAULT_MODELS_DIR if data_dir is None else Path(data_dir) / "models"
    return models_dir / f"{MODEL_NAME}-v{BUILD_VERSION}.gguf"


def build_tiny_model(
    path: Path | str | None = None, *, add_bos_token: bool = False, rebuild: bool = False
) -> Path:
    """Return the path of the demo GGUF, building it first unless it is already cached.

    ``add_bos_token=True`` builds a variant whose tokenizer asks for a BOS token (used only
    to check how backends treat BOS); the demo model itself has it off.
    """
    target = Path(path) if path is not None else default_model_path()
    if target.exists() and not rebuild:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".building-", suffix=".gguf")
    os.close(fd)
    try:
        _write_gguf(Path(tmp_name), tokenizer, add_bos_token=add_bos_token)
        os.replace(tmp_name, target)  # atomic: a concurrent reader never sees half a file
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


def train_tokenizer() -> Tokenizer:
    """A byte-level BPE tokenizer over the fixed corpus, with every byte in its alphabet."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_LIMIT,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS, trainer=trainer)
    return tokenizer


def token_id(tokenizer: Tokenizer, token: str) -> int:
    """The id of a token the vocabulary must hold (the special tokens)."""
    found = tokenizer.token_to_id(token)
    if found is None:
        raise ValueError(f"the tokenizer has no {token!r}")
    return found


def reply_chain(tokenizer: Tokenizer) -> list[int]:
    """Token ids the model walks: newline, the reply's tokens, then ``<|im_end|>``."""
    newline = tokenizer.encode("\n").ids
    reply = tokenizer.encode(DEMO_REPLY).ids
    chain = [*newline, *reply, token_id(tokenizer, IM_END)]
    if len(newline) != 1 or len(set(chain)) != len(chain):
        raise ValueError(f"the reply chain must be distinct tokens, got {chain}")
    return chain


def _vocabulary(tokenizer: Tokenizer) -> tuple[list[str], list[int], list[str]]:
    vocab = tokenizer.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError("token ids are not contiguous")
    types = [
        gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL for t in tokens
    ]
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    return tokens, [int(t) for t in types], merges


def _level_table(texts: list[str], ranking: list[str | tuple[str, ...]]) -> np.ndarray:
    """Each token's preference under ``ranking`` (best first, geometrically shrinking);
    a token of whitespace alone that the ranking does not name comes last."""
    levels = {}
    for rank, group in enumerate(ranking):
        for text in (group,) if isinstance(group, str) else group:
            levels[text] = TOP_LEVEL * LEVEL_RATIO**rank
    last = [LOWEST_LEVEL if t.strip() == "" else levels[OTHER] for t in texts]
    return np.array([levels.get(t, fallback) for t, fallback in zip(texts, last, strict=True)])


def _token_class(text: str) -> int:
    """0: JSON punctuation (or whitespace), 1: a JSON opener, 2: prose (anything else)."""
    if not text or not set(text) <= JSON_CHARS:
        return 2
    return 1 if text.rstrip().endswith(OPENERS) else 0


def _weights(texts: list[str], chain: list[int]) -> dict[str, np.ndarray]:
    """The network's tensors: a bigram table of rank 64, so the next token depends on the
    current one alone (attention-output and FFN-down weights are zero, so the hidden state
    is the current token's embedding).

    The chain ``newline -> reply tokens -> <|im_end|>`` has orthonormal embeddings, each
    output row on it biased toward the token before it: any prompt is answered DEMO_REPLY.
    Every other token's embedding is one of three class directions, and each output row
    holds a *closing preference* on each: after an opener (``{``, ``[``) its closer; after
    other JSON punctuation the end of text, then ``"``, ``}``, ``]``, ``,``, ``:``, digits,
    openers, other tokens, whitespace last; after prose the newline that starts the reply
    chain (a raw text prompt is continued with a newline and the sentence). Chain tokens
    carry a little of the JSON direction, so when a grammar bans the chain's next token the
    same preference decides: llama.cpp masks what the grammar forbids and samples the rest,
    so the output closes as soon as it may. The levels shrink geometrically, so the gap
    between two outlasts llama.cpp's repeat penalty (positive logits divided by 1.1)."""
    rng = np.random.default_rng(SEED)

    def noise(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    closers = ("}", "]")
    rankings = [  # per token class, see _token_class
        JSON_PREFERENCE,
        [*closers, *[g for g in JSON_PREFERENCE if g not in closers]],
        ["\n", *JSON_PREFERENCE],
    ]
    # Orthonormal directions: one per chain token, then one per token class.
    basis, _ = np.linalg.qr(rng.standard_normal((N_EMBD, len(chain) + len(rankings))))
    chain_dirs, class_dirs = basis.T[: len(chain)], basis.T[len(chain) :]
    embeddings = np.array([class_dirs[_token_class(t)] for t in texts])
    share = CHAIN_JSON_SHARE
    embeddings[chain] = (chain_dirs + share * class_dirs[0]) / np.sqrt(1 + share**2)
    output = np.zeros((len(texts), N_EMBD))
    for direction, ranking in zip(class_dirs, rankings, strict=True):
        output += np.outer(_level_table(texts, ranking), direction)
    for previous, following in itertools.pairwise(range(len(chain))):
        output[chain[following]] += CHAIN_GAIN * chain_dirs[previous]
    tensors = {
        "token_embd.weight": embeddings.astype(np.float32),
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "output.weight": output.astype(np.float32),
    }
    for layer in range(N_LAYERS):
        block = f"blk.{layer}"
        tensors |= {
            f"{block}.attn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"{block}.attn_q.weight": noise(N_EMBD, N_EMBD),
            f"{block}.attn_k.weight": noise(N_EMBD, N_EMBD),
            f"{block}.attn_v.weight": noise(N_EMBD, N_EMBD),
            f"{block}.attn_output.weight": np.zeros((N_EMBD, N_EMBD), dtype=np.float32),
            f"{block}.ffn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"{block}.ffn_gate.weight": noise(N_FF, N_EMBD),
            f"{block}.ffn_up.weight": noise(N_FF, N_EMBD),
            f"{block}.ffn_down.weight": np.zeros((N_EMBD, N_FF), dtype=np.float32),
        }
    return tensors


def token_texts(tokenizer: Tokenizer) -> list[str]:
    """Each token id's text, special tokens spelled out."""
    return [
        tokenizer.decode([i], skip_special_tokens=False) for i in range(tokenizer.get_vocab_size())
    ]


def _write_gguf(path: Path, tokenizer: Tokenizer, *, add_bos_token: bool) -> None:
    tokens, types, merges = _vocabulary(tokenizer)
    chain = reply_chain(tokenizer)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(MODEL_NAME)
    writer.add_description("horde-chat demo model: answers one fixed sentence, knows no language")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYERS)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(token_id(tokenizer, ENDOFTEXT))
    writer.add_eos_token_id(token_id(tokenizer, IM_END))
    writer.add_add_bos_token(add_bos_token)
    writer.add_chat_template(CHATML_TEMPLATE)
    for name, array in _weights(token_texts(tokenizer), chain).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
