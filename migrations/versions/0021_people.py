"""people: the directory of the humans, their provider identities, server-side sessions, personal API tokens and link codes; who (the person) on claims, releases, messages and audit rows

Until now everyone in the inbox was "the owner" behind one token. People are rows now; each
claim, release, reply and audit row can name the person behind it (`person_id`, None where
nobody known acted: existing rows keep their text). Sessions move to the server (only a
token's hash is stored) so disabling a person ends their sessions at once.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02 00:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = '0021'
down_revision: str | None = '0020'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('people',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
    sa.Column('email', sqlmodel.sql.sqltypes.AutoString(length=320), nullable=False),
    sa.Column('email_key', sqlmodel.sql.sqltypes.AutoString(length=320), nullable=False),
    sa.Column('role', sqlmodel.sql.sqltypes.AutoString(length=12), nullable=False),
    sa.Column('timezone', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=12), nullable=False),
    sa.Column('password_hash', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('totp_secret', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('totp_confirmed_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('disabled_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('updated_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('email_key')
    )
    op.create_table('api_tokens',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('person_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
    sa.Column('token_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('role', sqlmodel.sql.sqltypes.AutoString(length=12), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('last_used_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('revoked_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['person_id'], ['people.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_hash')
    )
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_tokens_person_id'), ['person_id'], unique=False)

    op.create_table('link_codes',
    sa.Column('code_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('person_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('expires_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('used_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['person_id'], ['people.id'], ),
    sa.PrimaryKeyConstraint('code_hash')
    )
    with op.batch_alter_table('link_codes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_link_codes_person_id'), ['person_id'], unique=False)

    op.create_table('person_identities',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('person_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('value', sqlmodel.sql.sqltypes.AutoString(length=320), nullable=False),
    sa.Column('verified_via', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['person_id'], ['people.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('kind', 'value', name='uq_person_identity')
    )
    with op.batch_alter_table('person_identities', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_person_identities_person_id'), ['person_id'], unique=False)

    op.create_table('person_sessions',
    sa.Column('token_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('person_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True),
    sa.Column('via', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('last_seen_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('expires_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('revoked_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['person_id'], ['people.id'], ),
    sa.PrimaryKeyConstraint('token_hash')
    )
    with op.batch_alter_table('person_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_person_sessions_expires_at'), ['expires_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_person_sessions_person_id'), ['person_id'], unique=False)

    with op.batch_alter_table('handoff_events', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('person_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))

    with op.batch_alter_table('handoff_sessions', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('claimed_person_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))
        batch_op.add_column(sa.Column('released_person_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))

    with op.batch_alter_table('messages', schema=None, recreate='never') as batch_op:
        batch_op.add_column(sa.Column('person_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))



def downgrade() -> None:
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+, PostgreSQL), as in 0018 and 0020: a batch
    # copy of a table that others' foreign keys name is refused.
    op.execute('ALTER TABLE messages DROP COLUMN person_id')
    op.execute('ALTER TABLE handoff_sessions DROP COLUMN released_person_id')
    op.execute('ALTER TABLE handoff_sessions DROP COLUMN claimed_person_id')
    op.execute('ALTER TABLE handoff_events DROP COLUMN person_id')
    with op.batch_alter_table('person_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_person_sessions_person_id'))
        batch_op.drop_index(batch_op.f('ix_person_sessions_expires_at'))

    op.drop_table('person_sessions')
    with op.batch_alter_table('person_identities', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_person_identities_person_id'))

    op.drop_table('person_identities')
    with op.batch_alter_table('link_codes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_link_codes_person_id'))

    op.drop_table('link_codes')
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_tokens_person_id'))

    op.drop_table('api_tokens')
    op.drop_table('people')
