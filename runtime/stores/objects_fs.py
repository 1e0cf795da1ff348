"""The embedded object store: files under the data folder, signed URLs served by the
native API (``GET /api/v2/objects/{key}?expires=...&signature=...``)."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlencode

from generated.errors import ObjectNotFound
from generated.routes import ROUTES
from runtime.stores.objects import StoredObject, check_key
from runtime.stores.url_signing import load_or_create_secret, signature, verify

OBJECT_ROUTE = "object"


class FilesystemObjectStore:
    """Objects as files (``<root>/<2 hex>/<key>``, content type beside it)."""

    def __init__(self, root: Path, *, base_url: str, secret: str | None = None) -> None:
        self.root = root
        self.base_url = base_url.rstrip("/")
        root.mkdir(parents=True, exist_ok=True)
        self._secret = secret.encode() if secret else load_or_create_secret(root)

    def _path(self, key: str) -> Path:
        shard = hashlib.sha256(check_key(key).encode()).hexdigest()[:2]
        return self.root / shard / key

    @staticmethod
    def _type_path(path: Path) -> Path:
        return path.with_name(f".{path.name}.type")  # keys never start with a dot

    def put(self, key: str, data: bytes, content_type: str) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(self._type_path(path), content_type.encode())
        _write_atomically(path, data)

    def get(self, key: str) -> StoredObject:
        path = self._path(key)
        try:
            data = path.read_bytes()
            content_type = self._type_path(path).read_text()
        except FileNotFoundError:
            raise ObjectNotFound(key=key) from None
        return StoredObject(data, content_type)

    def delete(self, key: str) -> None:
        path = self._path(key)
        for p in (path, self._type_path(path)):
            p.unlink(missing_ok=True)

    def signed_url(self, key: str, ttl_seconds: int) -> str:
        expires = int(time.time()) + ttl_seconds
        query = urlencode({"expires": expires, "signature": signature(self._secret, key, expires)})
        path = ROUTES[OBJECT_ROUTE].path.replace("{key}", quote(check_key(key)))
        return f"{self.base_url}{path}?{query}"

    def verify(self, key: str, expires: str | None, sig: str | None) -> None:
        """Raise ObjectURLInvalid or ObjectURLExpired unless the URL's query is good."""
        verify(self._secret, key, expires, sig)


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
