"""approvals: the two-person rule (each person's vote, the first approver) and a route's ladder

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 21:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0016'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('approvals', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('approvals_required', sa.Integer(), server_default='1', nullable=False))
        batch_op.add_column(sa.Column('first_approver', sqlmodel.sql.sqltypes.AutoString(length=250), nullable=True))
        batch_op.add_column(sa.Column('route_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('step', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('escalate_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch_op.create_index('ix_approvals_state_escalate_at', ['state', 'escalate_at'], unique=False)
    op.create_table('approval_votes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('approval_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('voter', sqlmodel.sql.sqltypes.AutoString(length=250), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('via', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('approve', sa.Boolean(), nullable=False),
    sa.Column('at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['approval_id'], ['approvals.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('approval_id', 'voter', name='uq_approval_votes_voter')
    )
    with op.batch_alter_table('approval_votes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_approval_votes_approval_id'), ['approval_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('approval_votes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_approval_votes_approval_id'))
    op.drop_table('approval_votes')
    op.drop_index('ix_approvals_state_escalate_at', table_name='approvals')
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+, PostgreSQL), as 0015 does: no copy of
    # the table, its index on escalate_at dropped above.
    for column in ('escalate_at', 'step', 'route_id', 'first_approver', 'approvals_required'):
        op.execute(f'ALTER TABLE approvals DROP COLUMN {column}')
