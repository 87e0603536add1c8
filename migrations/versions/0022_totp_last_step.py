"""totp_last_step: the last TOTP time step a person's code was accepted for, so the same code cannot be used twice

A TOTP code stays valid for its 30-second step and one step either side (clock drift); someone
who sees a code typed could replay it within that window. The step of each accepted code is
stored, and only a code of a later step is accepted afterwards.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-03 00:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0022'
down_revision: str | None = '0021'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('people', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('totp_last_step', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('people', schema=None) as batch_op:
        batch_op.drop_column('totp_last_step')
