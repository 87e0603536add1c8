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

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.config import Ladder, OnCallConfig, TeamConfig
from bot.store.models import HandoffEvent, HandoffRecipient, HandoffSession
from bot.store.vocabulary import HandoffState, OfferResult, RecipientState
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
    """One channel's room the route notified, or one person it offered the handoff to, in
    words: which step, and how its dispatch went. A person's line is under their name, with
    how the offer ended and `detail`: the target that chose them, their turn, the contact method."""

    label: str
    step: int  # counted from 1, as people count steps
    state: RecipientState
    words: str  # "notified 3 min ago", "failed 2 min ago: <the provider's error>", "sending…"
    holds_claim: bool
    person_id: str | None = None
    result: OfferResult | None = None
    detail: str = ""  # "team Support · asked 2nd · E-mail o•••@example.com (their 2nd method)"

    def json(self) -> dict[str, Any]:
        return {"label": self.label, "step": self.step, "state": self.state, "words": self.words,
                "holds_claim": self.holds_claim, "person_id": self.person_id, "result": self.result, "detail": self.detail}


@dataclass(frozen=True)
class OfferNames:
    """What a person's offer names, in words: people by their directory name (their id once
    the directory has none), a team or on-call schedule by its label in the config."""

    people: Mapping[str, str] = field(default_factory=dict)
    targets: Mapping[str, str] = field(default_factory=dict)  # "team:support" -> "Support" (`target_labels`)

    def person(self, person_id: str) -> str:
        return self.people.get(person_id, person_id)

    def target(self, target: str | None) -> str:
        """"team Support", "on call: Night on-call", "named in the route" (a person: target)."""
        kind, _, name = (target or "").partition(":")
        label = self.targets.get(target or "", name)
        return {"team": f"team {label}", "oncall": f"on call: {label}", "person": "named in the route"}.get(kind, target or "")


def target_labels(teams: Sequence[TeamConfig], schedules: Sequence[OnCallConfig]) -> dict[str, str]:
    """The config's label of every team and on-call schedule, by the target that names it."""
    return {**{f"team:{t.id}": t.label for t in teams}, **{f"oncall:{o.id}": o.label for o in schedules}}


_PHONE = re.compile(r"(?P<prefix>[a-z]+:)?\+?[\d ().-]{7,}")
_EMAIL = re.compile(r"(?P<local>[^@\s]+)@(?P<domain>[^@\s]+)")


def masked_address(address: str | None) -> str:
    """A person's address as the inbox shows it to anyone who may look: an e-mail's local part
    hidden but its first letter (o•••@example.com), a phone number's digits but the last four
    (the last two of a short one); a provider's user id as it is (it reaches nobody outside it)."""
    if not address:
        return ""
    if _EMAIL.fullmatch(address):
        local, _, domain = address.rpartition("@")
        return f"{local[0]}•••@{domain}"
    if _PHONE.fullmatch(address):
        digits = sum(c.isdigit() for c in address)
        keep, seen, shown = (4 if digits >= 10 else 2), 0, []
        for c in reversed(address):
            if c.isdigit():
                seen += 1
                shown.append(c if seen <= keep else "•")
            else:
                shown.append(c)
        return "".join(reversed(shown))
    return address


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th … 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


WHY_WORDS = {"away": "away", "off_hours": "outside working hours", "at_capacity": "at capacity",
             "no_contact_method": "no way to reach them", "disabled": "disabled"}


def passed_over(events: Sequence[HandoffEvent], names: OfferNames) -> str:
    """Everyone a step's targets passed over and why, from the audit trail, each once:
    "Passed over: Ines Duarte (away), Sam Okafor (at capacity)"; empty when nobody was."""
    seen: list[tuple[str, str]] = []
    for event in events:
        if event.kind == "offer_passed_over" and event.person_id is not None:
            why = str(event.detail.get("why", ""))
            if (event.person_id, why) not in seen:
                seen.append((event.person_id, why))
    if not seen:
        return ""
    return "Passed over: " + ", ".join(f"{names.person(pid)} ({WHY_WORDS.get(why, why.replace('_', ' '))})" for pid, why in seen)


