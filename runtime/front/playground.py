"""The front's playground: ``/`` (the page) and ``/pages/{asset}`` (its script and styles).

The page (``runtime/pages/static/playground.*``) is filled in with what it must not spell
itself: the routes it calls, the request's parameter names, the anonymous key and the
temperature's bounds, all from ``generated/``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from generated.chat.names import (
    AVAILABILITY_MODE_FAIL_FAST,
    HORDE_AVAILABILITY_MODE,
    PARAM_HORDE,
    PARAM_MAX_COMPLETION_TOKENS,
    PARAM_MESSAGES,
    PARAM_MODEL,
    PARAM_MODELS,
    PARAM_STREAM,
    PARAM_STREAM_OPTIONS,
    PARAM_TEMPERATURE,
    ROLE_ASSISTANT,
    ROLE_SYSTEM,
    ROLE_USER,
)
from generated.chat.tables import PARAMETERS
from generated.routes import ROUTES
from generated.wire import ANONYMOUS_API_KEY
from runtime.front.reference import asset_view
from runtime.front.sse import INCLUDE_USAGE
from runtime.pages.site import CACHE_CONTROL, HEADERS, Page, relative


def _settings() -> dict[str, object]:
    temperature = PARAMETERS[PARAM_TEMPERATURE]
    return {
        "routes": {
            "chat": relative("chat_completions"),
            "models": relative("list_models"),
            "docs": relative("front_docs"),
        },
        "anonymous_key": ANONYMOUS_API_KEY,
        "params": {
            "model": PARAM_MODEL,
            "models": PARAM_MODELS,
            "messages": PARAM_MESSAGES,
            "temperature": PARAM_TEMPERATURE,
            "max_tokens": PARAM_MAX_COMPLETION_TOKENS,
            "stream": PARAM_STREAM,
            "stream_options": PARAM_STREAM_OPTIONS,
            "include_usage": INCLUDE_USAGE,
            "horde": PARAM_HORDE,
        },
        "horde": {
            "availability_mode": HORDE_AVAILABILITY_MODE,
            "fail_fast": AVAILABILITY_MODE_FAIL_FAST,
        },
        "roles": {"system": ROLE_SYSTEM, "user": ROLE_USER, "assistant": ROLE_ASSISTANT},
        "temperature": {
            "min": temperature["schema"]["minimum"],
            "max": temperature["schema"]["maximum"],
            "default": temperature["default"],
        },
    }


PLAYGROUND = Page("front_playground", "front_page_asset", "playground.html", _settings)


async def playground(request: Request) -> Response:
    return Response(PLAYGROUND.html(), media_type="text/html", headers=HEADERS)


page_asset = asset_view(PLAYGROUND.asset, CACHE_CONTROL)


PLAYGROUND_ROUTES: list[BaseRoute] = [
    Route(ROUTES[op].path, view, methods=[ROUTES[op].method])
    for op, view in ((PLAYGROUND.page_op, playground), (PLAYGROUND.asset_op, page_asset))
]
"""spec/api/front.yaml's playground routes (at the server's root)."""
