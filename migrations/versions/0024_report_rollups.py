"""reports from rollups: counts per UTC hour or day and channel/route, kept by triggers, and the indexes a percentile's bucket is read through

A report used to count the handoffs of its range row by row, so its cost grew with the range:
a year of a busy desk took seconds. The counts now live in four small tables
(bot/store/rollups.py) that triggers keep in the transaction writing each fact, keyed by
UTC hour (the handoffs per day) or UTC day (endings, the time histograms, containment); a
report reads whole UTC hours or days from them and only its ragged ends from the rows. The
existing history is counted here; `handoff reports rebuild` counts it again at any time.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-08 00:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

from bot.store.rollups import create_triggers, dialect_named, drop_triggers, rebuild_statements, run_sync

revision: str = '0024'
down_revision: str | None = '0023'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TEXT = sqlmodel.sql.sqltypes.AutoString


def _key(name: str) -> sa.Column[int]:
    return sa.Column(name, sa.Integer(), autoincrement=False, nullable=False)


def upgrade() -> None:
    op.create_table('report_hours', _key('hour'), _key('channel_id'), _key('route'),
                    sa.Column('handoffs', sa.Integer(), nullable=False),
                    sa.Column('channel_label', _TEXT(length=80), nullable=False),
                    sa.PrimaryKeyConstraint('hour', 'channel_id', 'route'))
    op.create_table('report_endings', _key('day'), _key('channel_id'), _key('route'),
                    sa.Column('ending', _TEXT(length=20), nullable=False),
                    sa.Column('outcome', _TEXT(length=20), nullable=False),
                    sa.Column('handoffs', sa.Integer(), nullable=False),
                    sa.Column('missing_required', sa.Integer(), nullable=False),
                    sa.PrimaryKeyConstraint('day', 'channel_id', 'route', 'ending', 'outcome'))
    op.create_table('report_measures', _key('day'), _key('channel_id'), _key('route'), _key('measure'), _key('fine'),
                    sa.Column('handoffs', sa.Integer(), nullable=False),
                    sa.PrimaryKeyConstraint('day', 'channel_id', 'route', 'measure', 'fine'))
    op.create_table('report_conversations', _key('day'),
                    sa.Column('conversations', sa.Integer(), nullable=False),
                    sa.Column('escalated', sa.Integer(), nullable=False),
                    sa.PrimaryKeyConstraint('day'))
    op.create_index('ix_handoff_sessions_time_to_person', 'handoff_sessions',
                    ['time_to_person_seconds', 'created_at', 'channel_id', 'route_id'], unique=False)
    op.create_index('ix_handoff_sessions_duration', 'handoff_sessions',
                    ['duration_seconds', 'created_at', 'channel_id', 'route_id'], unique=False)
    dialect = dialect_named(op.get_bind().dialect.name)
    run_sync(op.get_bind(), [*create_triggers(dialect), *rebuild_statements(dialect)])


def downgrade() -> None:
    run_sync(op.get_bind(), drop_triggers(dialect_named(op.get_bind().dialect.name)))
    op.drop_index('ix_handoff_sessions_duration', table_name='handoff_sessions')
    op.drop_index('ix_handoff_sessions_time_to_person', table_name='handoff_sessions')
    for table in ('report_conversations', 'report_measures', 'report_endings', 'report_hours'):
        op.drop_table(table)
