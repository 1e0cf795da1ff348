"""Public status reads: the active models, the text statistics, the load, the modes and
the news, in upstream's shapes, and our per-minute history of the statistics
(runtime.native.stats computes them)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from flask import Response, jsonify, request

from runtime.native.api.body import checked_headers
from runtime.native.api.context import native
from runtime.native.api.validation import path_value, query_values
from runtime.native.queue.sweep import utcnow
from runtime.native.stats.load import horde_load
from runtime.native.stats.models import active_models, filtered, one_model
from runtime.native.stats.text_stats import text_history, text_models, text_totals
from runtime.stores.database import transaction

ALL_STATES = "all"


def models() -> Response:
    query = query_values("models", request.args)
    counts = (query.get("min_count"), query.get("max_count"))
    ctx = native()
    with transaction(ctx.sessions) as session:
        found = active_models(session, ctx.policy, utcnow())
    state = query.get("model_state", ALL_STATES)
    return jsonify(filtered(found, query.get("type"), counts, state))


def model(model_name: str) -> Response:
    ctx = native()
    with transaction(ctx.sessions) as session:
        name = path_value("model", "model_name", unquote(model_name))
        return jsonify(one_model(session, ctx.policy, utcnow(), name))


def _kept(name: str, read: Any) -> Response:
    ctx = native()

    def fresh() -> Any:
        with transaction(ctx.sessions) as session:
            return read(session)

    return jsonify(ctx.keep(name).get(fresh))


def stats_text_totals() -> Response:
    checked_headers("stats_text_totals")
    return _kept("stats_text_totals", lambda session: text_totals(session.connection()))


def stats_text_history() -> Response:
    checked_headers("stats_text_history")
    return _kept("stats_text_history", lambda session: text_history(session.connection()))


def stats_text_models() -> Response:
    checked_headers("stats_text_models")
    return _kept("stats_text_models", lambda session: text_models(session.connection()))


def performance() -> Response:
    checked_headers("performance")
    ctx = native()
    return _kept("performance", lambda session: horde_load(session, ctx.policy, utcnow()))


def modes() -> Response:
    checked_headers("modes")
    return jsonify(maintenance_mode=False, invite_only_mode=False)


def news() -> Response:
    checked_headers("news")
    return jsonify([])
