"""routes: a handoff's ladder step, its claim, and every channel it notified

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 20:40:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0015'
down_revision: str | None = '0014'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('handoff_sessions', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('route_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('step', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('escalate_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('claimed_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('claimed_by', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True))
        batch_op.add_column(sa.Column('claimed_via', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))
        batch_op.add_column(sa.Column('claimed_recipient_id', sa.Integer(), nullable=True))
        batch_op.create_index('ix_handoff_sessions_state_escalate_at', ['state', 'escalate_at'], unique=False)
    op.create_table('handoff_recipients',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('handoff_session_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('channel_id', sa.Integer(), nullable=False),
    sa.Column('channel_kind', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('channel_label', sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('state', sqlmodel.sql.sqltypes.AutoString(length=12), nullable=False),
    sa.Column('outbox_item_id', sa.Integer(), nullable=True),
    sa.Column('channel_message_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('thread_key', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('thread', sa.JSON(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('notified_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('failed_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['handoff_session_id'], ['handoff_sessions.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('handoff_session_id', 'channel_id', name='uq_handoff_recipients_channel')
    )
    with op.batch_alter_table('handoff_recipients', schema=None) as batch_op:
        batch_op.create_index('ix_handoff_recipients_channel_thread', ['channel_id', 'thread_key'], unique=False)
        batch_op.create_index('ix_handoff_recipients_outbox_item', ['outbox_item_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_handoff_recipients_handoff_session_id'), ['handoff_session_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('handoff_recipients', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_handoff_recipients_handoff_session_id'))
        batch_op.drop_index('ix_handoff_recipients_outbox_item')
        batch_op.drop_index('ix_handoff_recipients_channel_thread')
    op.drop_table('handoff_recipients')
    op.drop_index('ix_handoff_sessions_state_escalate_at', table_name='handoff_sessions')
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+, PostgreSQL): a batch copy of the table
    # would drop it, which the foreign keys of its form links and recipients refuse.
    for column in ('claimed_recipient_id', 'claimed_via', 'claimed_by', 'claimed_at', 'escalate_at', 'step', 'route_id'):
        op.execute(f'ALTER TABLE handoff_sessions DROP COLUMN {column}')
