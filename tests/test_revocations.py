"""Owner-inbox sessions signed out before their cookies expired (bot/domain/revocations.py)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from bot.store.models import RevokedSession
from tests.conftest import Harness


async def test_a_revoked_session_is_known_to_every_reader_and_revoking_twice_changes_nothing(harness: Harness) -> None:
    revocations = harness.desk.revocations
    until = harness.desk.clock.now() + timedelta(hours=12)
    assert not await revocations.is_revoked("s-1")
    await revocations.revoke("s-1", expires_at=until)
    await revocations.revoke("s-1", expires_at=until)  # a second logout, or another instance's
    assert await revocations.is_revoked("s-1")
    assert not await revocations.is_revoked("s-2")
    async with harness.desk.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(RevokedSession)) == 1
