"""The alembic migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import bot.store.models  # noqa: F401
from bot.store.db import Database


async def test_migrations_match_the_models(database_url: str) -> None:
    db = Database(database_url)
    try:
        await db.upgrade()
        await db.upgrade()  # a second run is a no-op (serve upgrades on every start)
        async with db.engine.connect() as conn:
            diff = await conn.run_sync(
                lambda sync: compare_metadata(MigrationContext.configure(sync, opts={"compare_type": True}), SQLModel.metadata)
            )
    finally:
        await db.dispose()
    assert diff == []
