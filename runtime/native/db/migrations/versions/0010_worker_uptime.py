"""A worker's uptime: the seconds it was online, added at each pop (its check-in) when its
last check-in was within the stale window and it is not in maintenance, as upstream's
Worker.check_in adds them; the public worker views serve it.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "workers", sa.Column("uptime", sa.Float(), server_default=sa.text("0"), nullable=False)
    )


def downgrade() -> None:
    op.drop_column("workers", "uptime")
