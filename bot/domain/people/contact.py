"""How the desk reaches a person, as their account page, the admin's pages and the API show it:
their contact methods in order (bot/domain/people/reach.py) through the desk's channels that
can send to one person, each with how it was verified, the kinds they have not linked yet,
and whether the config file sets the order (then the file wins on every start, so the pages
show it read-only rather than offer changes a restart would undo).

Moving a method up or down stores the whole order (`moved`): every kind, the shown ones
swapped, so a kind they link later is reached too instead of being left out of an order
stored before it existed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.config import CONTACT_KINDS
from bot.domain.people.reach import EMAIL, ContactMethod, DirectChannel, contact_methods, contact_order
from bot.store.models import Person, PersonIdentity
from channels.base import ChannelAdapter


@dataclass(frozen=True)
class ShownMethod:
    """One contact method with how the desk knows the address is theirs."""

    method: ContactMethod
    verified: str  # "linked by code", "linked from the command line", "their sign-in address"

    @property
    def masked(self) -> str:
        """The address with a phone number's middle hidden (+49•••••4567); others as they are."""
        address = self.method.address
        if address.startswith("+") and address[1:].isdigit() and len(address) > 6:
            return address[:3] + "•" * (len(address) - 7) + address[-4:]
        return address


@dataclass(frozen=True)
class ContactView:
    methods: tuple[ShownMethod, ...]
    unlinked: tuple[DirectChannel, ...]  # channels that can reach them once they link an identity there
    from_file: bool  # the config's `people[].contact` sets the order: read-only here


VERIFIED = {"code": "linked by code", "cli": "linked from the command line", "sso": "linked by single sign-on"}


def direct_channels(adapters: Sequence[ChannelAdapter], kind_of: Callable[[int], str]) -> list[DirectChannel]:
    """The desk's channels whose adapter can send to one person (`capabilities.direct`),
    under the kind their people's identities carry (the config's kind of the channel)."""
    return [DirectChannel(a.id, kind_of(a.id), a.label) for a in sorted(adapters, key=lambda a: a.id)
            if a.capabilities.direct]


def contact_view(person: Person, identities: Sequence[PersonIdentity], channels: Sequence[DirectChannel], *,
                 from_file: bool) -> ContactView:
    by_kind = {i.kind: i for i in identities}
    shown = tuple(ShownMethod(m, "their sign-in address" if m.kind == EMAIL
                              else VERIFIED.get(by_kind[m.kind].verified_via, f"linked ({by_kind[m.kind].verified_via})"))
                  for m in contact_methods(person, identities, channels))
    unlinked: dict[str, DirectChannel] = {}
    for channel in channels:
        if channel.kind != EMAIL and channel.kind not in by_kind:
            unlinked.setdefault(channel.kind, channel)
    return ContactView(shown, tuple(unlinked.values()), from_file)


def moved(person: Person, identities: Sequence[PersonIdentity], channels: Sequence[DirectChannel], kind: str,
          *, up: bool) -> list[str] | None:
    """The whole order with `kind` swapped with the shown method before (`up`) or after it;
    None when it is not shown or already at that end."""
    shown = [m.kind for m in contact_methods(person, identities, channels)]
    if kind not in shown:
        return None
    here = shown.index(kind)
    there = here - 1 if up else here + 1
    if not 0 <= there < len(shown):
        return None
    order = contact_order(person, identities)
    order += [k for k in CONTACT_KINDS if k not in order]
    a, b = order.index(shown[here]), order.index(shown[there])
    order[a], order[b] = order[b], order[a]
    return order
