"""What the owner inbox shows of a handoff on a route (config `routes:`), and where the inbox
itself speaks in one.

A route's handoff is more than one thread: its ladder notified a step's channels at once,
the first person to act takes it, and until someone does the ladder's deadline runs instead
of the idle timer. The owner has to see all of that to trust it: the route and its step,
each channel notified (and whether the dispatch arrived or failed, with the provider's
error), who took it through what, and while nobody has, when the ladder moves on. A
handoff straight to a channel has none of it (`route_status` is None) and its pages look as
they always did.

The inbox speaks in a route's handoff as one of its recipients: the owner inbox channel the
route notified. A reply from the inbox is then that recipient's reply and claims the
handoff as any recipient's would (the handoff service decides the claim), and a Claim
pressed in the inbox names that recipient, so the subscriber's messages come to the inbox
from then on. A route that notified no owner inbox channel can still be claimed and
released here, but not answered: there is no thread of the inbox's for a reply to come from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.config import Ladder
from bot.store.models import HandoffRecipient, HandoffSession
from bot.store.vocabulary import HandoffState, RecipientState
from channels.text import clip

OWNER_INBOX = "owner_inbox"  # the channel kind whose threads are the inbox's own
ERROR_CHARS = 300  # a failed dispatch's error as the page shows it; the audit trail keeps it whole

# How a claim's `claimed_via` reads when no recipient's thread took it.
VIA_WORDS = {"inbox": "inbox", "form": "return form", "agent": "agent"}


def span(seconds: float) -> str:
    """A short duration as the inbox counts down: "12 min", or "40 s" in the last minute."""
    minutes = int(seconds // 60)
    return f"{minutes} min" if minutes else f"{int(seconds)} s"


@dataclass(frozen=True)
class Countdown:
    """Until the ladder's next move while nobody has claimed the handoff: the next step
    ("Escalates in 4 min"), or, on the last step, the handoff going back to the assistant."""

    at: datetime
    words: str  # before the time: "Escalates in"
    over: str  # once the deadline has passed and the sweep has yet to act: "escalating now"
    text: str  # as it reads now: "Escalates in 4 min" (the page counts down from `at` itself)

    @classmethod
    def until(cls, at: datetime, words: str, over: str, now: datetime) -> Countdown:
        left = (at - now).total_seconds()
        return cls(at, words, over, over if left <= 0 else f"{words} {span(left)}")

    def json(self) -> dict[str, str]:
        return {"at": self.at.isoformat(), "words": self.words, "over": self.over, "text": self.text}


@dataclass(frozen=True)
class RecipientLine:
    """One channel the route notified, in words: which step, and how its dispatch went."""

    label: str
    step: int  # counted from 1, as people count steps
    state: RecipientState
    words: str  # "notified 3 min ago", "failed 2 min ago: <the provider's error>", "sending…"
    holds_claim: bool

    def json(self) -> dict[str, Any]:
        return {"label": self.label, "step": self.step, "state": self.state, "words": self.words,
                "holds_claim": self.holds_claim}


@dataclass(frozen=True)
class RouteStatus:
    """Everything the inbox shows of a route's handoff, built once for the page, the list
    card and their live updates alike."""

    label: str
    step_text: str  # "step 1 of 2"
    recipients: tuple[RecipientLine, ...]
    taken: str  # "Taken by Tom (Support desk) 3 min ago"; empty while nobody has it
    countdown: Countdown | None  # while active and unclaimed
    claimable: bool  # active and nobody has claimed it: the Claim button shows
    inbox_recipient: HandoffRecipient | None  # the owner inbox's notified thread, if the route has one
    holder_label: str  # the claimer's channel, as `taken` names it

    @property
    def asked(self) -> str:
        """The list card's one line: every channel notified and how it went."""
        return "Asked: " + ", ".join(f"{r.label} ({r.state})" for r in self.recipients) if self.recipients else ""

    def json(self) -> dict[str, Any]:
        return {
            "label": self.label, "step": self.step_text, "taken": self.taken, "claimable": self.claimable,
            "countdown": self.countdown.json() if self.countdown else None, "asked": self.asked,
            "recipients": [r.json() for r in self.recipients],
        }


