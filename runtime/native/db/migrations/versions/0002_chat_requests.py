"""Chat requests: the chat columns of waiting_prompts (validated request, messages, full
flattened submission, stored requirements), the structured reply on processing_gens,
the worker's chat declaration, and operation_keys (one request per user and key).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSONB = postgresql.JSONB(astext_type=sa.Text())


def upgrade() -> None:
    op.add_column("waiting_prompts", sa.Column("chat_request", JSONB, nullable=True))
    op.add_column("waiting_prompts", sa.Column("messages", JSONB, nullable=True))
    op.add_column("waiting_prompts", sa.Column("submitted_prompt", sa.Text(), nullable=True))
    op.add_column(
        "waiting_prompts",
        sa.Column(
            "required_features",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
    )
    op.add_column(
        "waiting_prompts",
        sa.Column("required_limits", JSONB, server_default=sa.text("'{}'::jsonb"), nullable=False),
    )
    op.add_column("waiting_prompts", sa.Column("conformance", sa.String(20), nullable=True))
    op.add_column(
        "waiting_prompts", sa.Column("max_tokens_lowered_to", sa.Integer(), nullable=True)
    )
    op.add_column("processing_gens", sa.Column("reply", JSONB, nullable=True))
    op.add_column("processing_gens", sa.Column("reported_usage", JSONB, nullable=True))
    op.add_column("processing_gens", sa.Column("charge_basis", sa.String(40), nullable=True))
    op.add_column("workers", sa.Column("chat_declaration", JSONB, nullable=True))
    op.add_column(
        "workers",
        sa.Column("prompt_jobs", sa.Boolean(), server_default=sa.text("true"), nullable=False),
    )
    op.create_table(
        "operation_keys",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("fingerprint", sa.String(length=128), nullable=False),
        sa.Column("wp_id", sa.UUID(), nullable=False),
        sa.Column("kudos", sa.Numeric(precision=16, scale=2), nullable=False),
        sa.Column(
            "created", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["wp_id"], ["waiting_prompts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user_id", "key", name="uq_operation_keys_user_key"),
    )
    op.create_index(op.f("ix_operation_keys_wp_id"), "operation_keys", ["wp_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_operation_keys_wp_id"), table_name="operation_keys")
    op.drop_table("operation_keys")
    op.drop_column("workers", "prompt_jobs")
    op.drop_column("workers", "chat_declaration")
    for column in ("charge_basis", "reported_usage", "reply"):
        op.drop_column("processing_gens", column)
    for column in (
        "max_tokens_lowered_to",
        "conformance",
        "required_limits",
        "required_features",
        "submitted_prompt",
        "messages",
        "chat_request",
    ):
        op.drop_column("waiting_prompts", column)
