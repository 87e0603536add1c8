"""Invitations and password resets: signed links that set a person's password, once.

An admin invites a person (the admin page, `handoff people add`) or issues a reset link
(no mail is guaranteed to leave the desk, so there is no "forgot password?": an admin hands
the link over). The link is `{public_url}/inbox/welcome/<token>` or `/inbox/reset/<token>`;
the token is the person's id and a fingerprint of their current password hash ("none" for
an invitation), signed with the desk's keys under a salt for each kind and stamped with the
time (bot/runtime/timed_tokens.py), so it:
- cannot be forged or turned into the other kind;
- expires after `sign_in.invitation_ttl`, by the desk's clock;
- works once: setting the password changes the fingerprint, and the write is a
  compare-and-set on the hash it replaces, so two racing posts set it once;
- dies when the person is disabled.
Opening the link changes nothing (mail scanners open links); only the form's post does.
A reset also ends every session the person had, since a reset often means someone else
may know the old password.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from bot.domain.people.actor import Actor
from bot.domain.people.credentials import hash_password, password_fingerprint
from bot.domain.people.directory import PasswordChanged, People
from bot.domain.people.sessions import Sessions
from bot.errors import DeskError
from bot.runtime.clock import Clock
from bot.runtime.timed_tokens import TimedTokens, TokenRefused
from bot.store.models import Person


class LinkKind(StrEnum):
    INVITE = "invite"
    RESET = "reset"

    @property
    def path(self) -> str:
        return "/inbox/welcome/" if self is LinkKind.INVITE else "/inbox/reset/"


class LinkNotValid(DeskError):
    """The link cannot set a password (any more); `reason` is expired | used | invalid |
    disabled, and the message says what to do."""

    code = "link_not_valid"
    status = 410

    MESSAGES = {
        "expired": "This link has expired. Ask an admin of the desk for a new one.",
        "used": "This link was used already: a password is set. Sign in with it, or ask an admin for a reset link.",
        "disabled": "This account is disabled. Ask an admin of the desk.",
        "invalid": "This link is not valid. Check that you opened the whole link you were given.",
    }

    def __init__(self, reason: str) -> None:
        super().__init__(self.MESSAGES[reason])
        self.reason = reason


class LinkRefused(DeskError):
    """No link of this kind can be made for this person (the message says why)."""

    code = "link_refused"
    status = 409


class Invitations:
    def __init__(self, people: People, sessions: Sessions, *, secret_keys: list[str], public_url: str,
                 ttl: timedelta, clock: Clock) -> None:
        self.people, self.sessions = people, sessions
        self.public_url = public_url.rstrip("/")
        self.ttl = ttl
        self._tokens = {kind: TimedTokens(secret_keys, f"handoff-desk.person-{kind}.v1", clock, ttl) for kind in LinkKind}

    def link_for(self, person: Person, kind: LinkKind | str = LinkKind.INVITE) -> str:
        """The link that lets `person` set their password: an invitation (they have none yet)
        or a reset (they have one). LinkRefused for a disabled person, or an invitation for
        someone who has a password already (a reset link is what they need)."""
        kind = LinkKind(kind)
        if person.disabled_at is not None:
            raise LinkRefused(f"person: {person.id} is disabled; enable them before issuing a link")
        if kind is LinkKind.INVITE and person.password_hash is not None:
            raise LinkRefused(f"kind: {person.id} has a password already; issue a reset link instead")
        token = self._tokens[kind].token([person.id, password_fingerprint(person.password_hash)])
        return f"{self.public_url}{kind.path}{token}"

    async def person_for(self, token: str, kind: LinkKind | str) -> Person:
        """The person a link of `kind` is for, if it still works; LinkNotValid otherwise."""
        try:
            payload = self._tokens[LinkKind(kind)].payload(token)
        except TokenRefused as refused:
            raise LinkNotValid(refused.reason) from None
        if len(payload) != 2:
            raise LinkNotValid("invalid")
        pid, fingerprint = payload
        person = await self.people.find(pid)
        if person is None:
            raise LinkNotValid("invalid")
        if person.disabled_at is not None:
            raise LinkNotValid("disabled")
        if password_fingerprint(person.password_hash) != fingerprint:
            raise LinkNotValid("used")
        return person

    async def set_password(self, token: str, kind: LinkKind | str, password: str) -> Person:
        """Use the link: set the person's password (WeakPassword names what is wrong with it),
        once. A reset ends the person's sessions. Returns the person as now stored."""
        kind = LinkKind(kind)
        person = await self.person_for(token, kind)
        new_hash = hash_password(password)
        actor = Actor.of_person(person, "invitation" if kind is LinkKind.INVITE else "reset link").label
        try:
            await self.people.set_password_hash(
                person.id, new_hash, actor=actor, event="password_set" if kind is LinkKind.INVITE else "password_reset",
                if_fingerprint=password_fingerprint(person.password_hash),
            )
        except PasswordChanged:
            raise LinkNotValid("used") from None
        if kind is LinkKind.RESET:
            await self.sessions.revoke_everywhere(person.id, actor=actor)
        return await self.people.get(person.id)
