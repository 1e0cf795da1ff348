"""Text statistics: one row per text job that ended, as upstream's text_gen_stats, written by a
trigger on processing_gens so every path that ends a job records it once. The rows outlive
the requests (/stats/text/* and /status/performance read them); the sweep folds those older
than a month into text_gen_stats_archive.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

ENDED = "({row}.completed_at IS NOT NULL OR {row}.faulted OR {row}.cancelled)"


def upgrade() -> None:
    op.create_table(
        "text_gen_stats",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column(
            "finished", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("max_length", sa.Integer(), nullable=False),
        sa.Column("delivered", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_text_gen_stats_finished", "text_gen_stats", ["finished"])
    op.create_table(
        "text_gen_stats_archive",
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("model"),
    )
    op.execute(
        """
        CREATE FUNCTION horde_record_text_gen_stat() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO text_gen_stats (model, max_length, delivered)
            SELECT NEW.model, wp.max_length, NEW.completed_at IS NOT NULL AND NOT NEW.faulted
            FROM waiting_prompts AS wp WHERE wp.id = NEW.wp_id;
            RETURN NULL;
        END;
        $$
        """
    )
    op.execute(
        f"""
        CREATE TRIGGER processing_gens_ended AFTER UPDATE ON processing_gens
        FOR EACH ROW WHEN ({ENDED.format(row="NEW")} AND NOT {ENDED.format(row="OLD")})
        EXECUTE FUNCTION horde_record_text_gen_stat()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER processing_gens_ended ON processing_gens")
    op.execute("DROP FUNCTION horde_record_text_gen_stat()")
    op.drop_table("text_gen_stats_archive")
    op.drop_index("ix_text_gen_stats_finished", table_name="text_gen_stats")
    op.drop_table("text_gen_stats")
