"""The running jobs by request: every submit counts its user's running jobs
(``requests.rows.queued_jobs``), and without this index Postgres scanned every job kept
until its request expires (1.8 ms at 30,000 of them, growing with the horde's traffic).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

UNFINISHED = "generation IS NULL AND faulted IS false AND cancelled IS false"
"""As ``runtime.native.db.tables.UNFINISHED`` says it today (a revision keeps its own text)."""


def upgrade() -> None:
    op.create_index(
        "ix_processing_gens_unfinished",
        "processing_gens",
        ["wp_id"],
        postgresql_where=sa.text(UNFINISHED),
    )


def downgrade() -> None:
    op.drop_index("ix_processing_gens_unfinished", table_name="processing_gens")
