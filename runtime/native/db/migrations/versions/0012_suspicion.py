"""Workers' and users' suspicion counts (upstream's worker_suspicions and user_suspicions,
as counts; spec/pricing.yaml economy.suspicion): a worker reaching the threshold goes into
maintenance, and its owner's count flags it.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TABLES = ("workers", "users")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(
            table,
            sa.Column("suspicion", sa.Integer(), server_default=sa.text("0"), nullable=False),
        )


def downgrade() -> None:
    for table in TABLES:
        op.drop_column(table, "suspicion")
