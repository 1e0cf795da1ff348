"""What a dashboard polling the public figures costs: GET /stats/text/totals,
/stats/text/models, /status/performance and /stats/text/history with ROWS text statistics
(one per ended job, spread over 60 days and MODELS models), read fresh (each read runs its
statements) and kept (the shipped Policy.public_stats_seconds: a read within it runs
none); fresh again once the sweep folded the rows older than a month into the archive (its
steady state: the table holds a month's rows).

Prints figures, never passes or fails on time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.native_stack import native_service
from bench.support.figures import percentile
from runtime.native.queue.sweep import utcnow
from runtime.native.stats.text_stats import fold_old_stats
from runtime.stores.database import transaction

ROWS = 1_000_000
MODELS = 20
READS = 50
ROUTES = ("/stats/text/totals", "/stats/text/models", "/status/performance", "/stats/text/history")


def _fill(sessions: object) -> None:
    with transaction(sessions) as session:  # type: ignore[arg-type]
        session.execute(
            text(
                "INSERT INTO text_gen_stats (finished, model, max_length, delivered)"
                " SELECT now() - (i % 86400 * 60) * interval '1 second',"
                " 'model-' || (i % :models), 80 + i % 400, i % 7 <> 0"
                " FROM generate_series(1, :rows) AS i"
            ),
            {"rows": ROWS, "models": MODELS},
        )
        session.execute(text("ANALYZE text_gen_stats"))


def _p50_ms(client: httpx.Client, path: str, before: object) -> float:
    samples = []
    for _ in range(READS):
        before()  # type: ignore[operator]
        start = time.perf_counter()
        client.get(path).raise_for_status()
        samples.append((time.perf_counter() - start) * 1000)
    return percentile(samples, 50)


def main() -> None:
    with native_service() as service:
        ctx = service.context
        _fill(ctx.sessions)
        with httpx.Client(base_url=f"{service.url}/api/v2", timeout=60) as client:
            for path in ROUTES:
                name = path.strip("/").replace("/", "_")
                fresh = _p50_ms(client, path, ctx.kept.clear)
                kept = _p50_ms(client, path, lambda: None)
                print(f"figure: {name}_fresh_p50 = {fresh:.1f} ms ({ROWS} rows)")
                print(f"figure: {name}_kept_p50 = {kept:.2f} ms")
            with transaction(ctx.sessions) as session:
                fold_old_stats(session, utcnow())
            for path in ROUTES[:2]:
                name = path.strip("/").replace("/", "_")
                folded = _p50_ms(client, path, ctx.kept.clear)
                print(f"figure: {name}_folded_fresh_p50 = {folded:.1f} ms (a month's rows)")


if __name__ == "__main__":
    main()
