"""The native API's dashboard: ``/dashboard`` (the page) and ``/pages/{asset}``.

The page (``runtime/pages/static/dashboard.*``) reads public routes only, and is told their
paths here, from ``generated.routes``: an operation this build does not serve is left out,
and the page says which figures it cannot show.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Response

from generated.routes import ROUTES
from runtime.native.api.reference import asset_view
from runtime.pages.site import CACHE_CONTROL, HEADERS, Page, relative

READS = {
    "models": "models",
    "workers": "workers",
    "totals": "stats_text_totals",
    "history": "stats_text_history",
    "model_stats": "stats_text_models",
    "performance": "performance",
    "docs": "native_docs",
}
"""The page's name for each public read -> its operation id."""


def _settings() -> dict[str, object]:
    return {"routes": {name: relative(op) for name, op in READS.items() if op in ROUTES}}


DASHBOARD = Page("native_dashboard", "native_page_asset", "dashboard.html", _settings)


def dashboard() -> Response:
    return Response(DASHBOARD.html(), content_type="text/html; charset=utf-8", headers=HEADERS)


page_asset = asset_view(DASHBOARD.asset, CACHE_CONTROL)


DASHBOARD_VIEWS: dict[str, Callable[..., Response]] = {
    DASHBOARD.page_op: dashboard,
    DASHBOARD.asset_op: page_asset,
}
"""The views of spec/api/native.yaml's dashboard routes (at the server's root)."""
