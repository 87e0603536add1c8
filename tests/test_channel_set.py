"""Channels that stop working after start: taken out of service, healed by the sweep."""

from __future__ import annotations

from typing import Any

import pytest

from channels.base import ChannelContext, PermanentChannelError, TransientChannelError
from tests.conftest import Harness, StartDesk
from tests.fakes import ScriptedChannel


class Reconnecting(ScriptedChannel):
    """A provider connection (a gateway) the adapter can lose after a good start."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.ctx: ChannelContext | None = None
        self.starts = self.stops = 0

    async def start(self, ctx: ChannelContext) -> None:
        self.ctx, self.starts = ctx, self.starts + 1

    async def stop(self) -> None:
        self.stops += 1


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


def gauge(harness: Harness) -> str:
    return next(line for line in harness.desk.metrics.exposition().decode().splitlines()
                if line.startswith("handoff_channel_available{"))


async def test_a_lost_connection_is_reported_and_restarted_by_the_sweep(start_desk: StartDesk) -> None:
    harness = await start_desk(adapters={1: Reconnecting})
    adapter: Reconnecting = harness.desk.channels.get(1)  # type: ignore[assignment]
    assert adapter.ctx is not None
    assert gauge(harness).endswith(" 1.0")

    adapter.ctx.lost(TransientChannelError("socket closed", hint="the gateway connection dropped"))
    assert not harness.desk.channels.is_available(1)
    assert harness.desk.channels.health()[0]["problem"] == "the gateway connection dropped"
    assert gauge(harness).endswith(" 0.0")
    cid = await harness.conversation()
    names = [t["name"] for t in (await harness.client.get(f"/api/conversations/{cid}/tools")).json()["tools"]]
    assert "handoff_request" not in names

    await harness.desk.channels.retry_unavailable()
    assert (adapter.stops, adapter.starts) == (1, 2)  # stopped cleanly before starting again
    assert harness.desk.channels.is_available(1)
    assert gauge(harness).endswith(" 1.0")


async def test_a_permanent_loss_waits_for_a_fixed_config(start_desk: StartDesk) -> None:
    harness = await start_desk(adapters={1: Reconnecting})
    adapter: Reconnecting = harness.desk.channels.get(1)  # type: ignore[assignment]
    assert adapter.ctx is not None
    adapter.ctx.lost(PermanentChannelError("token revoked"))
    adapter.ctx.lost(TransientChannelError("and then a blip"))  # a second report changes nothing
    await harness.desk.channels.retry_unavailable()
    assert adapter.starts == 1
    assert harness.desk.channels.health()[0]["problem"] == "token revoked"
    await harness.desk.stop()
    assert adapter.stops == 1  # a lost adapter is still stopped on shutdown
