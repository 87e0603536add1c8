"""What a handoff's service answers and announces: the results its callers read, the
refusals it raises, and the signals its transitions record.

Results and refusals carry facts, never sentences: `bot/tools/handoff.py` words them for the
model, the pages and the API for people. A refusal of `handoff_request` says whether
anything was stored (`DispatchFailed`: the handoff was, and is failed; the others: nothing).
A signal is recorded in the transaction that changed the handoff and heard only after its
commit (`bot/runtime/signals.py`), so nobody reacts to a change that was rolled back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.errors import Conflict, DeskError
from bot.store.models import HandoffSession

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ReleaseResult:
    """How a release went: `released` when this call ended the bypass (with the resume
    message it wrote); `session` as it stands after it."""

    released: bool
    session: HandoffSession
    resume_message_id: int | None = None


@dataclass(frozen=True)
class HandoffStarted:
    """A person was notified: the dispatch went out and the bypass is active."""

    handoff_session_id: str
    handoff_event_id: int  # the `handoff_requested` audit event
    channel_id: int
    channel_kind: str
    channel_label: str
    channel_message_id: str | None
    estimated_response: str
    # On a route: its id, and the channels reached and those that failed on the way
    route_id: int | None = None
    notified: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()  # still being sent when the first was reached
    people: tuple[str, ...] = ()  # the people offered it directly (not failed), by id


@dataclass(frozen=True)
class ClaimResult:
    """How a claim went: `claimed` when this call took the handoff; `handoff` as it stands
    after it (its `claimed_by` is whoever holds it)."""

    claimed: bool
    handoff: HandoffSession


@dataclass(frozen=True)
class Speaking:
    """Whether a recipient's action on a handoff goes through: always on a handoff straight
    to a channel; on a route, when their thread holds the claim (or has just taken it)."""

    allowed: bool
    handoff: HandoffSession
    holder: str | None = None  # who has it, when not allowed


@dataclass(frozen=True)
class OnTheLine:
    """Who an active handoff's subscriber is talking to. Until a person has written in it,
    nobody has joined: the subscriber waits for the channel's public name, usually within
    `estimated_response`. After the first reply, `name` is that reply's author."""

    joined: bool
    name: str
    estimated_response: str


# --------------------------------------------------------------------------- refusals


class NotActive(Conflict):
    """A change that needs an active handoff (a reply, a fresh form link) found it in another state."""

    code = "handoff_not_active"


class HandoffRequestRefused(DeskError):
    """A `handoff_request` that started no handoff (or one that ended before it began)."""


class ChannelUnavailable(HandoffRequestRefused):
    """The asked channel is not (or no longer) among the available ones; nothing was stored."""

    code = "invalid_input"

    def __init__(self, channel_id: int, available: list[int]) -> None:
        super().__init__(f"channel {channel_id} is not available")
        self.channel_id, self.available = channel_id, available


class RouteClosed(HandoffRequestRefused):
    """The route refuses handoffs while none of its steps is open (`when_closed: refuse`);
    nothing was stored. `back` says when someone is (None: no office hours ahead)."""

    code = "nobody_available"
    status = 409

    def __init__(self, route_id: int, back: str | None) -> None:
        super().__init__(f"nobody on route {route_id} is available now" + (f"; back {back}" if back else ""))
        self.route_id, self.back = route_id, back


class HandoffAlreadyOpen(HandoffRequestRefused):
    """The conversation already has an open handoff (`active_id`; None when it ended
    before it could be read back); nothing was stored."""

    code = "handoff_already_active"
    status = 409

    def __init__(self, active_id: str | None) -> None:
        super().__init__(f"the conversation already has an open handoff ({active_id})")
        self.active_id = active_id


class DispatchFailed(HandoffRequestRefused):
    """The handoff was stored but nobody was notified: the channel refused or never
    answered within the budget (`reason` is the channel's hint), or, with `attempts` None,
    the handoff was failed as stuck while the dispatch was in flight."""

    code = "dispatch_failed"
    status = 502

    def __init__(
        self, *, handoff_session_id: str, handoff_event_id: int, channel_id: int, channel_label: str,
        attempts: int | None, reason: str | None, failed: tuple[int, ...] = (),
    ) -> None:
        super().__init__(f"handoff {handoff_session_id} was not dispatched: {reason or 'cancelled'}")
        self.handoff_session_id, self.handoff_event_id = handoff_session_id, handoff_event_id
        self.channel_id, self.channel_label = channel_id, channel_label
        self.attempts, self.reason = attempts, reason
        self.failed = failed  # on a route: every channel tried

    @property
    def cancelled(self) -> bool:
        """The dispatch was not refused; the handoff left `dispatching` while it was in flight."""
        return self.attempts is None


# --------------------------------------------------------------------------- signals


@dataclass(frozen=True)
class _HandoffSignal:
    """A signal about one handoff, carrying the row as the changing transaction left it.
    Each kind below is its own class: the signal bus dispatches on the exact type."""

    handoff: HandoffSession


class HandoffActivated(_HandoffSignal):
    """Signal: the bypass began (the idle timer arms, a sibling agent speaks first)."""


class HandoffReleased(_HandoffSignal):
    """Signal: the bypass ended (the idle timer disarms, the agent resumes)."""


class HandoffClaimed(_HandoffSignal):
    """Signal: someone took a handoff on a route (the ladder stops, the idle timer starts)."""


class HeldMessagesOrphaned(_HandoffSignal):
    """Signal: the dispatch failed after the subscriber wrote for a person; nobody but the
    agent will answer those messages."""


@dataclass(frozen=True)
class EscalationDue:
    """Signal: a route's handoff has a (new) ladder deadline, to be armed."""

    handoff_session_id: str
    at: datetime
