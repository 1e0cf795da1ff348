"""The anonymous user's charges by time: the submit of an anonymous request sums the last
hour's (spec/pricing.yaml economy.anonymous_charge_per_hour) without reading its whole
ledger, which grows with every anonymous generation.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

ANONYMOUS_CHARGES = "user_id = 0 AND reason = 'charge'"


def upgrade() -> None:
    op.create_index(
        "ix_kudos_ledger_anonymous_charges",
        "kudos_ledger",
        ["created"],
        postgresql_where=sa.text(ANONYMOUS_CHARGES),
    )


def downgrade() -> None:
    op.drop_index("ix_kudos_ledger_anonymous_charges", table_name="kudos_ledger")
