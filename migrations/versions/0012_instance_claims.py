"""desk instances with heartbeats; outbox and inbound claims owned by an instance

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 18:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'desk_instances',
        sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column('host', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column('pid', sa.Integer(), nullable=False),
        sa.Column('started_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column('beat_at', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    # Rows claimed before this revision have no owner: the first instance to beat takes them over.
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.add_column(sa.Column('claimed_by', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))
    with op.batch_alter_table('inbound_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('claimed_by', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))
        batch_op.create_index('ix_inbound_events_state_owner', ['state', 'claimed_by'])


def downgrade() -> None:
    with op.batch_alter_table('inbound_events', schema=None) as batch_op:
        batch_op.drop_index('ix_inbound_events_state_owner')
        batch_op.drop_column('claimed_by')
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.drop_column('claimed_by')
    op.drop_table('desk_instances')
