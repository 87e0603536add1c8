"""Which desk processes are alive, judged by one clock: the database's.

Each running instance holds a row in `desk_instances` and beats it (sets `beat_at` to the
database's time) three times per `heartbeat`. An instance not heard from for a whole
`heartbeat` is dead: its claims on outbox items and inbound events end, and whichever
instance beats next takes them over (`Outbox.take_over`, `Inbound.take_over`). So nothing a
dead process held waits out a fixed lease, and no instance's own clock decides, only the
database's.

A previous run of this very process on this host (same host name, a process id that no
longer runs) is dead at once: a desk restarted after a crash takes back what it left in
flight straight away instead of a heartbeat later.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy import Float, bindparam, delete, insert, select, update
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from bot.runtime.clock import Clock
from bot.store import prepared
from bot.store.db import Database
from bot.store.models import DeskInstance, new_id
from bot.store.rows import Rows

log = structlog.get_logger(__name__)

BEATS_PER_HEARTBEAT = 3
FORGET_AFTER = timedelta(days=1)  # rows of instances dead this long are deleted


class db_epoch(FunctionElement[float]):  # noqa: N801 - reads as the SQL function it stands for
    """The database's own time, in seconds since the epoch."""

    type = Float()
    inherit_cache = True


@compiles(db_epoch, "sqlite")
def _sqlite_epoch(_element: db_epoch, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "((julianday('now') - 2440587.5) * 86400.0)"


@compiles(db_epoch, "postgresql")
def _postgres_epoch(_element: db_epoch, _compiler: SQLCompiler, **_kw: Any) -> str:
    return "CAST(extract(epoch from clock_timestamp()) AS double precision)"


_INSTANCES = Rows(DeskInstance).table


def alive() -> Any:
    """The ids of the instances alive now (a subquery; bind `dead_after`, in seconds)."""
    return select(_INSTANCES.c.id).where(_INSTANCES.c.beat_at >= db_epoch() - bindparam("dead_after", type_=Float))


_REGISTER = prepared.Prepared(insert(_INSTANCES).values(beat_at=db_epoch()))
_BEAT = prepared.Prepared(update(_INSTANCES).where(_INSTANCES.c.id == bindparam("instance_id")).values(beat_at=db_epoch()))
_LEAVE = prepared.Prepared(delete(_INSTANCES).where(_INSTANCES.c.id == bindparam("instance_id")))
_ON_HOST = prepared.Prepared(select(_INSTANCES.c.id, _INSTANCES.c.pid).where(_INSTANCES.c.host == bindparam("host")))
_FORGET = prepared.Prepared(delete(_INSTANCES).where(_INSTANCES.c.id == bindparam("instance_id")))
_FORGET_LONG_DEAD = prepared.Prepared(
    delete(_INSTANCES).where(_INSTANCES.c.beat_at < db_epoch() - bindparam("forget_after", type_=Float)))


TakeOver = Callable[[], Awaitable[object]]


class Instances:
    """This instance's row and beat, and the takeovers run after each beat."""

    def __init__(self, db: Database, clock: Clock, *, heartbeat: timedelta) -> None:
        if heartbeat <= timedelta(0):
            raise ValueError("the heartbeat must be a positive duration")
        self.db, self.clock, self.heartbeat = db, clock, heartbeat
        self.id = new_id("in")
        self.host = socket.gethostname()[:255]
        self.pid = os.getpid()
        self.take_overs: list[TakeOver] = []  # run after every beat: claims of the dead
        self._task: asyncio.Task[None] | None = None
        self._taking_over: asyncio.Task[None] | None = None
        # When (monotonic) the last beat the database took was sent; None before joining
        self._beat_sent: float | None = None
        self._left = False

    @property
    def dead_after(self) -> float:
        """Seconds of silence after which an instance is dead (the `dead_after` bind)."""
        return self.heartbeat.total_seconds()

    def holds_claims(self) -> bool:
        """Whether this instance's claims still hold as far as it can tell: its last beat
        was sent less than a heartbeat ago, so no other instance can have taken it for dead
        (the database stamps a beat no earlier than it was sent). A desk that has not joined
        yet holds its claims (nothing can take them); one that left holds none."""
        if self._left:
            return False
        return self._beat_sent is None or time.monotonic() - self._beat_sent < self.dead_after

    async def register(self) -> None:
        """Join: write this instance's row, and forget previous runs of this process on
        this host (their claims are then ownerless, so the first takeover takes them)."""
        sent = time.monotonic()
        async with self.db.transaction() as session:
            for instance_id, pid in await prepared.fetch_all(session, _ON_HOST, {"host": self.host}):
                if pid != self.pid and not _running(pid):
                    await prepared.execute(session, _FORGET, {"instance_id": instance_id})
            await prepared.execute(session, _FORGET_LONG_DEAD, {"forget_after": FORGET_AFTER.total_seconds()})
            await prepared.execute(session, _REGISTER, {
                "id": self.id, "host": self.host, "pid": self.pid, "started_at": self.clock.now(),
            })
        self._beat_sent, self._left = sent, False
        log.info("instance_registered", instance_id=self.id, host=self.host, pid=self.pid)

    async def beat(self) -> None:
        """Say this instance is alive (and join again if another took it for dead and
        forgot it: its claims were taken over, its fenced records say so)."""
        sent = time.monotonic()
        async with self.db.transaction() as session:
            beaten = await prepared.execute(session, _BEAT, {"instance_id": self.id})
            if beaten != 1:
                log.warning("instance_was_taken_for_dead", instance_id=self.id)
                await prepared.execute(session, _REGISTER, {
                    "id": self.id, "host": self.host, "pid": self.pid, "started_at": self.clock.now(),
                })
        self._beat_sent = sent

    async def take_over_dead(self) -> None:
        """Run every takeover once (each takes what dead instances held)."""
        for take_over in self.take_overs:
            try:
                await take_over()
            except Exception:
                log.exception("take_over_failed", take_over=getattr(take_over, "__qualname__", repr(take_over)))

    async def start(self) -> None:
        """Register, then beat in the background; each beat is followed by a takeover (the
        first straight away, for what a previous run of this process left in flight)."""
        await self.register()
        self._task = asyncio.create_task(self._run(), name="instance-heartbeat")

    async def _run(self) -> None:
        interval = self.heartbeat.total_seconds() / BEATS_PER_HEARTBEAT
        while True:
            # In a task of its own: a takeover that works a slow event (an agent's turn)
            # must not hold up the beats, or this instance would be taken for dead.
            if self._taking_over is None or self._taking_over.done():
                self._taking_over = asyncio.create_task(self.take_over_dead(), name="instance-take-over")
            await asyncio.sleep(interval)
            try:
                await self.beat()
            except Exception:  # a database hiccup: the next beat tries again
                log.exception("instance_beat_failed", instance_id=self.id)

    async def stop(self) -> None:
        """Leave: stop beating and delete this instance's row, so what it still holds (an
        item claimed as the outbox stopped) is taken over at once, not a heartbeat later."""
        for task in (self._task, self._taking_over):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._task = self._taking_over = None
        self._left = True
        try:
            async with self.db.transaction() as session:
                await prepared.execute(session, _LEAVE, {"instance_id": self.id})
        except Exception:
            log.exception("instance_leave_failed", instance_id=self.id)


def _running(pid: int) -> bool:
    """Whether a process with this id runs on this host (one we may not signal still runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
