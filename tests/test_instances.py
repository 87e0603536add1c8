"""bot/store/instances.py on a real database: rows that beat by the database's clock, a
previous run of this process forgotten at start, a stopped instance gone at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from sqlalchemy import delete, select, update
from sqlmodel import col

from bot.runtime.clock import Clock
from bot.store import prepared
from bot.store.db import Database
from bot.store.instances import Instances, alive, db_epoch
from bot.store.models import DeskInstance

HEARTBEAT = 3.0




def instances(db: Database) -> Instances:
    return Instances(db, Clock(), heartbeat=timedelta(seconds=HEARTBEAT))


async def rows(db: Database) -> dict[str, DeskInstance]:
    async with db.read() as session:
        return {row.id: row for row in await session.scalars(select(DeskInstance))}


async def alive_now(db: Database) -> set[str]:
    statement = prepared.Prepared(alive())
    return {instance_id for (instance_id,) in await db.fetch_all(statement, {"dead_after": HEARTBEAT})}


async def test_the_database_clock_is_the_epoch_in_seconds(db: Database) -> None:
    [(now,)] = await db.fetch_all(prepared.Prepared(select(db_epoch())))
    assert abs(float(now) - time.time()) < 2


async def test_a_registered_instance_is_alive_until_its_beat_is_a_heartbeat_old(db: Database) -> None:
    one, two = instances(db), instances(db)
    await one.register()
    await two.register()
    assert await alive_now(db) == {one.id, two.id}
    async with db.transaction() as session:
        await session.execute(update(DeskInstance).where(col(DeskInstance.id) == two.id)
                              .values(beat_at=DeskInstance.beat_at - HEARTBEAT - 1))
    assert await alive_now(db) == {one.id}
    await two.beat()
    assert await alive_now(db) == {one.id, two.id}


async def test_an_instance_taken_for_dead_and_forgotten_joins_again_at_its_next_beat(db: Database) -> None:
    one = instances(db)
    await one.register()
    async with db.transaction() as session:
        await session.execute(delete(DeskInstance))
    await one.beat()
    assert set(await rows(db)) == {one.id}


async def test_a_previous_run_of_this_process_on_this_host_is_forgotten_at_start(db: Database) -> None:
    """Its pid no longer runs: it died, so what it held is taken over at once."""
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    gone_pid = int(finished.stdout)
    previous, elsewhere, running = instances(db), instances(db), instances(db)
    previous.pid = gone_pid
    elsewhere.pid, elsewhere.host = gone_pid, "another-host"  # its pid means nothing here
    running.pid = os.getppid()  # a process that still runs
    for instance in (previous, elsewhere, running):
        await instance.register()
    restarted = instances(db)
    await restarted.register()
    assert set(await rows(db)) == {elsewhere.id, running.id, restarted.id}


async def test_a_stopped_instance_deletes_its_row(db: Database) -> None:
    one, two = instances(db), instances(db)
    await one.start()
    await two.register()
    await one.stop()
    assert set(await rows(db)) == {two.id}


def test_a_heartbeat_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Instances(Database("sqlite+aiosqlite:///:memory:"), Clock(), heartbeat=timedelta(0))
