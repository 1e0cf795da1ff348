"""What ``horde-chat worker`` is told on its command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from generated.signals import POP_MAX_WAIT_SECONDS
from generated.storage import TRANSPORT_BASE64, TRANSPORT_MESSAGES_URL, TRANSPORT_URL

DEFAULT_MAX_LENGTH = 512
DEFAULT_BACKEND_TIMEOUT = 120.0
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_POP_WAIT = float(POP_MAX_WAIT_SECONDS)
"""A pop waits this long for a job (the native API's long poll, spec'd maximum)."""
DEFAULT_SHUTDOWN_GRACE = 30.0
ALL_TRANSPORTS = (TRANSPORT_URL, TRANSPORT_BASE64, TRANSPORT_MESSAGES_URL)


@dataclass(frozen=True)
class WorkerConfig:
    """One worker: where the horde and the backend are, and what the operator asserts.

    ``context`` is the backend's real context in tokens; it is required when the backend
    exposes it on no route (llama-cpp-python's server). ``gguf`` names the model file, so the
    exact counter can render with the model's own template where the backend has no
    template route. ``template_overhead`` is added to the byte bound for tool preambles: the
    preamble's size as measured (0 is a measurement); None when the operator measured
    nothing, so the bound does not cover tool requests.

    ``vision``: the operator says a multimodal projector is loaded. No backend route reports
    that, so the worker declares vision only with it, and only after a probe image was
    answered; ``image_tokens`` is what one image costs in the context, when more than the
    probe measured (for backends that tile large images). ``image_transports``: how the
    worker receives images and offloaded messages (all three unless the object store's URLs
    are out of its reach: then base64 only).
    """

    horde_url: str
    api_key: str
    backend_url: str
    model: str | None = None
    name: str = "horde-chat-worker"
    threads: int = 1
    chat_only: bool = False
    template_overhead: int | None = None
    context: int | None = None
    max_length: int = DEFAULT_MAX_LENGTH
    gguf: Path | None = None
    backend_kind: str | None = None
    backend_timeout: float = DEFAULT_BACKEND_TIMEOUT
    poll_interval: float = DEFAULT_POLL_INTERVAL
    pop_wait: float = DEFAULT_POP_WAIT
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    vision: bool = False
    image_tokens: int = 0
    image_transports: tuple[str, ...] = ALL_TRANSPORTS

    @property
    def horde_root(self) -> str:
        """The native API's root (route paths carry ``/api/v2``), with or without it given."""
        url = self.horde_url.rstrip("/")
        return url[: -len("/api/v2")] if url.endswith("/api/v2") else url

    @property
    def backend_base(self) -> str:
        """The backend's root (``/v1`` stripped: the worker also calls routes beside it)."""
        url = self.backend_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _pop_wait(text: str) -> float:
    value = float(text)
    if not 0 <= value <= POP_MAX_WAIT_SECONDS:
        raise argparse.ArgumentTypeError(f"must be 0 to {POP_MAX_WAIT_SECONDS}, got {text}")
    return value


def _transports(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in ALL_TRANSPORTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"choose among {', '.join(ALL_TRANSPORTS)}")
    return names


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--horde", required=True, help="the native API, e.g. http://127.0.0.1:7001")
    parser.add_argument("--api-key", required=True, help="the worker owner's API key")
    parser.add_argument("--backend", required=True, help="OpenAI-compatible backend URL")
    parser.add_argument("--model", help="the model id to serve (default: the backend's only one)")
    parser.add_argument("--name", default="horde-chat-worker", help="the worker's name")
    parser.add_argument("--threads", type=_positive_int, default=1, help="jobs at a time")
    parser.add_argument("--chat-only", action="store_true", help="do not serve text jobs")
    parser.add_argument(
        "--template-overhead",
        type=_non_negative_int,
        help="tokens added to the byte bound for tool preambles the probe does not measure "
        "(check.py's 'tool preamble'; 0 is a measurement; without it the bound does not "
        "cover strict tool requests)",
    )
    parser.add_argument(
        "--context",
        type=_positive_int,
        help="the backend's real context in tokens (required when no route reports it)",
    )
    parser.add_argument(
        "--max-length",
        type=_positive_int,
        default=DEFAULT_MAX_LENGTH,
        help="the longest reply to declare, in tokens",
    )
    parser.add_argument("--gguf", type=Path, help="the model file, for its chat template")
    parser.add_argument(
        "--backend-kind",
        choices=["llama-cpp-python", "llama.cpp", "vllm", "koboldcpp", "ollama", "openai"],
        help="skip detection",
    )
    parser.add_argument(
        "--vision",
        action="store_true",
        help="the backend has a multimodal projector loaded (checked with a probe image)",
    )
    parser.add_argument(
        "--image-tokens",
        type=_non_negative_int,
        default=0,
        help="context tokens one image takes, when more than the probe image measured",
    )
    parser.add_argument(
        "--image-transports",
        type=_transports,
        default=ALL_TRANSPORTS,
        help=f"comma-separated, of {', '.join(ALL_TRANSPORTS)} (default: all)",
    )
    parser.add_argument("--backend-timeout", type=float, default=DEFAULT_BACKEND_TIMEOUT)
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=DEFAULT_POLL_INTERVAL,
        help="seconds between pops when one answers no job at once (an upstream horde)",
    )
    parser.add_argument(
        "--pop-wait",
        type=_pop_wait,
        default=DEFAULT_POP_WAIT,
        help=f"seconds a pop waits for a job (long poll; 0 to {POP_MAX_WAIT_SECONDS}, "
        f"default {POP_MAX_WAIT_SECONDS:g}; 0 pops every --poll-interval as upstream)",
    )
    parser.add_argument("--shutdown-grace", type=float, default=DEFAULT_SHUTDOWN_GRACE)


def config_from_args(args: argparse.Namespace) -> WorkerConfig:
    return WorkerConfig(
        horde_url=args.horde,
        api_key=args.api_key,
        backend_url=args.backend,
        model=args.model,
        name=args.name,
        threads=args.threads,
        chat_only=args.chat_only,
        template_overhead=args.template_overhead,
        context=args.context,
        max_length=args.max_length,
        gguf=args.gguf,
        backend_kind=args.backend_kind,
        backend_timeout=args.backend_timeout,
        poll_interval=args.poll_interval,
        pop_wait=args.pop_wait,
        shutdown_grace=args.shutdown_grace,
        vision=args.vision,
        image_tokens=args.image_tokens,
        image_transports=args.image_transports,
    )
