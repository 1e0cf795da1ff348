"""Chat request objects: the offloaded messages' object key, and every object key a request
owns (images and offloaded messages), deleted when the request ends.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JSONB = postgresql.JSONB(astext_type=sa.Text())


def upgrade() -> None:
    op.add_column("waiting_prompts", sa.Column("messages_object", sa.String(200), nullable=True))
    op.add_column(
        "waiting_prompts",
        sa.Column("object_keys", JSONB, server_default=sa.text("'[]'::jsonb"), nullable=False),
    )
    op.create_index(
        "ix_waiting_prompts_objects",
        "waiting_prompts",
        ["id"],
        postgresql_where=sa.text("NOT active AND object_keys <> '[]'::jsonb"),
    )


def downgrade() -> None:
    op.drop_index("ix_waiting_prompts_objects", table_name="waiting_prompts")
    op.drop_column("waiting_prompts", "object_keys")
    op.drop_column("waiting_prompts", "messages_object")
