"""reports: indexes for the aggregates of bot/domain/reports.py

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01 22:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import op


revision: str = '0017'
down_revision: str | None = '0016'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index('ix_handoff_sessions_created_at', 'handoff_sessions', ['created_at'], unique=False)
    op.create_index('ix_handoff_sessions_channel_created_at', 'handoff_sessions', ['channel_id', 'created_at'], unique=False)
    op.create_index('ix_handoff_sessions_route_created_at', 'handoff_sessions', ['route_id', 'created_at'], unique=False)
    op.create_index('ix_conversations_created_at', 'conversations', ['created_at'], unique=False)
    op.create_index('ix_messages_handoff_role_created_at', 'messages',
                    ['handoff_session_id', 'role', 'created_at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_messages_handoff_role_created_at', table_name='messages')
    op.drop_index('ix_conversations_created_at', table_name='conversations')
    op.drop_index('ix_handoff_sessions_route_created_at', table_name='handoff_sessions')
    op.drop_index('ix_handoff_sessions_channel_created_at', table_name='handoff_sessions')
    op.drop_index('ix_handoff_sessions_created_at', table_name='handoff_sessions')
