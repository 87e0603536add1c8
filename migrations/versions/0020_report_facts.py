"""reports: each handoff's time to a person and duration, each conversation's first handoff, and the indexes a report reads them through

The reports (bot/domain/reports.py) used to work out, per handoff of a range, the seconds to
its first human message (one lookup in `messages` per handoff) and between two timestamps,
and to check per conversation whether it had a handoff: on a 30-day range of a long history
that is tens of thousands of lookups a summary. The desk now writes these facts once, where
they happen (the claim or first reply, the release, the request), and the reports read
them from two covering indexes without touching a table row. Existing rows are filled in
here by the rules the reports used before.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02 00:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = '0020'
down_revision: str | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The handoff's reached moment as the reports defined it before: its first human message
# before any claim, else the claim; counted from the activation (the creation if none).
_REACHED = """coalesce(
    (SELECT min(m.created_at) FROM messages m
     WHERE m.handoff_session_id = handoff_sessions.id AND m.role = 'human'
       AND (handoff_sessions.claimed_at IS NULL OR m.created_at < handoff_sessions.claimed_at)),
    handoff_sessions.claimed_at)"""
_STARTED = "coalesce(handoff_sessions.activated_at, handoff_sessions.created_at)"


def _seconds(a: str, b: str) -> str:
    if op.get_bind().dialect.name == 'sqlite':
        return f"round((julianday({b}) - julianday({a})) * 86400.0, 3)"
    return f"CAST(extract(epoch from ({b}) - ({a})) AS double precision)"


def upgrade() -> None:
    with op.batch_alter_table('handoff_sessions', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('time_to_person_seconds', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('duration_seconds', sa.Float(), nullable=True))
    with op.batch_alter_table('conversations', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('first_handoff_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))

    # Straight to a channel, the first human reply is the reached moment the desk marks once
    # (0018 added the mark without filling it in): without it a later reply would be taken
    # for the first and write its own, later, time to a person over the one filled in here.
    op.execute(
        "UPDATE handoff_sessions SET first_human_reply_at = (SELECT min(m.created_at) FROM messages m"
        " WHERE m.handoff_session_id = handoff_sessions.id AND m.role = 'human')"
        " WHERE route_id IS NULL AND first_human_reply_at IS NULL"
    )
    op.execute(f"UPDATE handoff_sessions SET time_to_person_seconds = {_seconds(_STARTED, _REACHED)}")
    op.execute(
        "UPDATE handoff_sessions SET duration_seconds = "
        f"{_seconds('handoff_sessions.activated_at', 'handoff_sessions.released_at')}"
        " WHERE activated_at IS NOT NULL AND released_at IS NOT NULL"
    )
    op.execute(
        "UPDATE conversations SET first_handoff_at = "
        "(SELECT min(h.created_at) FROM handoff_sessions h WHERE h.conversation_id = conversations.id)"
    )

    op.drop_index('ix_handoff_sessions_route_created_at', table_name='handoff_sessions')
    op.drop_index('ix_handoff_sessions_channel_created_at', table_name='handoff_sessions')
    op.drop_index('ix_handoff_sessions_created_at', table_name='handoff_sessions')
    op.drop_index('ix_conversations_created_at', table_name='conversations')
    op.create_index('ix_handoff_sessions_report', 'handoff_sessions',
                    ['created_at', 'channel_id', 'route_id', 'state', 'release_reason', 'outcome',
                     'time_to_person_seconds', 'duration_seconds', 'channel_label'], unique=False)
    op.create_index('ix_handoff_sessions_missing_required', 'handoff_sessions', ['created_at', 'channel_id', 'route_id'],
                    unique=False, sqlite_where=sa.text("missing_required != '[]'"),
                    postgresql_where=sa.text("missing_required::text <> '[]'"))
    op.create_index('ix_conversations_report', 'conversations',
                    ['created_at', 'serves_handoff_session_id', 'first_handoff_at'], unique=False)
    op.create_index(op.f('ix_handoff_satisfaction_asked_at'), 'handoff_satisfaction', ['asked_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_handoff_satisfaction_asked_at'), table_name='handoff_satisfaction')
    op.drop_index('ix_conversations_report', table_name='conversations')
    op.drop_index('ix_handoff_sessions_missing_required', table_name='handoff_sessions')
    op.drop_index('ix_handoff_sessions_report', table_name='handoff_sessions')
    op.create_index('ix_conversations_created_at', 'conversations', ['created_at'], unique=False)
    op.create_index('ix_handoff_sessions_created_at', 'handoff_sessions', ['created_at'], unique=False)
    op.create_index('ix_handoff_sessions_channel_created_at', 'handoff_sessions', ['channel_id', 'created_at'], unique=False)
    op.create_index('ix_handoff_sessions_route_created_at', 'handoff_sessions', ['route_id', 'created_at'], unique=False)
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+, PostgreSQL), as in 0018: a batch copy of
    # a table that others' foreign keys name is refused.
    op.execute('ALTER TABLE conversations DROP COLUMN first_handoff_at')
    op.execute('ALTER TABLE handoff_sessions DROP COLUMN duration_seconds')
    op.execute('ALTER TABLE handoff_sessions DROP COLUMN time_to_person_seconds')
