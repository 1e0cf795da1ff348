"""The request id of the call that submitted a request: handed to its workers in the pop
payload, so a worker's log lines for a job name the id the front's access log gives.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("waiting_prompts", sa.Column("origin_id", sa.String(128), nullable=True))


def downgrade() -> None:
    op.drop_column("waiting_prompts", "origin_id")
