"""A sign-in halfway: the password was right, the TOTP code (or its setup) is still to come.

Until the code is right there is no session, only a short-lived cookie: the person's id and
the fingerprint of their password hash, signed and stamped with the desk's clock
(bot/runtime/timed_tokens.py), good for five minutes, scoped to /inbox/login, HttpOnly,
SameSite=Strict. A password changed meanwhile, or the person disabled, ends it. Its form's
CSRF token is an HMAC of the cookie, so another site can neither post a code for it nor
read one to post.

`finish` is how every sign-in ends (a password, a password and a code, a password just set
from a link): the address's and the account's failures forgiven, a session opened, its
cookie set, the half-way cookie dropped.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import timedelta

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from bot.config import Config
from bot.domain.people import totp_on
from bot.domain.people.credentials import password_fingerprint
from bot.runtime.timed_tokens import TimedTokens, TokenRefused
from bot.store.models import Person
from bot.web.deps import app_desk
from bot.web.inbox.owner import page, redirect, set_session_cookie
from bot.web.login_attempts import LoginAttempts

COOKIE = "handoff_signing_in"
COOKIE_PATH = "/inbox/login"
LIFETIME = timedelta(minutes=5)
SALT = "handoff-desk.inbox-signing-in.v1"


@dataclass(frozen=True)
class HalfSignedIn:
    """The person whose password was right, where they were going, and their form's CSRF token."""

    person: Person
    next: str
    csrf: str


class NotSigningIn(Exception):
    """No sign-in is halfway in this browser (no cookie, expired, or no longer matching)."""


def _tokens(config: Config, request: Request) -> TimedTokens:
    return TimedTokens(config.signing_keys, SALT, app_desk(request).clock, LIFETIME)


def _csrf(config: Config, cookie: str) -> str:
    return hmac.new(config.secret_key.get_secret_value().encode(), f"signing-in:{cookie}".encode(), hashlib.sha256).hexdigest()


def remember(config: Config, request: Request, response: Response, person: Person, target: str) -> None:
    """Set the half-way cookie for `person` (whose password was just right) on `response`."""
    cookie = _tokens(config, request).token([person.id, password_fingerprint(person.password_hash), target])
    response.set_cookie(COOKIE, cookie, max_age=int(LIFETIME.total_seconds()), path=COOKIE_PATH, httponly=True,
                        samesite="strict", secure=config.public_url.startswith("https://"))


async def half_signed_in(config: Config, request: Request) -> HalfSignedIn:
    """The sign-in this browser is halfway through; NotSigningIn when there is none that
    still holds (expired, another password since, the person disabled)."""
    cookie = request.cookies.get(COOKIE)
    if not cookie or len(cookie) > 1000:
        raise NotSigningIn()
    try:
        payload = _tokens(config, request).payload(cookie)
    except TokenRefused:
        raise NotSigningIn() from None
    if len(payload) != 3:
        raise NotSigningIn()
    pid, fingerprint, target = payload
    person = await app_desk(request).people.find(pid)
    if person is None or person.disabled_at is not None or password_fingerprint(person.password_hash) != fingerprint:
        raise NotSigningIn()
    return HalfSignedIn(person, target, _csrf(config, cookie))


def check_csrf(pending: HalfSignedIn, token: str) -> bool:
    return hmac.compare_digest(token.encode(), pending.csrf.encode())


async def finish(request: Request, attempts: LoginAttempts, client: str, person: Person, *, via: str, target: str) -> Response:
    """End a sign-in: failures forgiven, a session opened for `person`, off to `target`."""
    desk = app_desk(request)
    attempts.succeeded(client, person.email)
    token, _session = await desk.sessions.open(person, via=via)
    response = redirect(target)
    set_session_cookie(desk.config, response, token)
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


async def password_was_right(request: Request, attempts: LoginAttempts, client: str, person: Person, *,
                             target: str) -> Response:
    """After a right password (typed at the login, or just set from a link): a session, or,
    when the person has TOTP on or the desk requires it, halfway to the code step (setting
    TOTP up first if they have none). A link never skips the second factor."""
    desk = app_desk(request)
    if not totp_on(person) and not desk.config.sign_in.require_totp:
        return await finish(request, attempts, client, person, via="password", target=target)
    if not totp_on(person):
        await desk.second_factor.begin(person, actor=f"{person.name} (sign-in)")
        person = await desk.people.get(person.id)
    response = redirect("/inbox/login/code")
    remember(desk.config, request, response, person, target)
    return response


def locked_out(request: Request, attempts: LoginAttempts, client: str, account: str | None = None,
               cause: str = "Too many failed sign-ins came from your address or for this account.") -> HTMLResponse | None:
    """The 429 page (`cause`, when to try again, Retry-After) while `client`, or `account`
    when given, has no sign-ins left for now; None when it may try."""
    seconds = attempts.locked_for(client, account)
    if not seconds:
        return None
    desk = app_desk(request)
    until = desk.clock.now() + timedelta(seconds=seconds)
    response = page(desk.renderer, "inbox/error.html", status=429, title="Too many attempts",
                    message=f"{cause} Try again in {seconds} s (after {until.strftime('%H:%M:%S')} UTC).")
    response.headers["Retry-After"] = str(seconds)
    return response


def safe_next(target: str) -> str:
    """Only local paths: a login link must not bounce anyone to another site."""
    return target if target.startswith("/inbox") and "//" not in target and "\\" not in target else "/inbox"
