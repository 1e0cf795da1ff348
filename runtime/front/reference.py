"""The front's browsable reference: ``/openapi.json``, ``/docs`` and its assets
(``runtime.observability.reference`` holds the page and the bytes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from generated.errors import RouteNotFound
from generated.routes import ROUTES
from runtime.front.errors import error_response
from runtime.observability.reference import ASSET_PARAM, CACHE_CONTROL, Asset, Reference

REFERENCE = Reference("front")


async def openapi(request: Request) -> Response:
    return Response(REFERENCE.openapi_json(), media_type="application/json")


async def docs(request: Request) -> Response:
    return Response(REFERENCE.page(), media_type="text/html")


def asset_view(
    find: Callable[[str], Asset | None], cache_control: str
) -> Callable[[Request], Awaitable[Response]]:
    """The view of an asset route: ``find(name)``'s bytes, or 404 RouteNotFound."""

    async def view(request: Request) -> Response:
        found = find(str(request.path_params.get(ASSET_PARAM, "")))
        if found is None:
            return error_response(RouteNotFound(method=request.method, path=request.url.path))
        headers = {"cache-control": cache_control}
        return Response(found.body, media_type=found.content_type, headers=headers)

    return view


docs_asset = asset_view(REFERENCE.asset, CACHE_CONTROL)


REFERENCE_ROUTES: list[BaseRoute] = [
    Route(ROUTES[op].path, view, methods=[ROUTES[op].method])
    for op, view in (
        (REFERENCE.openapi_op, openapi),
        (REFERENCE.docs_op, docs),
        (REFERENCE.asset_op, docs_asset),
    )
]
"""spec/api/front.yaml's reference routes (at the server's root)."""
