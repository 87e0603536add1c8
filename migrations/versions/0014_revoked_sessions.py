"""owner-inbox sessions signed out before their cookie expired

Revision ID: 0014
Revises: 0012
Create Date: 2026-12-01 17:40:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0014'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('revoked_sessions',
    sa.Column('session_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('revoked_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('expires_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('session_id')
    )
    with op.batch_alter_table('revoked_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_revoked_sessions_expires_at'), ['expires_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('revoked_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_revoked_sessions_expires_at'))
    op.drop_table('revoked_sessions')
