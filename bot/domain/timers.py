"""The idle timer: a handoff nobody touches for `handoff.idle_timeout` is released.

The deadline lives in the session row (`idle_deadline`), pushed out by every relayed
message in the same transaction that stores it, so it survives restarts and is shared by
every instance. APScheduler only does the timing:

- a periodic sweep releases whatever is overdue (deadlines missed while the server was
  down, or owned by an instance that died) and schedules exact jobs for the deadlines that
  fall before the next sweep;
- each exact job re-reads the deadline when it fires: if activity moved it, the job is
  re-armed (or left to a later sweep), otherwise it releases.

The release itself is the conditional update in `Handoffs.release` (state active AND
deadline passed), so a double fire, two instances, or a message arriving at the last
moment can never produce two resume messages. Jobs only exist for near deadlines, so
100,000 idle handoffs cost a database index, not 100,000 scheduler jobs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import structlog
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.domain.handoffs import HandoffActivated, HandoffReleased, Handoffs
from bot.runtime.clock import Clock
from bot.store.vocabulary import HandoffState

log = structlog.get_logger(__name__)


class IdleTimers:
    def __init__(self, handoffs: Handoffs, clock: Clock, *, sweep_interval: timedelta) -> None:
        self.handoffs, self.clock, self.sweep_interval = handoffs, clock, sweep_interval
        # Missed runs must still run (the default grace of 1 s silently drops a late job).
        self.scheduler = AsyncIOScheduler(
            job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 1}, timezone=UTC
        )
        self._running: set[asyncio.Task[object]] = set()
        self._stopping = False
        self.also_on_sweep: list[Callable[[], Awaitable[object]]] = []

    def start(self) -> None:
        self._stopping = False
        self.scheduler.start()
        self.scheduler.add_job(
            self._run_sweep, "interval", seconds=self.sweep_interval.total_seconds(), id="idle-sweep",
            next_run_time=datetime.now(UTC), replace_existing=True,
        )

    async def stop(self) -> None:
        """Stop scheduling, then cancel the jobs in flight and wait them out: a job still
        holding a database connection would outlive the engine.

        Each job is cancelled exactly once, here. AsyncIOScheduler's shutdown runs a loop
        pass later and cancels the jobs it still holds itself; that second CancelledError
        lands in the cleanup the first one started (SQLAlchemy closing the interrupted
        connection under a shield), orphans the close, and the orphan hangs the event loop's
        final cancel (a threaded driver such as aiosqlite then waits for a worker thread that has
        already exited; any driver leaves the close half done). So
        the scheduler is paused (at once, unlike shutdown), and shut down once no job runs."""
        self._stopping = True
        if self.scheduler.running:
            self.scheduler.pause()
        running = [task for task in self._running if not task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    async def _tracked(self, work: Awaitable[object]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            await work
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            # Cut short by stop(): nothing is lost (the next sweep redoes it), and a job that
            # ends in CancelledError is logged by the scheduler as failed, with a traceback.
            log.info("timer_job_stopped")
        finally:
            self._running.discard(task)

    async def _run_sweep(self) -> None:
        await self._tracked(self.sweep())

    # ------------------------------------------------------------------ jobs

    def _horizon(self) -> datetime:
        return self.clock.now() + self.sweep_interval

    def arm(self, sid: str, deadline: datetime) -> None:
        """Schedule an exact job when the deadline is near; a later sweep handles far ones."""
        if not self.scheduler.running or deadline > self._horizon():
            return
        run_at = datetime.now(UTC) + (deadline - self.clock.now())
        self.scheduler.add_job(self._run_fire, "date", run_date=run_at, args=[sid], id=f"idle:{sid}", replace_existing=True)

    def disarm(self, sid: str) -> None:
        try:
            self.scheduler.remove_job(f"idle:{sid}")
        except JobLookupError:
            pass

    def on_activated(self, activated: HandoffActivated) -> None:
        if activated.handoff.idle_deadline is not None:
            self.arm(activated.handoff.id, activated.handoff.idle_deadline)

    def on_released(self, released: HandoffReleased) -> None:
        if self.scheduler.running:
            self.disarm(released.handoff.id)

    async def _run_fire(self, sid: str) -> None:
        await self._tracked(self._fire(sid))

    async def _fire(self, sid: str) -> None:
        result = await self.handoffs.release_if_idle(sid)
        if not result.released and result.session.state == HandoffState.ACTIVE and result.session.idle_deadline:
            self.arm(sid, result.session.idle_deadline)  # activity moved the deadline

    async def sweep(self) -> int:
        """Release overdue handoffs, activate sent and fail stuck dispatches, arm jobs for near deadlines, and
        run the other periodic recoveries in `also_on_sweep`. One failing step (or session)
        is logged and skipped, never allowed to stall the rest."""
        released = 0
        try:
            await self.handoffs.recover_dispatches()
            overdue = await self.handoffs.overdue()
        except Exception:
            log.exception("idle_sweep_failed")
            overdue = []
        for sid in overdue:
            try:
                released += (await self.handoffs.release_if_idle(sid)).released
            except Exception:
                log.exception("idle_release_failed", handoff_session_id=sid)
        try:
            for sid, deadline in await self.handoffs.due_before(self._horizon()):
                self.arm(sid, deadline)
        except Exception:
            log.exception("idle_arm_failed")
        for task in self.also_on_sweep:
            try:
                await task()
            except Exception:
                log.exception("sweep_task_failed", task=getattr(task, "__qualname__", str(task)))
        return released
