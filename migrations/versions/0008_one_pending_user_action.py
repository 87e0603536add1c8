"""one pending user action per conversation

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 00:10:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('user_actions', schema=None) as batch_op:
        batch_op.create_index(
            'uq_user_actions_one_pending_per_conversation', ['conversation_id'], unique=True,
            sqlite_where=sa.text("state = 'pending'"), postgresql_where=sa.text("state = 'pending'"),
        )


def downgrade() -> None:
    with op.batch_alter_table('user_actions', schema=None) as batch_op:
        batch_op.drop_index('uq_user_actions_one_pending_per_conversation')
