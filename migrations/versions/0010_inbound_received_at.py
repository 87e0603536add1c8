"""index inbound events by arrival, for pruning

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30 02:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import op


revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('inbound_events', schema=None) as batch_op:
        batch_op.create_index('ix_inbound_events_received_at', ['received_at'])


def downgrade() -> None:
    with op.batch_alter_table('inbound_events', schema=None) as batch_op:
        batch_op.drop_index('ix_inbound_events_received_at')
