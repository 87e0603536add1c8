"""shared-line focus

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 23:10:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('handoff_sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('focused_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
    op.execute("UPDATE handoff_sessions SET focused_at = activated_at WHERE focused_at IS NULL")


def downgrade() -> None:
    with op.batch_alter_table('handoff_sessions', schema=None) as batch_op:
        batch_op.drop_column('focused_at')
