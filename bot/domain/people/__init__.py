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
- `linking` — one-time codes a person sends from a channel to link that identity.
- `actor` — `Actor`: who did something (person, service identity, or an unlinked provider
  user), what claims, releases, replies, votes and audit rows record.
- `oidc` — single sign-on over OpenID Connect (when `sign_in.sso` is set).
"""

from __future__ import annotations

from bot.domain.people.actor import OWNER_TOKEN, Actor
from bot.domain.people.directory import Applied, IdentityTaken, InvalidPerson, People, email_key
from bot.domain.people.linking import LinkCodes, LinkOutcome, Redeemed
from bot.domain.people.sessions import OpenSession, Sessions
from bot.domain.people.tokens import ApiTokens, InvalidToken, TokenUse

__all__ = [
    "OWNER_TOKEN", "Actor", "ApiTokens", "Applied", "IdentityTaken", "InvalidPerson", "InvalidToken", "LinkCodes",
    "LinkOutcome", "OpenSession", "People", "Redeemed", "Sessions", "TokenUse", "email_key",
]
