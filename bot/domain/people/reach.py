"""How a person is reached directly, and whether they can be offered a handoff now.

`contact_methods` turns a person's contact order (`Person.contact_order`, from the YAML's
`contact:` or the account page) into the places the desk can actually send to: each kind at
the identity the person linked on it (a code they sent from that account proves it is theirs,
so nobody is reached at an address a typo put in a file), e-mail at their directory address,
through the first configured channel of that kind that can send to one person. A kind with
no linked identity or no such channel is left out: the next one is tried.

`presence` says whether teams and schedules should offer them anything: away (until they say
they are back, or until `away_until`), outside their own working hours, or available. Both are
pure: the caller passes the rows, the channels and the instant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from bot.config import CONTACT_KINDS, HoursConfig
from bot.domain.hours import is_open
from bot.store.models import Person, PersonIdentity

EMAIL = "email"


@dataclass(frozen=True)
class DirectChannel:
    """A configured channel whose adapter can send to one person (`Capabilities.direct`)."""

    id: int
    kind: str
    label: str


@dataclass(frozen=True)
class ContactMethod:
    """One way to reach a person: `kind` through channel `channel_id` at `address` (what the
    adapter's `Dispatch.direct` takes), `position` in their order (0 = first)."""

    kind: str
    channel_id: int
    channel_label: str
    address: str
    position: int


def contact_order(person: Person, identities: Sequence[PersonIdentity]) -> list[str]:
    """The kinds to try, in order: the person's own order, or every linked kind (in the
    order linked) then e-mail."""
    if person.contact_order:
        return [k for k in person.contact_order if k in CONTACT_KINDS]
    order: list[str] = []
    for identity in sorted(identities, key=lambda i: (i.created_at, i.id or 0)):
        if identity.kind in CONTACT_KINDS and identity.kind != EMAIL and identity.kind not in order:
            order.append(identity.kind)
    return [*order, EMAIL]


def contact_methods(
    person: Person, identities: Sequence[PersonIdentity], channels: Sequence[DirectChannel],
) -> list[ContactMethod]:
    """Where the desk can reach `person` now, in their order (see the module's docstring)."""
    by_kind: dict[str, DirectChannel] = {}
    for channel in channels:
        by_kind.setdefault(channel.kind, channel)
    found: list[ContactMethod] = []
    for kind in contact_order(person, identities):
        through = by_kind.get(kind)
        if through is None:
            continue
        if kind == EMAIL:
            address: str | None = person.email
        else:
            address = next((i.value for i in identities if i.kind == kind), None)
        if address:
            found.append(ContactMethod(kind, through.id, through.label, address, len(found)))
    return found


class Presence(StrEnum):
    """Whether a person can be offered a handoff now."""

    AVAILABLE = "available"
    AWAY = "away"
    OFF_HOURS = "off_hours"  # outside their own working hours (teams skip them; on-call does not)
    DISABLED = "disabled"


def presence(person: Person, now: datetime, schedules: Mapping[str, HoursConfig]) -> Presence:
    """`person`'s presence at `now`: disabled, away (until `away_until`, when set, has passed),
    outside their working hours, or available. An unknown working-hours name counts as always
    (check-config refuses one in the YAML)."""
    if person.disabled_at is not None:
        return Presence.DISABLED
    if person.away_since is not None and (person.away_until is None or person.away_until > now):
        return Presence.AWAY
    hours = schedules.get(person.working_hours) if person.working_hours else None
    if hours is not None and not is_open(hours, now):
        return Presence.OFF_HOURS
    return Presence.AVAILABLE
