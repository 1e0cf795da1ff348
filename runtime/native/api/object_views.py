"""GET /api/v2/objects/{key}: the filesystem object store's signed downloads.

The URL's ``expires`` and ``signature`` must match the key (HMAC over both), so a URL
signed for one object cannot fetch another, and it stops working at ``expires``. A
deployment on an S3-compatible store hands out that store's presigned URLs instead and
serves nothing here.
"""

from __future__ import annotations

from flask import Response, request

from generated.errors import ObjectURLInvalid
from runtime.native.api.context import native
from runtime.stores.objects_fs import FilesystemObjectStore


def object_download(key: str) -> Response:
    store = native().objects
    if not isinstance(store, FilesystemObjectStore):
        raise ObjectURLInvalid(reason="this deployment serves objects from its S3 store")
    store.verify(key, request.args.get("expires"), request.args.get("signature"))
    stored = store.get(key)
    response = Response(stored.data, status=200, content_type=stored.content_type)
    response.headers["Cache-Control"] = "private, no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
