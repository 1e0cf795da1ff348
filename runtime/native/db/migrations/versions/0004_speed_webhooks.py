"""Speed samples, extra-slow workers and webhooks: each worker's rolling speed and its samples
(upstream's ``worker_performances``), the worker's extra_slow_worker flag and a request's
webhook URL.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("speed", sa.Float(), nullable=True))
    op.add_column(
        "workers",
        sa.Column(
            "extra_slow_worker", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
    )
    op.add_column("waiting_prompts", sa.Column("webhook", sa.String(1024), nullable=True))
    op.create_table(
        "worker_performances",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("worker_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("performance", sa.Float(), nullable=False),
        sa.Column(
            "created", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(["worker_id"], ["workers.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_worker_performances_worker_id", "worker_performances", ["worker_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_worker_performances_worker_id", table_name="worker_performances")
    op.drop_table("worker_performances")
    op.drop_column("waiting_prompts", "webhook")
    op.drop_column("workers", "extra_slow_worker")
    op.drop_column("workers", "speed")
