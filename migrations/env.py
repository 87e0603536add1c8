"""Alembic environment.

`handoff serve` and `handoff db upgrade` pass an open connection in
`config.attributes["connection"]`; the `alembic` command line (for writing new revisions)
builds an engine from `sqlalchemy.url` or HANDOFF_DATABASE_URL instead.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlmodel import SQLModel

import bot.store.models  # noqa: F401  (registers the tables on SQLModel.metadata)
from bot.store.db import async_url

target_metadata = SQLModel.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite alters tables by copy
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine(url: str) -> None:
    engine = create_async_engine(async_url(url))
    async with engine.begin() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
elif context.is_offline_mode():
    context.configure(url=context.config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    url = context.config.get_main_option("sqlalchemy.url") or os.environ.get("HANDOFF_DATABASE_URL")
    if not url:
        raise SystemExit("set sqlalchemy.url or HANDOFF_DATABASE_URL to run alembic directly")
    asyncio.run(_run_with_own_engine(url))
