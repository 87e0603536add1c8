"""The words the desk stores and shows: handoff states, message roles, release reasons and
outcomes, each defined once, with the phrases people and agents read next to them.

They are `StrEnum`s, so a member *is* its string: it goes into the database, JSON, templates
and the resume message unchanged, and a value read back from a column compares equal to its
member. The values are contracts (docs/architecture.md, "Contracts clients depend on"):
agents parse the outcome and reason words, clients filter by state, owners' templates test
`reason == "idle_timeout"`.
"""

from __future__ import annotations

from enum import StrEnum


class HandoffState(StrEnum):
    """Where a handoff is in its life (docs/architecture.md, "The life of a release")."""

    DISPATCHING = "dispatching"
    ACTIVE = "active"
    RELEASED = "released"
    FAILED = "failed"


# A conversation has at most one open handoff (a partial unique index backs this).
OPEN_STATES: tuple[HandoffState, ...] = (HandoffState.DISPATCHING, HandoffState.ACTIVE)
ENDED_STATES: tuple[HandoffState, ...] = (HandoffState.RELEASED, HandoffState.FAILED)


class OutboxState(StrEnum):
    """Where an outbox item is: waiting, leased by one sender, delivered, or given up."""

    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class RecipientState(StrEnum):
    """A route's recipient (`HandoffRecipient.state`): its dispatch is being sent, reached the
    channel, or failed (refused, given up, or reported lost by the provider after acceptance)."""

    SENDING = "sending"
    NOTIFIED = "notified"
    FAILED = "failed"


class OfferResult(StrEnum):
    """How an offer of a route's handoff ended (`HandoffRecipient.result`): its recipient
    claimed it, someone else did, its turn passed with no claim (a missed offer: the next
    person or step was offered), or the handoff ended before anyone claimed."""

    CLAIMED = "claimed"
    TAKEN = "taken"
    MISSED = "missed"
    ENDED = "ended"


class InboundState(StrEnum):
    """Where a stored inbound event is: waiting, claimed by one lane, or finished (handled,
    ignored with a reason, or failed inside the desk)."""

    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"
    IGNORED = "ignored"
    FAILED = "failed"


class IdempotencyState(StrEnum):
    """Where a request sent with an `Idempotency-Key` is: running (`started`), its change
    committed (`applied`, in the very transaction of the change), or its answer kept to be
    replayed (`answered`)."""

    STARTED = "started"
    APPLIED = "applied"
    ANSWERED = "answered"


class Role(StrEnum):
    """Who wrote a stored message."""

    SUBSCRIBER = "subscriber"
    AGENT = "agent"
    HUMAN = "human"
    SYSTEM = "system"


class Outcome(StrEnum):
    """How a handoff ended, as the person (or the sibling agent) judged it."""

    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    NEEDS_FOLLOWUP = "needs_followup"

    @property
    def label(self) -> str:
        """The outcome as a page shows it ("Needs follow-up")."""
        return _OUTCOME_LABELS[self]


_OUTCOME_LABELS = {
    Outcome.RESOLVED: "Resolved",
    Outcome.UNRESOLVED: "Unresolved",
    Outcome.NEEDS_FOLLOWUP: "Needs follow-up",
}

OUTCOMES_SPOKEN = "resolved, unresolved or needs_followup"
"""The outcome words as a hint or a help text lists them."""


class ReleaseReason(StrEnum):
    """Which of the five doors ended a handoff (docs/architecture.md, "The life of a release")."""

    FORM = "form"
    RELEASE_TOKEN = "release_token"
    AGENT = "agent"
    OWNER = "owner"
    IDLE_TIMEOUT = "idle_timeout"
    UNCLAIMED = "unclaimed"

    @property
    def default_outcome(self) -> Outcome:
        """The outcome recorded when the release names none: a timeout resolved nothing."""
        return Outcome.UNRESOLVED if self in (ReleaseReason.IDLE_TIMEOUT, ReleaseReason.UNCLAIMED) else Outcome.RESOLVED

    @property
    def by_a_person(self) -> bool:
        """A door a person goes through (the form, /release, the inbox or API); the idle
        timer, the ladder and a sibling agent are nobody."""
        return self in (ReleaseReason.FORM, ReleaseReason.RELEASE_TOKEN, ReleaseReason.OWNER)

    def resume_phrase(self, idle_span: str = "a while") -> str:
        """Why the agent has the conversation again, in the `[Bot resumed — …]` line; the idle
        timeout's phrase names how long nothing happened (`idle_span`, e.g. "30 minutes")."""
        return _RESUME_PHRASES[self].format(idle_span=idle_span)

    @property
    def page_phrase(self) -> str:
        """How the handoff ended, as the return-form page tells a person who opens a used link."""
        return _PAGE_PHRASES[self]


_RESUME_PHRASES = {
    ReleaseReason.FORM: "the recipient submitted the return form",
    ReleaseReason.RELEASE_TOKEN: "the recipient released the conversation",
    ReleaseReason.AGENT: "the sibling agent has handed control back",
    ReleaseReason.OWNER: "the owner released the conversation",
    ReleaseReason.IDLE_TIMEOUT: "the handoff ended after {idle_span} without activity",
    ReleaseReason.UNCLAIMED: "nobody was available to take the handoff, so no person has answered",
}

_PAGE_PHRASES = {
    ReleaseReason.FORM: "handed back through the return form",
    ReleaseReason.RELEASE_TOKEN: "released by the recipient",
    ReleaseReason.AGENT: "handed back by the sibling agent",
    ReleaseReason.OWNER: "released by the owner",
    ReleaseReason.IDLE_TIMEOUT: "ended after a period without activity",
    ReleaseReason.UNCLAIMED: "handed back because nobody took it",
}
