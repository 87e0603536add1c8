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

# Who handled each stored handoff, by the rule the reports applied row by row before: the
# claim's person, else the first human reply's, else a person's release's ('' for an act
# linked to nobody; NULL when nobody acted)
_HANDLED_BY = """UPDATE handoff_sessions SET handled_by = CASE
    WHEN claimed_at IS NOT NULL THEN coalesce(claimed_person_id, '')
    WHEN first_human_reply_at IS NOT NULL THEN coalesce((
        SELECT m.person_id FROM messages m WHERE m.handoff_session_id = handoff_sessions.id AND m.role = 'human'
        AND m.created_at = handoff_sessions.first_human_reply_at ORDER BY m.id LIMIT 1), '')
    WHEN release_reason IN ('form', 'release_token', 'owner') THEN coalesce(released_person_id, '')
END"""


def _key(name: str) -> sa.Column[int]:
    return sa.Column(name, sa.Integer(), autoincrement=False, nullable=False)


def upgrade() -> None:
    op.create_table('report_hours', _key('hour'), _key('channel_id'), _key('route'),
                    sa.Column('handoffs', sa.Integer(), nullable=False),
                    sa.Column('channel_label', _TEXT(length=80), nullable=False),
                    _key('shard'), sa.PrimaryKeyConstraint('hour', 'channel_id', 'route', 'shard'))
    op.create_table('report_endings', _key('day'), _key('channel_id'), _key('route'),
                    sa.Column('ending', _TEXT(length=20), nullable=False),
                    sa.Column('outcome', _TEXT(length=20), nullable=False),
                    sa.Column('handoffs', sa.Integer(), nullable=False),
                    sa.Column('missing_required', sa.Integer(), nullable=False),
                    _key('shard'), sa.PrimaryKeyConstraint('day', 'channel_id', 'route', 'ending', 'outcome', 'shard'))
    op.create_table('report_measures', _key('measure'), _key('day'), _key('channel_id'), _key('route'), _key('fine'),
                    sa.Column('handoffs', sa.Integer(), nullable=False),
                    _key('shard'), sa.PrimaryKeyConstraint('measure', 'day', 'channel_id', 'route', 'fine', 'shard'))
    op.create_table('report_people', _key('day'),
                    sa.Column('person', _TEXT(length=40), nullable=False), _key('fine'),
                    sa.Column('handoffs', sa.Integer(), nullable=False),
                    _key('shard'), sa.PrimaryKeyConstraint('day', 'person', 'fine', 'shard'))
    op.create_table('report_people_through', _key('channel_id'), _key('route'), _key('day'),
                    sa.Column('person', _TEXT(length=40), nullable=False), _key('fine'),
                    sa.Column('handoffs', sa.Integer(), nullable=False),
                    _key('shard'), sa.PrimaryKeyConstraint('channel_id', 'route', 'day', 'person', 'fine', 'shard'))
    op.create_table('report_conversations', _key('day'),
                    sa.Column('conversations', sa.Integer(), nullable=False),
                    sa.Column('escalated', sa.Integer(), nullable=False),
                    _key('shard'), sa.PrimaryKeyConstraint('day', 'shard'))
    with op.batch_alter_table('handoff_sessions', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('handled_by', _TEXT(length=40), nullable=True))
    op.execute(_HANDLED_BY)
    op.create_index('ix_handoff_sessions_handled_by', 'handoff_sessions',
                    ['handled_by', 'time_to_person_seconds', 'created_at', 'channel_id', 'route_id'], unique=False)
    op.create_index('ix_handoff_sessions_time_to_person', 'handoff_sessions',
                    ['time_to_person_seconds', 'created_at', 'channel_id', 'route_id'], unique=False)
    op.create_index('ix_handoff_sessions_duration', 'handoff_sessions',
                    ['duration_seconds', 'created_at', 'channel_id', 'route_id'], unique=False)
    dialect = dialect_named(op.get_bind().dialect.name)
    run_sync(op.get_bind(), [*create_triggers(dialect), *rebuild_statements(dialect)])


def downgrade() -> None:
    run_sync(op.get_bind(), drop_triggers(dialect_named(op.get_bind().dialect.name)))
    op.drop_index('ix_handoff_sessions_handled_by', table_name='handoff_sessions')
    with op.batch_alter_table('handoff_sessions', schema=None, recreate='never') as batch_op:
        batch_op.drop_column('handled_by')
    op.drop_index('ix_handoff_sessions_duration', table_name='handoff_sessions')
    op.drop_index('ix_handoff_sessions_time_to_person', table_name='handoff_sessions')
    for table in ('report_conversations', 'report_people_through', 'report_people', 'report_measures', 'report_endings',
                  'report_hours'):
        op.drop_table(table)
