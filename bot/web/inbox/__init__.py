"""The owner inbox (`/inbox`): active handoffs, a live transcript, reply and release.

Threat model, briefly. The inbox can end handoffs and speak to subscribers, so:
- it sits behind `owner.token`; a login sets a signed, expiring, HttpOnly, SameSite=Strict
  cookie scoped to /inbox (an inbox without a token — loopback only, see config — still
  gets the cookie, because CSRF protection hangs off it);
- people sign in as themselves (e-mail and password, optionally a TOTP code; invitation and
  reset links set the password), the owner token stays as the service login (login.py,
  second_step.py, welcome.py);
- wrong tokens, passwords and codes are counted per client address, and past
  `owner.max_login_failures_per_minute` the address waits (429, bot/web/login_attempts.py);
  wrong passwords and codes for one account past `sign_in.max_failures_per_account` per
  15 minutes make that account wait, whichever address they came from;
- logging out revokes the session on the server (bot/domain/revocations.py): a copy of the
  cookie, replayed before it expires, is refused like no cookie at all;
- every POST carries a CSRF token bound to that cookie, and a cross-site `Origin` or
  `Sec-Fetch-Site` is refused, so another site cannot make the owner's browser release a
  handoff;
- GET never changes state; pages are autoescaped and sent with a strict CSP (one nonce per
  response for the small live-update script), no-referrer and no-store.

Approvals: the list page shows every pending approval ("Waiting for approval": action, risk,
subscriber, the exact arguments, deadline) with Approve / Deny (an optional reason, and
"Always allow" when the policy is `ask`), posted like every other inbox form (CSRF token,
same origin) and decided by the approvals' compare-and-set (`via="inbox"`), so a stale or
repeated post changes nothing. Decided approvals are listed with their receipt (who, when,
through what, the argument hash) and what running the action returned, on the list page and
on the handoff page of their conversation. The owner decides any approval, whichever
channels its prompt went to: the inbox is the owner's own console, like the HTTP API.

Who is speaking: replies from the inbox carry the name this browser chose (bot/web/owner_name.py,
"Support" until then), so subscribers and the chat's "joined" line see a person, not a role.

Return-form link: the handoff page shows the current link's state as forms/links.py decides
it and offers the link only while it works; a fresh one is a CSRF-protected POST that
supersedes the older links (`reissue_form_link`, audited as `form_link_issued`).

Routes: a handoff on a route shows its step, who was notified where, who took it and, while
nobody has, when the ladder moves on (bot/web/inbox_routes.py builds it for the pages and both
long-polls). Claim is a POST like release, decided by the handoff service's compare-and-set, so
a late or repeated press changes nothing and says who has it; inbox replies on a route come
from the route's owner inbox thread and claim it as any recipient's reply does.

Live list: `/inbox` long-polls `GET /inbox/updates?since=<version>`. The version is a hash
of a few indexed reads (the open handoffs with their states, deadlines and newest message
id; the pending approvals; approved ones whose action has not finished; `Queries.inbox_version`
in bot/domain/queries.py, where all of the inbox's reads live), so asking "anything
newer than X?" costs little; only a changed version builds the whole list. A waiting request
wakes on any write this process's ConversationBus hears (a handoff starting in a conversation
the list does not show yet too) and re-reads the database every 2 s, so what another
instance writes shows up as well. The page applies the answer in place with DOM calls (textContent, never markup from
data) and never touches a form the owner is typing in.

The package, one module per concern: owner.py (who is asking: sessions, CSRF, the error
pages), login.py (sign in and out, the reply name), sso.py (single sign-on), pending.py (a sign-in halfway, between
the password and the TOTP code), second_step.py (the TOTP step), welcome.py (invitation and
reset links), account.py (your own account: password, TOTP, sessions), view.py (`InboxView`: what the pages
show), listing.py (the list and its live updates), handoff_page.py (a handoff's page and its
live transcript), actions.py (reply, release, claim, new form link, decide an approval),
people_page.py (the admin's people pages), oncall_page.py (who is on call, overrides),
reach_page.py (available or away, and how the desk reaches you).
"""

from __future__ import annotations

from fastapi import APIRouter

from bot.web.inbox import (
    account,
    actions,
    handoff_page,
    linking_page,
    listing,
    login,
    oncall_page,
    people_page,
    reach_page,
    second_step,
    sso,
    welcome,
)
from bot.web.inbox.owner import SignedIn, install_inbox_errors, needs, page, posts, session_of
from bot.web.inbox.view import InboxView

# The inbox's routes, in the order they always had
inbox = APIRouter()
inbox.include_router(login.router)
inbox.include_router(sso.router)
inbox.include_router(listing.router)
inbox.include_router(handoff_page.router)
inbox.include_router(actions.router)
inbox.include_router(second_step.router)
inbox.include_router(welcome.router)
inbox.include_router(account.router)
inbox.include_router(people_page.router)
inbox.include_router(linking_page.router)  # until the account page takes it in
inbox.include_router(oncall_page.router)
inbox.include_router(reach_page.router)

__all__ = [
    "InboxView", "SignedIn", "inbox", "install_inbox_errors", "needs", "page", "posts", "session_of",
]
