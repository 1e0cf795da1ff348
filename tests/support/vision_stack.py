"""Images end to end: a native API with its own object store and offload threshold, and the
real chat worker (``--vision``) on the OpenAI backend double, recording every pop answer.

    with native_with_objects(stores, offload_bytes=20_000) as native:
        with VisionWorker(native.url, key, backend, transports=("base64",)) as worker:
            ...  # worker.jobs: what each pop handed out; backend.chat_requests(): what it got
"""

from __future__ import annotations

import base64
import io
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from PIL import Image

from runtime.native.server import NativeService
from runtime.stores.embedded import EmbeddedStores
from runtime.stores.objects_fs import FilesystemObjectStore
from runtime.stores.url_signing import SECRET_FILE
from runtime.worker.backend import BackendClient
from runtime.worker.config import ALL_TRANSPORTS, WorkerConfig
from runtime.worker.declaration import probe
from runtime.worker.horde import HordeClient
from runtime.worker.job import JobRunner
from runtime.worker.loop import WorkerLoop
from tests.conftest import SERVICE_PASSKEY
from tests.doubles.openai_backend import OpenAIBackendDouble
from tests.support.native import running_native_with_objects

CONTEXT = 16384


def image_data_url(
    color: tuple[int, int, int] = (220, 20, 20), size: int = 16, fmt: str = "PNG"
) -> str:
    out = io.BytesIO()
    Image.new("RGB", (size, size), color).save(out, format=fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(out.getvalue()).decode()


def noisy_data_url(size: int, seed: int = 7) -> str:
    """A PNG of random pixels: its JPEG stays large (for offload thresholds)."""
    rng = random.Random(seed)
    image = Image.frombytes("RGB", (size, size), rng.randbytes(size * size * 3))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def jpeg_color(data_url: str) -> tuple[int, ...]:
    """The centre pixel of a JPEG data URL (refuses any other kind of URL)."""
    head, _, data = data_url.partition(",")
    assert head == "data:image/jpeg;base64", head
    with Image.open(io.BytesIO(base64.b64decode(data))) as image:
        return tuple(image.convert("RGB").getpixel((image.width // 2, image.height // 2)))


def user_turn(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def stored_files(store: FilesystemObjectStore) -> list[Path]:
    """The objects in a filesystem store (its signing secret and type files aside)."""
    return [
        p
        for p in store.root.rglob("*")
        if p.is_file() and not p.name.startswith(".") and p.name != SECRET_FILE
    ]


@contextmanager
def native_with_objects(stores: EmbeddedStores, *, offload_bytes: int) -> Iterator[NativeService]:
    """A native API on the test database with its own filesystem store and threshold."""
    with running_native_with_objects(
        stores,
        "horde-images-",
        service_passkey=SERVICE_PASSKEY,
        messages_offload_bytes=offload_bytes,
    ) as service:
        yield service


class RecordingHorde(HordeClient):
    """The worker's native client, keeping every pop answer that carried a job."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.jobs: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def pop(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().pop(body)
        if answer.get("id"):
            with self._lock:
                self.jobs.append(answer)
        return answer


class VisionWorker:
    """The real worker (probe, loop, job runner) with --vision, on the backend double."""

    def __init__(
        self,
        native_url: str,
        api_key: str,
        backend: OpenAIBackendDouble,
        *,
        transports: tuple[str, ...] = ALL_TRANSPORTS,
        name: str = "vision-worker",
    ) -> None:
        self.config = WorkerConfig(
            native_url,
            api_key,
            backend.openai_base_url,
            name=name,
            context=CONTEXT,
            chat_only=True,
            vision=True,
            image_transports=transports,
            poll_interval=0.05,
        )
        self.backend = BackendClient(self.config.backend_base, timeout=10)
        self.probed = probe(self.backend, self.config)
        self.horde = RecordingHorde(self.config.horde_root, api_key)
        runner = JobRunner(self.backend, self.horde, self.probed, 10)
        self.loop = WorkerLoop(self.config, self.probed, self.horde, runner)

    @property
    def jobs(self) -> list[dict[str, Any]]:
        return list(self.horde.jobs)

    def __enter__(self) -> Self:
        # online first: with nothing queued there is no job, and no long poll to wait out
        self.horde.pop({key: value for key, value in self.loop.body.items() if key != "wait"})
        self.loop.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.loop.stop(grace=5)
        self.horde.close()
        self.backend.close()