def route_status(
    handoff: HandoffSession, recipients: Sequence[HandoffRecipient], ladder: Ladder | None, now: datetime,
    ago: Callable[[datetime | None], str],
) -> RouteStatus | None:
    """What the inbox shows of `handoff`'s route; None for a handoff straight to a channel.
    `ladder` is None when the route has since left the config: its id and step still show."""
    if handoff.route_id is None:
        return None
    holder = next((r for r in recipients if r.id is not None and r.id == handoff.claimed_recipient_id), None)
    holder_label = holder.channel_label if holder is not None else _via_words(handoff.claimed_via, recipients)
    taken = ""
    if handoff.claimed_at is not None:
        taken = f"Taken by {handoff.claimed_by or 'someone'} ({holder_label}) {ago(handoff.claimed_at)}"
    unclaimed = handoff.state == HandoffState.ACTIVE and handoff.claimed_at is None
    return RouteStatus(
        label=ladder.route.label if ladder is not None else f"route {handoff.route_id}",
        step_text=_step_text(handoff.step, ladder),
        recipients=tuple(_line(r, holder, ago) for r in recipients),
        taken=taken,
        countdown=_countdown(handoff, ladder, now) if unclaimed else None,
        claimable=unclaimed,
        inbox_recipient=next((r for r in recipients if r.channel_kind == OWNER_INBOX and r.state == RecipientState.NOTIFIED
                              and r.thread_key is not None), None),
        holder_label=holder_label,
    )


def _step_text(step: int | None, ladder: Ladder | None) -> str:
    if step is None:
        return ""
    return f"step {step + 1} of {len(ladder.steps)}" if ladder is not None else f"step {step + 1}"


def _countdown(handoff: HandoffSession, ladder: Ladder | None, now: datetime) -> Countdown | None:
    if handoff.escalate_at is None:
        return None
    last = ladder is None or handoff.step is None or handoff.step >= len(ladder.steps) - 1
    if last:  # after the last step nobody is asked: the handoff is released as unclaimed
        return Countdown.until(handoff.escalate_at, "Back to the assistant in", "handing back now", now)
    return Countdown.until(handoff.escalate_at, "Escalates in", "escalating now", now)


def _line(recipient: HandoffRecipient, holder: HandoffRecipient | None,
          ago: Callable[[datetime | None], str]) -> RecipientLine:
    state = RecipientState(recipient.state)
    if state == RecipientState.NOTIFIED:
        words = f"notified {ago(recipient.notified_at)}"
    elif state == RecipientState.FAILED:
        words = f"failed {ago(recipient.failed_at)}: {clip(' '.join((recipient.error or 'no detail').split()), ERROR_CHARS)}"
    else:
        words = "sending…"
    holds = holder is not None and holder.id == recipient.id
    return RecipientLine(recipient.channel_label, recipient.step + 1, state, words + (" · has it" if holds else ""), holds)


def _via_words(via: str | None, recipients: Sequence[HandoffRecipient]) -> str:
    """`claimed_via` for people: a channel by its label, the inbox, the return form."""
    if via is None:
        return ""
    if via.startswith("channel:") and via[8:].isdigit():
        channel_id = int(via[8:])
        return next((r.channel_label for r in recipients if r.channel_id == channel_id), f"channel {channel_id}")
    return VIA_WORDS.get(via, via)


# --------------------------------------------------------------------------- where the inbox speaks


@dataclass(frozen=True)
class InboxLine:
    """The channel and thread an inbox reply comes from, as any recipient's reply would."""

    channel_id: int
    thread_key: str


class NoInboxLine(Exception):
    """The inbox cannot answer in this handoff; `message` tells the owner why and where the
    answers go instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def inbox_line(handoff: HandoffSession, route: RouteStatus | None) -> InboxLine:
    """Where a reply from the inbox goes in: the handoff's own thread when it went straight
    to the owner inbox; on a route, the owner inbox's recipient thread, unless someone else
    has taken the handoff. Raises NoInboxLine when neither applies."""
    if route is None:
        if handoff.channel_kind != OWNER_INBOX or handoff.thread_key is None:
            raise NoInboxLine("Replies to this handoff go through its own channel.")
        return InboxLine(handoff.channel_id, handoff.thread_key)
    inbox = route.inbox_recipient
    by = handoff.claimed_by or "Someone"
    if handoff.claimed_at is not None and (inbox is None or handoff.claimed_recipient_id != inbox.id):
        if handoff.claimed_recipient_id is None and handoff.claimed_via == "inbox":
            raise NoInboxLine(f"Taken here by {by}, but this route did not notify the owner inbox, so there is no "
                              "inbox thread to answer from; release it when you are done.")
        raise NoInboxLine(f"{by} has this handoff; replies go through {route.holder_label}.")
    if inbox is None or inbox.thread_key is None:
        raise NoInboxLine("This route did not notify the owner inbox, so replies go through the channels it notified; "
                          "you can still claim or release it here.")
    return InboxLine(inbox.channel_id, inbox.thread_key)
