"""People: the humans of the desk, how they sign in, and the identities that are theirs.

Until a directory existed, everyone in the inbox was "the owner" behind one token, and one
human pressing Approve in Slack and in Telegram was two approvers. Now:

- `directory` — `People`: the rows (config roster, command line, admin page, first SSO
  sign-in), never deleted, only disabled; `resolve` maps a provider identity to its person.
- `credentials` — argon2id passwords and TOTP codes, an unknown account costing what a wrong
  password does.
- `sessions` — server-side sessions (only a token's hash stored; idle and absolute expiry;
  revoked by signing out, "sign out everywhere" and disabling).
- `tokens` — personal API tokens, shown once, hashed, capped by their person's role.
- `sign_in` — checking a password sign-in, every refusal alike.
- `second_factor` — TOTP: setting it up (confirmed by a first code), each code accepted once.
- `invitations` — signed, single-use, expiring links that set a password (invitation, reset).
- `linking` — one-time codes a person sends from a channel to link that identity.
- `actor` — `Actor`: who did something (person, service identity, or an unlinked provider
  user), what claims, releases, replies, votes and audit rows record.
- `oidc` — single sign-on over OpenID Connect (when `sign_in.sso` is set).
"""

from __future__ import annotations

from bot.domain.people.actor import OWNER_TOKEN, Actor
from bot.domain.people.directory import Applied, IdentityTaken, InvalidPerson, PasswordChanged, People, email_key
from bot.domain.people.invitations import Invitations, LinkKind, LinkNotValid, LinkRefused
from bot.domain.people.linking import LinkCodes, LinkOutcome, Redeemed
from bot.domain.people.second_factor import CodeRefused, SecondFactor, TotpSetup, totp_on
from bot.domain.people.sessions import OpenSession, Sessions
from bot.domain.people.sign_in import PasswordSignIn, SignInRefused
from bot.domain.people.tokens import ApiTokens, InvalidToken, TokenUse

__all__ = [
    "OWNER_TOKEN", "Actor", "ApiTokens", "Applied", "CodeRefused", "IdentityTaken", "InvalidPerson", "InvalidToken",
    "Invitations", "LinkCodes", "LinkKind", "LinkNotValid", "LinkOutcome", "LinkRefused", "OpenSession", "PasswordChanged",
    "PasswordSignIn", "People", "Redeemed", "SecondFactor", "Sessions", "SignInRefused", "TokenUse", "TotpSetup", "email_key",
    "totp_on",
]