@dataclass(frozen=True)
class RouteStatus:
    """Everything the inbox shows of a route's handoff, built once for the page, the list
    card and their live updates alike."""

    label: str
    step_text: str  # "step 1 of 2"
    recipients: tuple[RecipientLine, ...]
    passed: str  # "Passed over: Ines Duarte (away)"; empty when nobody was (or the trail was not read)
    taken: str  # "Taken by Tom (Support desk) 3 min ago"; empty while nobody has it
    countdown: Countdown | None  # while active and unclaimed
    claimable: bool  # active and nobody has claimed it: the Claim button shows
    inbox_recipient: HandoffRecipient | None  # the owner inbox's notified thread, if the route has one
    holder_label: str  # the claimer's channel, as `taken` names it

    @property
    def asked(self) -> str:
        """The list card's one line: every channel notified and person offered, and how it went."""
        return "Asked: " + ", ".join(f"{r.label} ({r.result or r.state})" for r in self.recipients) if self.recipients else ""

    def json(self) -> dict[str, Any]:
        return {
            "label": self.label, "step": self.step_text, "taken": self.taken, "claimable": self.claimable,
            "countdown": self.countdown.json() if self.countdown else None, "asked": self.asked,
            "recipients": [r.json() for r in self.recipients], "passed": self.passed,
        }


def route_status(
    handoff: HandoffSession, recipients: Sequence[HandoffRecipient], ladder: Ladder | None, now: datetime,
    ago: Callable[[datetime | None], str], names: OfferNames | None = None, events: Sequence[HandoffEvent] = (),
) -> RouteStatus | None:
    """What the inbox shows of `handoff`'s route; None for a handoff straight to a channel.
    `ladder` is None when the route has since left the config: its id and step still show.
    `names` words the people offered it; `events`, its audit trail, says who was passed over."""
    if handoff.route_id is None:
        return None
    names = names or OfferNames()
    holder = next((r for r in recipients if r.id is not None and r.id == handoff.claimed_recipient_id), None)
    holder_label = holder.channel_label if holder is not None else _via_words(handoff.claimed_via, recipients)
    taken = ""
    if handoff.claimed_at is not None:
        taken = f"Taken by {handoff.claimed_by or 'someone'} ({holder_label}) {ago(handoff.claimed_at)}"
    unclaimed = handoff.state == HandoffState.ACTIVE and handoff.claimed_at is None
    return RouteStatus(
        label=ladder.route.label if ladder is not None else f"route {handoff.route_id}",
        step_text=_step_text(handoff.step, ladder),
        recipients=tuple(_line(r, holder, ago) if r.person_id is None else _offer_line(r, holder, names, now)
                         for r in recipients),
        passed=passed_over(events, names),
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


RESULT_WORDS = {OfferResult.CLAIMED: "claimed", OfferResult.TAKEN: "someone else took it", OfferResult.MISSED: "missed",
                OfferResult.ENDED: "the handoff ended"}


def _offer_line(recipient: HandoffRecipient, holder: HandoffRecipient | None, names: OfferNames, now: datetime) -> RecipientLine:
    """A person's offer: when it was made, reached them or failed, and how it ended (clock
    times, UTC, as the section says: which minute matters more here than how long ago)."""
    def at(moment: datetime | None) -> str:
        if moment is None:
            return ""
        return moment.strftime("%H:%M" if moment.date() == now.date() else "%d %b %H:%M")

    state = RecipientState(recipient.state)
    words = [f"offered {at(recipient.created_at)}"]
    if state == RecipientState.NOTIFIED:
        words.append(f"notified {at(recipient.notified_at)}")
    elif state == RecipientState.FAILED:
        words.append(f"failed {at(recipient.failed_at)}: {clip(' '.join((recipient.error or 'no detail').split()), ERROR_CHARS)}")
    else:
        words.append("sending…")
    result = OfferResult(recipient.result) if recipient.result is not None else None
    if result is not None:
        timed = result in (OfferResult.CLAIMED, OfferResult.MISSED)
        words.append(RESULT_WORDS[result] + (f" {at(recipient.ended_at)}" if timed else ""))
    method = f"{recipient.channel_label} {masked_address(recipient.address)}".strip()
    if recipient.contact_index:
        method += f" (their {ordinal(recipient.contact_index + 1)} method)"
    detail = " · ".join(part for part in (names.target(recipient.target), f"asked {ordinal(recipient.turn + 1)}", method) if part)
    holds = holder is not None and holder.id == recipient.id
    return RecipientLine(names.person(recipient.person_id or ""), recipient.step + 1, state, " · ".join(words), holds,
                         person_id=recipient.person_id, result=result, detail=detail)


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
