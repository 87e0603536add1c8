"""handoff_satisfaction: the question asked after a handoff ended and the subscriber's answer

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01 22:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0019'
down_revision: str | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('handoff_satisfaction',
    sa.Column('handoff_session_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('conversation_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('asked_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('asked_on', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('in_words', sa.Boolean(), nullable=False),
    sa.Column('question_message_id', sa.Integer(), nullable=False),
    sa.Column('answer', sqlmodel.sql.sqltypes.AutoString(length=3), nullable=True),
    sa.Column('comment', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=True),
    sa.Column('answered_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('answered_by', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('answered_via', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True),
    sa.ForeignKeyConstraint(['conversation_id'], ['conversations.id'], ),
    sa.ForeignKeyConstraint(['handoff_session_id'], ['handoff_sessions.id'], ),
    sa.PrimaryKeyConstraint('handoff_session_id')
    )
    with op.batch_alter_table('handoff_satisfaction', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_handoff_satisfaction_conversation_id'), ['conversation_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('handoff_satisfaction', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_handoff_satisfaction_conversation_id'))
    op.drop_table('handoff_satisfaction')
