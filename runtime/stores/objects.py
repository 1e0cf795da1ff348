"""Object storage: one small interface, two real backends, chosen by a storage URL.

``ObjectStore`` (``put``, ``get``, ``signed_url``, ``delete``) is what the native API calls;
``open_object_store`` picks the backend from ``HORDE_STORAGE_URL``: ``file:///path``
(default ``<data dir>/objects``; HMAC-signed URLs served by the native API) or
``s3://bucket[/prefix]?endpoint=URL&region=NAME`` (boto3's presigned URLs and credential
chain). Keys are flat names (``img-<hex>.jpg``), so a signed URL's path holds one segment.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from runtime.config import Settings

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
JPEG = "image/jpeg"
JSON = "application/json"


@dataclass(frozen=True)
class StoredObject:
    data: bytes
    content_type: str


class ObjectStore(Protocol):
    """Bytes by key, and time-limited download URLs a worker can fetch."""

    def put(self, key: str, data: bytes, content_type: str) -> None: ...

    def get(self, key: str) -> StoredObject:
        """The object; raises generated.errors.ObjectNotFound when there is none."""
        ...

    def signed_url(self, key: str, ttl_seconds: int) -> str:
        """A URL that downloads this object (only this one) until ``ttl_seconds`` from now."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing object is not an error."""
        ...


def check_key(key: str) -> str:
    if not KEY_PATTERN.match(key) or ".." in key:
        raise ValueError(f"not a valid object key: {key!r}")
    return key


def new_key(kind: str, extension: str) -> str:
    """A fresh unguessable key such as ``img-<32 hex>.jpg``."""
    return check_key(f"{kind}-{uuid.uuid4().hex}.{extension}")


def open_object_store(settings: Settings, *, base_url: str) -> ObjectStore:
    """The store ``settings.storage_url`` names; ``base_url`` is the native API's root URL
    (``http://host:port``), where the filesystem store's signed URLs point."""
    url = settings.storage_url or (settings.data_dir / "objects").resolve().as_uri()
    parts = urlsplit(url)
    if parts.scheme == "file":
        from runtime.stores.objects_fs import FilesystemObjectStore

        return FilesystemObjectStore(
            Path(unquote(parts.path)),
            base_url=settings.public_url or base_url,
            secret=settings.storage_secret,
        )
    if parts.scheme == "s3":
        from runtime.stores.objects_s3 import S3ObjectStore

        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if not parts.netloc:
            raise ValueError(f"HORDE_STORAGE_URL {url!r} names no bucket")
        return S3ObjectStore(
            bucket=parts.netloc,
            prefix=parts.path.strip("/"),
            endpoint_url=query.get("endpoint"),
            region=query.get("region"),
        )
    raise ValueError(f"HORDE_STORAGE_URL must start with file:// or s3://, got {url!r}")
