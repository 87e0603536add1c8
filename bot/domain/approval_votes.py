"""Who a decision on an approval counts as, and whether it counts at all.

A decision carries a `voter`: who the desk verified made it.

- `person:<id>` — a person of the directory, however they came: signed in to the inbox or
  the decision page, or pressing a button in a channel whose identity is linked to them
  (bot/flow/inbound.py resolves it). Olga in Slack and Olga in Telegram are one voter.
- `owner` (`OWNER`) — the owner token's service identity (the API, its inbox session):
  an automation key, not a person.
- `<channel id>:<provider user id>` (`channel_voter`) — a provider identity linked to nobody.
- None — nobody verified who decided (a bare decision link, an API call under `api.key`).

Two-person approvals (`approvals_required: 2`) count people only: a decision by the service
identity, by an identity linked to nobody, or by nobody verified is refused and recorded
(`approval_vote_refused`), approve or deny alike, never counted; the same person twice counts
once. One-person approvals take any decision unless `sign_in.approvals_from_unlinked` is
`refuse`: then an identity linked to nobody and an unverified decision are refused the same
way (the owner token still decides: it is the desk's own admin key).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlmodel import col

from bot.store.models import Approval, ApprovalVote

# The owner token's service identity as a voter (bot/domain/people/actor.py `Actor.voter`)
OWNER = "owner"
_PERSON = "person:"


def channel_voter(channel_id: int, user_id: str | None) -> str | None:
    """The voter of a press in a channel by a provider identity linked to nobody: the
    provider's own user id, scoped by the channel (the same number on two providers is two
    identities); None when the provider did not say who it was."""
    return f"{channel_id}:{user_id}" if user_id else None


def person_voter(person_id: str) -> str:
    return f"{_PERSON}{person_id}"


def person_of(voter: str | None) -> str | None:
    """The person a voter is, or None (the service identity, an unlinked identity, nobody)."""
    return voter.removeprefix(_PERSON) if voter is not None and voter.startswith(_PERSON) else None


class DecisionOutcome(StrEnum):
    """What one decision did."""

    DECIDED = "decided"  # approved or denied now
    FIRST_APPROVAL = "first_approval"  # counted: the first of two people; waiting for a second
    SAME_PERSON = "same_person"  # this person's approval was already counted: it counts once
    UNIDENTIFIED = "unidentified"  # a person must decide, and nobody verified who this was
    UNLINKED = "unlinked"  # a person must decide, and this channel identity is linked to nobody
    NOT_A_PERSON = "not_a_person"  # two people must approve, and this is the owner token's service identity
    CLOSED = "closed"  # no longer pending (decided, expired): nothing changed


REFUSED = (DecisionOutcome.UNIDENTIFIED, DecisionOutcome.UNLINKED, DecisionOutcome.NOT_A_PERSON)

# The answer to whoever decided, for an outcome that did not settle the approval (the pages,
# the inbox, the API's error and the channel's inbound record say the same).
ANSWERS = {
    DecisionOutcome.FIRST_APPROVAL: "Your approval is counted. It needs two people: waiting for a second person.",
    DecisionOutcome.SAME_PERSON: "Your approval was already counted and counts once: waiting for a second person.",
    DecisionOutcome.UNIDENTIFIED: (
        "Not counted: this decision must come from a person of the desk, and it does not say who you are. "
        "Sign in to the inbox, or answer with the buttons in a channel linked to you."
    ),
    DecisionOutcome.UNLINKED: (
        "Not counted: this decision must come from a person of the desk, and this account is linked to nobody. "
        "To link it, sign in to the inbox, take a code under \u201cLink a channel\u201d and send /link CODE here; "
        "or decide in the inbox."
    ),
    DecisionOutcome.NOT_A_PERSON: (
        "Not counted: two different people must approve this, and the owner token is a service identity, not a "
        "person. Sign in to the inbox as yourself, or answer with the buttons in a channel linked to you."
    ),
    DecisionOutcome.CLOSED: "This request was already closed; your answer changed nothing.",
}

# Why a refusal was refused, as the audit trail's `approval_vote_refused` says it
_WHY = {
    DecisionOutcome.UNIDENTIFIED: "a person must decide and nobody verified who this was",
    DecisionOutcome.UNLINKED: "a person must decide and this identity is linked to nobody",
    DecisionOutcome.NOT_A_PERSON: "two people must approve and the owner token is not a person",
}


@dataclass(frozen=True)
class DecisionResult:
    outcome: DecisionOutcome
    approval: Approval

    @property
    def changed(self) -> bool:
        """The decision counted: it settled the approval, or it is the first of two."""
        return self.outcome in (DecisionOutcome.DECIDED, DecisionOutcome.FIRST_APPROVAL)


def refusal(voter: str | None, *, approvals_required: int, unlinked: str) -> DecisionOutcome | None:
    """Why a decision by `voter` must not count (a refusing outcome), or None when it may.
    `unlinked`: `sign_in.approvals_from_unlinked` ("allow" or "refuse")."""
    if person_of(voter) is not None:
        return None
    people_only = approvals_required > 1
    if voter == OWNER:
        return DecisionOutcome.NOT_A_PERSON if people_only else None
    if not people_only and unlinked != "refuse":
        return None
    return DecisionOutcome.UNIDENTIFIED if voter is None else DecisionOutcome.UNLINKED


def why_refused(outcome: DecisionOutcome) -> str:
    return _WHY[outcome]


async def record_vote(session: Any, approval_id: str, *, voter: str, name: str, via: str, approve: bool,
                      now: datetime) -> None:
    """One row per person: a denial after their own approval replaces it (their last word
    stands; the audit keeps both)."""
    earlier = await session.scalar(select(ApprovalVote).where(
        col(ApprovalVote.approval_id) == approval_id, col(ApprovalVote.voter) == voter))
    if earlier is None:
        session.add(ApprovalVote(approval_id=approval_id, voter=voter, name=name, via=via, approve=approve, at=now))
    else:
        earlier.name, earlier.via, earlier.approve, earlier.at = name, via, approve, now
    await session.flush()
