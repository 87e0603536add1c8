"""reach people: contact methods, availability, on-call overrides, and offers to people on a route's recipients

A route's step may now offer a handoff to a person directly (on their own contact methods), to
a team (everyone at once, or one at a time with a capacity) and to whoever is on call. The
recipients table records each offer: to whom, on which contact method, in which turn of its
step, and how it ended. One brief per room or per person's contact method: the unique key
moves from the channel to a lane key ("c:<channel id>" for a room, "p:<person>:<channel>").

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04 00:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = '0023'
down_revision: str | None = '0022'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TEXT = sqlmodel.sql.sqltypes.AutoString
_AT = sqlmodel.sql.sqltypes.UTCDateTime


def upgrade() -> None:
    with op.batch_alter_table('people', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('contact_order', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('working_hours', _TEXT(length=40), nullable=True))
        batch_op.add_column(sa.Column('max_concurrent', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('away_since', _AT(), nullable=True))
        batch_op.add_column(sa.Column('away_until', _AT(), nullable=True))
        batch_op.add_column(sa.Column('away_note', _TEXT(length=200), nullable=True))
    with op.batch_alter_table('handoff_sessions', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('turn', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('offer_until', _AT(), nullable=True))
    # A handoff on a route waiting now: its step ends when its ladder deadline does
    op.execute("UPDATE handoff_sessions SET offer_until = escalate_at, turn = 0 WHERE escalate_at IS NOT NULL")
    op.create_index('ix_handoff_sessions_claimed_person_state', 'handoff_sessions', ['claimed_person_id', 'state'])

    with op.batch_alter_table('handoff_recipients', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('lane_key', _TEXT(length=100), nullable=True))
        batch_op.add_column(sa.Column('turn', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('person_id', _TEXT(length=40), nullable=True))
        batch_op.add_column(sa.Column('target', _TEXT(length=100), nullable=True))
        batch_op.add_column(sa.Column('address', _TEXT(length=320), nullable=True))
        batch_op.add_column(sa.Column('contact_index', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('next_contact_at', _AT(), nullable=True))
        batch_op.add_column(sa.Column('result', _TEXT(length=12), nullable=True))
        batch_op.add_column(sa.Column('ended_at', _AT(), nullable=True))
    op.execute("UPDATE handoff_recipients SET lane_key = 'c:' || CAST(channel_id AS VARCHAR)")
    # Rebuilt (SQLite cannot alter a constraint in place): lane_key NOT NULL, the new unique
    # key in place of the per-channel one, the person's foreign key.
    with op.batch_alter_table('handoff_recipients', schema=None) as batch_op:
        batch_op.alter_column('lane_key', existing_type=_TEXT(length=100), nullable=False)
        batch_op.drop_constraint('uq_handoff_recipients_channel', type_='unique')
        batch_op.create_unique_constraint('uq_handoff_recipients_lane', ['handoff_session_id', 'lane_key'])
        batch_op.create_foreign_key('fk_handoff_recipients_person', 'people', ['person_id'], ['id'])
        batch_op.create_index('ix_handoff_recipients_person_created', ['person_id', 'created_at'], unique=False)
        batch_op.create_index('ix_handoff_recipients_next_contact', ['next_contact_at'], unique=False)

    op.create_table('oncall_overrides',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('schedule_id', _TEXT(length=40), nullable=False),
    sa.Column('person_id', _TEXT(length=40), nullable=False),
    sa.Column('covers_person_id', _TEXT(length=40), nullable=True),
    sa.Column('starts_at', _AT(), nullable=False),
    sa.Column('ends_at', _AT(), nullable=False),
    sa.Column('note', _TEXT(length=200), nullable=True),
    sa.Column('created_by', _TEXT(length=200), nullable=False),
    sa.Column('created_at', _AT(), nullable=False),
    sa.Column('removed_at', _AT(), nullable=True),
    sa.ForeignKeyConstraint(['person_id'], ['people.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_oncall_overrides_schedule_ends', 'oncall_overrides', ['schedule_id', 'ends_at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_oncall_overrides_schedule_ends', table_name='oncall_overrides')
    op.drop_table('oncall_overrides')
    with op.batch_alter_table('handoff_recipients', schema=None) as batch_op:
        batch_op.drop_index('ix_handoff_recipients_next_contact')
        batch_op.drop_index('ix_handoff_recipients_person_created')
        batch_op.drop_constraint('fk_handoff_recipients_person', type_='foreignkey')
        batch_op.drop_constraint('uq_handoff_recipients_lane', type_='unique')
        batch_op.create_unique_constraint('uq_handoff_recipients_channel', ['handoff_session_id', 'channel_id'])
        for column in ('ended_at', 'result', 'next_contact_at', 'contact_index', 'address', 'target', 'person_id',
                       'turn', 'lane_key'):
            batch_op.drop_column(column)
    op.drop_index('ix_handoff_sessions_claimed_person_state', table_name='handoff_sessions')
    with op.batch_alter_table('handoff_sessions', schema=None, recreate='never') as batch_op:
        batch_op.drop_column('offer_until')
        batch_op.drop_column('turn')
    with op.batch_alter_table('people', schema=None, recreate='never') as batch_op:
        for column in ('away_note', 'away_until', 'away_since', 'max_concurrent', 'working_hours', 'contact_order'):
            batch_op.drop_column(column)
