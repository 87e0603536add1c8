"""The people of the desk as the config declares them (`people:`), and how they sign in
(`sign_in:`).

A person is a human who answers subscribers, claims handoffs and votes on approvals. The
roster may live in the YAML so a team keeps it in git: it is applied on every start (added or
updated, never deleted: a person removed from the file keeps their history and is only
disabled when the file says `disabled: true`). People added from the inbox or the command line
live in the database alone. Provider identities (a person's user id on a channel) are
never declared here: they are linked by the person themselves, with a one-time code sent from
the channel, so nobody can be made to speak as someone else by a typo in a file.
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field, field_validator

from bot.config.hours import ScheduleName
from bot.config.roles import Role as Role  # re-exported: the people section is where callers look for it
from bot.config.sso import SsoConfig
from bot.config.values import Duration, _Section, between, each_once

PERSON_ID = re.compile(r"[a-z][a-z0-9_-]{0,39}")
EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s]{1,255}\.[^@\s.]{1,63}")


# The ways to reach a person directly: a channel kind whose adapter can send to one person
# (`Capabilities.direct`), at the identity they linked on it, or their e-mail address.
ContactKind = Literal["slack", "telegram", "discord", "whatsapp", "email"]
CONTACT_KINDS: tuple[str, ...] = ("slack", "telegram", "discord", "whatsapp", "email")


def person_id(value: str) -> str:
    """A person's id: lower-case letters, digits, `-` and `_`, starting with a letter, at
    most 40 characters ("olga", "ben-k"); it appears in routes (`person:olga`) and the CLI."""
    if not PERSON_ID.fullmatch(value):
        raise ValueError("must be 1-40 lower-case letters, digits, '-' or '_', starting with a letter, such as olga")
    return value


def email_address(value: str) -> str:
    """An e-mail address as given; compared case-insensitively by the directory. Refused,
    not repaired, when it does not look like one."""
    if not EMAIL.fullmatch(value.strip()) or value != value.strip():
        raise ValueError("must be an e-mail address such as olga@example.com, with no surrounding spaces")
    return value


def timezone_name(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {value!r}: use an IANA name such as Europe/Berlin or UTC") from None
    return value


class PersonConfig(_Section):
    id: str = Field(description="The person's id: lower-case, such as olga; used by the CLI and in routes.")
    name: str = Field(min_length=1, max_length=80, description="What subscribers see on this person's replies, such as Olga from Support.")
    email: str = Field(description="Their e-mail: where invitations point, and how single sign-on finds them.")
    role: Role = Field(default=Role.AGENT, description="admin, agent or viewer.")
    timezone: str = Field(default="UTC", description="An IANA timezone, such as Europe/Berlin.")
    contact: list[ContactKind] | None = Field(
        default=None, description=(
            "How a route reaches them directly, in order: slack, telegram, discord, whatsapp, email. Each is their "
            "identity they linked on that channel (e-mail: their address). Unset: every identity they linked, in the "
            "order linked, then e-mail."
        ),
    )
    working_hours: ScheduleName | None = Field(
        default=None, description="A schedule under hours:; outside it teams skip them (on-call schedules do not). Unset: always.",
    )
    max_concurrent: int | None = Field(
        default=None, ge=1, le=1000, description="Open handoffs they hold at most before teams skip them; unset: the step's max_concurrent.",
    )
    disabled: bool = Field(default=False, description="True signs them out everywhere and refuses their sign-ins and tokens.")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return person_id(value)

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        return email_address(value)

    @field_validator("contact")
    @classmethod
    def _contact_once(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else each_once(value, "names {} twice; list each contact method once")

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return timezone_name(value)


class SignInConfig(_Section):
    """How people sign in to the inbox: with their own password (and, optionally, a TOTP
    code), and with single sign-on when `sso` is set. `owner.token` keeps working as the
    bootstrap admin login; it signs in a service identity, not a person."""

    passwords: bool = Field(default=True, description="Whether people may sign in with their own password.")
    require_totp: bool = Field(default=False, description="Whether every password sign-in also needs a TOTP code (people set it up on first sign-in).")
    session_idle: Annotated[Duration, between("5m", "7d")] = Field(
        default=timedelta(hours=2), description="A session unused this long is over."
    )
    session_max: Annotated[Duration, between("15m", "30d")] = Field(
        default=timedelta(hours=12), description="A session is over this long after sign-in, however busy."
    )
    invitation_ttl: Annotated[Duration, between("10m", "30d")] = Field(
        default=timedelta(days=3), description="How long an invitation or password-reset link works (once)."
    )
    sso: SsoConfig | None = Field(
        default=None, description="Single sign-on through one OpenID Connect provider; unset offers none.",
    )
    max_failures_per_account: int = Field(
        default=5, ge=1, le=1000, description="Wrong passwords for one account per 15 minutes before it must wait (429)."
    )
    approvals_from_unlinked: Literal["allow", "refuse"] = Field(
        default="allow", description=(
            "Who may decide a one-person approval. allow: whoever the prompt reached (a press in its channel, the "
            "decision link). refuse: only a person of the desk (a channel identity linked to them, or signed in) or "
            "the owner token; a press from an identity linked to nobody, or the bare decision link, is refused and "
            "recorded. Two-person approvals always count people only."
        ),
    )
