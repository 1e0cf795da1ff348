"""Shared keys and kudos transfers: upstream's user_sharedkeys (``shared_keys``, and
``waiting_prompts.sharedkey_id``), its kudos transfer log (``kudos_transfers``, with the
sender's Idempotency-Key), and ``horde_pay`` spending a shared key's limit with each charge
(floored at 0; -1 stays unlimited), in the same statement. The function is 0007's with that
step added (``_with_spend``), so the two stay one text.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_EDITS = (
    (
        "    balance numeric;\n",
        "    balance numeric;\n    sharedkey uuid;\n",
    ),
    (
        "        waiting_prompts.webhook\n    INTO n, faulted, cancelled, webhook\n",
        "        waiting_prompts.webhook, waiting_prompts.sharedkey_id\n"
        "    INTO n, faulted, cancelled, webhook, sharedkey\n",
    ),
    (
        "    -- The request's jobs, counted in a snapshot taken after its lock;",
        "    -- A request sent with a shared key spends the charge from the key's limit too.\n"
        "    IF p_charge <> 0 AND sharedkey IS NOT NULL THEN\n"
        "        UPDATE shared_keys SET\n"
        "            kudos = CASE WHEN shared_keys.kudos = -1 THEN shared_keys.kudos\n"
        "                         ELSE greatest(shared_keys.kudos - p_charge, 0) END,\n"
        "            utilized = shared_keys.utilized + p_charge\n"
        "        WHERE shared_keys.id = sharedkey;\n"
        "    END IF;\n\n"
        "    -- The request's jobs, counted in a snapshot taken after its lock;",
    ),
)


def _previous_pay() -> str:
    """0007's ``horde_pay``, as that revision wrote it."""
    path = Path(__file__).with_name("0007_pay_function.py")
    spec = importlib.util.spec_from_file_location("horde_migration_0007", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pay: str = module.PAY
    return pay


def _with_spend(pay: str) -> str:
    for old, new in _EDITS:
        assert pay.count(old) == 1, old
        pay = pay.replace(old, new)
    return pay


def upgrade() -> None:
    op.create_table(
        "shared_keys",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("kudos", sa.Numeric(16, 2), nullable=False),
        sa.Column("utilized", sa.Numeric(16, 2), server_default=sa.text("0"), nullable=False),
        sa.Column("expiry", sa.DateTime(timezone=True), nullable=True),
        sa.Column("max_image_pixels", sa.Integer(), nullable=False),
        sa.Column("max_image_steps", sa.Integer(), nullable=False),
        sa.Column("max_text_tokens", sa.Integer(), nullable=False),
        sa.Column(
            "created", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_shared_keys_user_id", "shared_keys", ["user_id"])
    op.add_column(
        "waiting_prompts",
        sa.Column("sharedkey_id", postgresql.UUID(as_uuid=True), nullable=True),
    )
    op.create_foreign_key(
        "waiting_prompts_sharedkey_id_fkey",
        "waiting_prompts",
        "shared_keys",
        ["sharedkey_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.create_index(
        "ix_waiting_prompts_sharedkey",
        "waiting_prompts",
        ["sharedkey_id"],
        postgresql_where=sa.text("sharedkey_id IS NOT NULL"),
    )
    op.create_table(
        "kudos_transfers",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("dest_id", sa.Integer(), nullable=False),
        sa.Column("sharedkey_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("amount", sa.Numeric(16, 2), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=True),
        sa.Column(
            "created", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(["source_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["dest_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("source_id", "idempotency_key", name="uq_kudos_transfers_source_key"),
    )
    op.create_index("ix_kudos_transfers_dest_id", "kudos_transfers", ["dest_id"])
    op.execute(_with_spend(_previous_pay()))


def downgrade() -> None:
    op.execute(_previous_pay())
    op.drop_index("ix_kudos_transfers_dest_id", table_name="kudos_transfers")
    op.drop_table("kudos_transfers")
    op.drop_index("ix_waiting_prompts_sharedkey", table_name="waiting_prompts")
    op.drop_constraint("waiting_prompts_sharedkey_id_fkey", "waiting_prompts", type_="foreignkey")
    op.drop_column("waiting_prompts", "sharedkey_id")
    op.drop_index("ix_shared_keys_user_id", table_name="shared_keys")
    op.drop_table("shared_keys")
