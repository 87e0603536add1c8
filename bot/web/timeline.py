"""A handoff's own timeline, read from its audit trail: requested, each recipient notified,
escalated, claimed, every relay both ways, released, with the time of each step and how long
it came after the one before. The handoff page shows it; the trail stays the record, this is
the reading of it an owner wants when asking "how long did this subscriber wait, and for what"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.store.models import HandoffEvent, HandoffSession
from bot.store.vocabulary import Outcome

# A run of more relays than this in a row is one collapsed row (its steps inside), so a long
# conversation does not push the release off the screen.
RELAYS_SHOWN = 3

ChannelLabel = Callable[[int], str]


@dataclass(frozen=True)
class Step:
    """One thing that happened, in words: `kind` names its sort (the page's class), `what`
    and `detail` are what the owner reads."""

    kind: str
    what: str
    detail: str
    at: datetime
    after: timedelta | None  # since the step before; None for the first

    @property
    def time(self) -> str:
        return self.at.strftime("%H:%M:%S")

    @property
    def since(self) -> str:
        return "" if self.after is None else "+" + short_duration(self.after)


@dataclass(frozen=True)
class RelayRun:
    """Consecutive relays, folded into one row with the count each way."""

    steps: tuple[Step, ...]

    kind = "relays"

    @property
    def first(self) -> Step:
        return self.steps[0]

    @property
    def summary(self) -> str:
        to_person = sum(1 for s in self.steps if s.kind == "relay-to-person")
        to_subscriber = len(self.steps) - to_person
        return f"{len(self.steps)} messages relayed: {to_person} to the person, {to_subscriber} to the subscriber"

    @property
    def lasted(self) -> str:
        return short_duration(self.steps[-1].at - self.steps[0].at)


Row = Step | RelayRun


def short_duration(delta: timedelta) -> str:
    """`timedelta(seconds=3725)` -> `1 h 2 min`: the gap between two steps, for reading at a glance."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes} min {rest} s" if rest and minutes < 10 else f"{minutes} min"
    if seconds < 86400:
        hours, rest = divmod(seconds, 3600)
        return f"{hours} h {rest // 60} min" if rest >= 60 else f"{hours} h"
    days, rest = divmod(seconds, 86400)
    return f"{days} d {rest // 3600} h" if rest >= 3600 else f"{days} d"


def timeline(handoff: HandoffSession, events: Sequence[HandoffEvent], label_of: ChannelLabel) -> list[Row]:
    """The steps of a handoff from its audit trail (oldest first), runs of relays longer than
    `RELAYS_SHOWN` collapsed. Events that are bookkeeping (notices delivered, no-ops) are
    left out: the audit trail below the timeline still lists them. On a route each recipient
    reached is a step of its own, so the activation (the first of them) is not repeated."""
    steps: list[Step] = []
    for event in events:
        if handoff.routed and event.kind == "handoff_activated":
            continue
        words = _words(event, handoff, label_of)
        if words is None:
            continue
        kind, what, detail = words
        after = event.created_at - steps[-1].at if steps else None
        steps.append(Step(kind=kind, what=what, detail=detail, at=event.created_at, after=after))
    return _collapse_relays(steps)


def _collapse_relays(steps: list[Step]) -> list[Row]:
    rows: list[Row] = []
    run: list[Step] = []

    def flush() -> None:
        if len(run) > RELAYS_SHOWN:
            rows.append(RelayRun(tuple(run)))
        else:
            rows.extend(run)
        run.clear()

    for step in steps:
        if step.kind.startswith("relay-"):
            run.append(step)
            continue
        flush()
        rows.append(step)
    flush()
    return rows


def _words(event: HandoffEvent, handoff: HandoffSession, label_of: ChannelLabel) -> tuple[str, str, str] | None:
    """(kind, what, detail) of an event the timeline shows; None for the rest."""
    detail = event.detail or {}
    channel = detail.get("channel_id")
    where = label_of(channel) if isinstance(channel, int) else ""
    match event.kind:
        case "handoff_requested":
            return "requested", "Requested", f"by {event.actor}"
        case "handoff_activated":  # straight to a channel: its one recipient was notified
            return "notified", "Notified", handoff.channel_label
        case "recipient_notified":
            return "notified", "Notified", f"{where} (step {_counted(detail.get('step'))})"
        case "recipient_failed":
            return "failed", "Could not notify", where
        case "dispatch_failed":
            return "failed", "Dispatch failed", str(detail.get("hint") or detail.get("error") or "")
        case "handoff_escalated":
            why = str(detail.get("why") or "").replace("_", " ")
            return "escalated", "Escalated", f"to step {_counted(detail.get('to_step'))}" + (f" ({why})" if why else "")
        case "handoff_claimed":
            return "claimed", "Claimed", f"by {event.actor}"
        case "relayed_to_recipient":
            return "relay-to-person", "Subscriber → person", where
        case "relayed_to_subscriber":
            return "relay-to-subscriber", "Person → subscriber", event.actor
        case "handoff_released":
            outcome = str(detail.get("outcome") or "")
            ended = f" · {Outcome(outcome).label}" if outcome in set(Outcome) else ""
            return "released", "Released", f"by {event.actor}{ended}"
    return None


def _counted(step: object) -> str:
    """A ladder's step as people count them (stored from 0, shown from 1)."""
    return str(step + 1) if isinstance(step, int) else "?"
