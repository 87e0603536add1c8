"""handoffs: when a person first replied to a handoff straight to a channel (time to a person)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01 22:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0018'
down_revision: str | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('handoff_sessions', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('first_human_reply_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))


def downgrade() -> None:
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+, PostgreSQL): a batch copy of the table
    # would drop it, which the foreign keys of its form links and recipients refuse.
    op.execute('ALTER TABLE handoff_sessions DROP COLUMN first_human_reply_at')
