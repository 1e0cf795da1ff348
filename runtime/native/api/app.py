"""The native API's Flask application factory.

Routes come from ``generated.routes.ROUTES`` (surface ``native``); each implemented
operation id has a view in ``VIEWS``; an operation without one is not registered and
answers 404 RouteNotFound. The workers' lane's views (``LANE_VIEWS``) and the chat submit
(``CLIENT_LANE_VIEWS``) are served without Flask by ``runtime.native.api.lane``
(``app.extensions[LANE]`` and ``[CLIENT_LANE]``, which the ASGI shell dispatches to); the
app registers the same functions too (``flask_view``), so its routing answers a wrong
method 405 and a test client reaches them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask

from generated.routes import ROUTES
from runtime.body_caps import DEFAULT_MAX_BODY_BYTES
from runtime.native.api import account_views as views_accounts
from runtime.native.api import chat_views as views_chat
from runtime.native.api import object_views as views_objects
from runtime.native.api import progress_views as views_progress
from runtime.native.api import public_views as views_public
from runtime.native.api import status_views as views_status
from runtime.native.api import text_views as views_text
from runtime.native.api import worker_views as views_workers
from runtime.native.api.context import EXTENSION, NativeContext
from runtime.native.api.dashboard import DASHBOARD_VIEWS
from runtime.native.api.errors import register_error_handlers
from runtime.native.api.lane import CLIENT_LANE, LANE, Lane, LaneView, flask_view
from runtime.native.api.observe import OPERATOR_VIEWS
from runtime.native.api.observe import install as install_observability
from runtime.native.api.rate_limits import LIMITER, make_limiter, route_limits
from runtime.native.api.reference import REFERENCE_VIEWS

LANE_VIEWS: dict[str, LaneView] = {
    "text_pop": views_workers.text_pop,
    "text_submit": views_workers.text_submit,
    "text_progress": views_progress.text_progress,
    "text_leave": views_workers.text_leave,
    "heartbeat": views_public.heartbeat,
}
"""The workers' lane: pop, submit, progress, leave and heartbeat (runtime.native.asgi)."""
CLIENT_LANE_VIEWS: dict[str, LaneView] = {"chat_async": views_chat.chat_async}
"""Clients' routes served without Flask too, on the clients' threads: the chat submit."""
VIEWS: dict[str, Callable[..., Any]] = {
    "text_async": views_text.text_async,
    "text_status": views_text.text_status_view,
    "text_cancel": views_text.text_cancel,
    "chat_status": views_chat.chat_status_view,
    "chat_cancel": views_chat.chat_cancel,
    "chat_cancel_operation": views_chat.chat_cancel_operation,
    **{operation_id: flask_view(view) for operation_id, view in LANE_VIEWS.items()},
    **{operation_id: flask_view(view) for operation_id, view in CLIENT_LANE_VIEWS.items()},
    "models": views_status.models,
    "model": views_status.model,
    "stats_text_totals": views_status.stats_text_totals,
    "stats_text_models": views_status.stats_text_models,
    "stats_text_history": views_status.stats_text_history,
    "performance": views_status.performance,
    "modes": views_status.modes,
    "news": views_status.news,
    "kudos_transfer": views_accounts.kudos_transfer,
    "sharedkey_create": views_accounts.sharedkey_create,
    "sharedkey": views_accounts.sharedkey,
    "sharedkey_modify": views_accounts.sharedkey_modify,
    "sharedkey_delete": views_accounts.sharedkey_delete,
    "workers": views_public.workers,
    "worker": views_public.worker,
    "worker_by_name": views_public.worker_by_name,
    "find_user": views_public.find_user,
    "user": views_public.user,
    "users": views_public.users,
    "object": views_objects.object_download,
    **OPERATOR_VIEWS,  # /healthz, /readyz, /metrics
    **REFERENCE_VIEWS,  # /openapi.json, /docs
    **DASHBOARD_VIEWS,  # /dashboard, /pages/{asset}
}


def create_app(ctx: NativeContext) -> Flask:
    app = Flask("horde_native")
    app.config["MAX_CONTENT_LENGTH"] = ctx.settings.max_body_bytes or DEFAULT_MAX_BODY_BYTES
    # Flask's DefaultJSONProvider has sort_keys; app.json is typed as its JSONProvider base.
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions[EXTENSION] = ctx
    register_error_handlers(app)
    install_observability(app, ctx)  # /healthz, /readyz, /metrics, the access log
    limiter = make_limiter(app, ctx.settings.redis_url or "", ctx.settings.rate_limits_enabled)
    app.extensions[LIMITER] = limiter
    limits = route_limits(ctx.policy.rate_limits)
    for operation_id, route in ROUTES.items():
        view = VIEWS.get(operation_id)
        if route.surface != "native" or view is None:
            continue
        for limit, key_func in limits.get(operation_id, []):
            view = limiter.limit(limit, key_func=key_func)(view)
        app.add_url_rule(
            route.flask_rule, endpoint=operation_id, view_func=view, methods=[route.method]
        )
    access_log = app.extensions["horde_access_log"]
    max_body = int(app.config["MAX_CONTENT_LENGTH"])
    app.extensions[LANE] = Lane(ctx, LANE_VIEWS, limiter, access_log, max_body)
    app.extensions[CLIENT_LANE] = Lane(ctx, CLIENT_LANE_VIEWS, limiter, access_log, max_body)
    return app
