"""The native API's browsable reference: ``/openapi.json``, ``/docs`` and its assets
(``runtime.observability.reference`` holds the page and the bytes)."""

from __future__ import annotations

from collections.abc import Callable

from flask import Response, request

from generated.errors import RouteNotFound
from runtime.observability.reference import CACHE_CONTROL, Asset, Reference

REFERENCE = Reference("native")


def openapi() -> Response:
    return Response(REFERENCE.openapi_json(), content_type="application/json")


def docs() -> Response:
    return Response(REFERENCE.page(), content_type="text/html; charset=utf-8")


def asset_view(find: Callable[[str], Asset | None], cache_control: str) -> Callable[..., Response]:
    """The view of an asset route: ``find(name)``'s bytes, or 404 RouteNotFound."""

    def view(asset: str) -> Response:
        found = find(asset)
        if found is None:
            raise RouteNotFound(method=request.method, path=request.path)
        response = Response(found.body, content_type=found.content_type)
        response.headers["Cache-Control"] = cache_control
        return response

    return view


docs_asset = asset_view(REFERENCE.asset, CACHE_CONTROL)


REFERENCE_VIEWS: dict[str, Callable[..., Response]] = {
    REFERENCE.openapi_op: openapi,
    REFERENCE.docs_op: docs,
    REFERENCE.asset_op: docs_asset,
}
"""The views of spec/api/native.yaml's reference routes (at the server's root)."""
