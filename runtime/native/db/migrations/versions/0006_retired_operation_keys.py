"""An operation key may be retired with no request: a cancel by operation key that finds no
request under the key claims it with wp_id NULL, so a submit still on its way (its
responses lost, the front already gave up on it) queues and charges nothing.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("operation_keys", "wp_id", existing_type=sa.UUID(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM operation_keys WHERE wp_id IS NULL")
    op.alter_column("operation_keys", "wp_id", existing_type=sa.UUID(), nullable=False)
