"""conversations remember their front; one conversation per chat on a front

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 01:30:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHERE = "front IS NOT NULL AND subscriber_external_id IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table('conversations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('front', sa.String(length=40), nullable=True))
        batch_op.create_index(
            'uq_conversations_front_chat', ['front', 'subscriber_external_id'], unique=True,
            sqlite_where=sa.text(_WHERE), postgresql_where=sa.text(_WHERE),
        )


def downgrade() -> None:
    with op.batch_alter_table('conversations', schema=None) as batch_op:
        batch_op.drop_index('uq_conversations_front_chat')
        batch_op.drop_column('front')
