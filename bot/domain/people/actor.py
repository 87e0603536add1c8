"""Who did something, as the audit trail, claims, releases and votes record it.

A person acts as themselves wherever they come from (the inbox, Slack, Telegram …): `person_id`
is the same, `via` says the door. A service identity (the owner token, the agent's key) acts
too, but is nobody: it never counts as a person in a two-person approval. A provider identity
linked to nobody is known only by what its provider says (`provider_user`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.store.models import Person

OWNER_TOKEN = "owner"  # the service identity behind `owner.token`, named as the audit trail always named it


@dataclass(frozen=True, kw_only=True)
class Actor:
    """`name` is what people read ("Olga Petrova"), `via` how they came (inbox, api, or a
    channel: "channel:3"); `person_id` the person of the directory behind it, or None."""

    name: str
    via: str
    person_id: str | None = None
    service: bool = False
    provider_user: str | None = None  # "<channel id>:<the provider's user id>" when nobody is linked to it

    @classmethod
    def of_person(cls, person: Person, via: str) -> Actor:
        return cls(name=person.name, via=via, person_id=person.id)

    @classmethod
    def owner_token(cls, via: str) -> Actor:
        return cls(name=OWNER_TOKEN, via=via, service=True)

    @property
    def is_person(self) -> bool:
        return self.person_id is not None

    @property
    def label(self) -> str:
        """The audit trail's actor text: "Olga Petrova (inbox)"."""
        return f"{self.name} ({self.via})"

    @property
    def voter(self) -> str | None:
        """Who a vote counts as: the person, else the service or the unlinked provider user
        (both refused where two people are needed), else nobody verified (None)."""
        if self.person_id is not None:
            return f"person:{self.person_id}"
        if self.service:
            return "owner"
        return self.provider_user
