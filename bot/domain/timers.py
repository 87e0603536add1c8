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

A route's ladder deadline (`escalate_at`, while nobody has claimed the handoff) is timed the
same way, in jobs of its own: the sweep escalates what is overdue and arms the near ones, and
the escalation is a compare-and-set on the step and the deadline (`Handoffs.escalate_if_due`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import structlog
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.domain.handoffs import EscalationDue, HandoffActivated, HandoffClaimed, HandoffReleased, Handoffs
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
        """Schedule an exact job when the idle deadline is near; a later sweep handles far ones."""
        self._arm(self._run_fire, f"idle:{sid}", sid, deadline)

    def disarm(self, sid: str) -> None:
        self._disarm(f"idle:{sid}")

    def arm_ladder(self, sid: str, deadline: datetime) -> None:
        """The ladder's next step, timed like an idle deadline (near ones only)."""
        self._arm(self._run_escalate, f"ladder:{sid}", sid, deadline)

    def _arm(self, job: Callable[[str], Awaitable[None]], job_id: str, sid: str, deadline: datetime) -> None:
        if not self.scheduler.running or deadline > self._horizon():
            return
        run_at = datetime.now(UTC) + (deadline - self.clock.now())
        self.scheduler.add_job(job, "date", run_date=run_at, args=[sid], id=job_id, replace_existing=True)

    def _disarm(self, job_id: str) -> None:
        try:
            self.scheduler.remove_job(job_id)
        except JobLookupError:
            pass

    def on_activated(self, activated: HandoffActivated) -> None:
        if activated.handoff.idle_deadline is not None:
            self.arm(activated.handoff.id, activated.handoff.idle_deadline)
        if activated.handoff.escalate_at is not None:
            self.arm_ladder(activated.handoff.id, activated.handoff.escalate_at)

    def on_escalation_due(self, due: EscalationDue) -> None:
        self.arm_ladder(due.handoff_session_id, due.at)

    def on_claimed(self, claimed: HandoffClaimed) -> None:
        if self.scheduler.running:
            self._disarm(f"ladder:{claimed.handoff.id}")
        if claimed.handoff.idle_deadline is not None:
            self.arm(claimed.handoff.id, claimed.handoff.idle_deadline)

    def on_released(self, released: HandoffReleased) -> None:
        if self.scheduler.running:
            self.disarm(released.handoff.id)
            self._disarm(f"ladder:{released.handoff.id}")

    async def _run_escalate(self, sid: str) -> None:
        await self._tracked(self._escalate(sid))

    async def _escalate(self, sid: str) -> None:
        handoff = await self.handoffs.escalate_if_due(sid)
        if handoff is not None and handoff.state == HandoffState.ACTIVE and handoff.claimed_at is None and handoff.escalate_at:
            self.arm_ladder(sid, handoff.escalate_at)  # not due yet by this clock, or a new step's deadline

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
        await self._sweep_ladders()
        for task in self.also_on_sweep:
            try:
                await task()
            except Exception:
                log.exception("sweep_task_failed", task=getattr(task, "__qualname__", str(task)))
        return released

    async def _sweep_ladders(self) -> None:
        """Escalate the ladders whose deadline passed (missed while down, or an instance died)
        and arm jobs for the near ones."""
        try:
            due = await self.handoffs.escalations_due(self._horizon())
        except Exception:
            log.exception("ladder_sweep_failed")
            return
        now = self.clock.now()
        for sid, deadline in due:
            if deadline > now:
                self.arm_ladder(sid, deadline)
                continue
            try:
                await self._escalate(sid)
            except Exception:
                log.exception("ladder_escalation_failed", handoff_session_id=sid)
