"""The account page (`/inbox/account`): who you are signed in as, and your own sign-in.

Any role may open it (viewer and up): your name, e-mail, role and timezone; changing your
password (the current one required, wrong guesses counted against the account like wrong
sign-ins, and every other session of yours ended, since a change often means someone else
may know the old one); TOTP on (a fresh secret, confirmed by a first code:
bot/domain/people/second_factor.py) and off (a current code required, refused while the desk
requires TOTP); how many sessions you have open, and "Sign out everywhere"; for agents and
admins, whether they are available or away and how the desk reaches them
(bot/web/inbox/reach_page.py). The owner token's
service session is nobody's account: the page says so and offers only signing out.

Other pages add their sections to this one (linked identities, personal API tokens): see the
`account_extra` block of templates/inbox/account.html.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, Response

from bot.config.people import Role
from bot.domain.people import CodeRefused, PasswordChanged, totp_on
from bot.domain.people.credentials import WeakPassword, check_new_password, hash_password, password_fingerprint, verify_password
from bot.web.deps import app_desk
from bot.web.inbox.owner import COOKIE, SignedIn, needs, page, posts, redirect, set_session_cookie
from bot.web.inbox.pending import locked_out
from bot.web.inbox.reach_page import reach_context
from bot.web.login_attempts import LoginAttemptsDep

router = APIRouter()
PAGE = "/inbox/account"


def _no_account(request: Request) -> HTMLResponse:
    """What the owner token's service session gets from the forms of an account it has not."""
    return page(app_desk(request).renderer, "inbox/error.html", status=409, title="No account",
                message="You are signed in with the owner token, a service identity: it has no password, TOTP or "
                        "sessions of its own to change. Sign in as a person for that.")


def _done(notice: str) -> Response:
    return redirect(f"{PAGE}?notice={quote(notice)}")


async def account_page(request: Request, who: SignedIn, *, notice: str = "", problem: str = "", field: str = "",
                       status: int = 200) -> HTMLResponse:
    """The page, with a notice (what just worked) or a problem (naming its field)."""
    desk = app_desk(request)
    person = await desk.people.find(who.person.id) if who.person is not None else None
    context: dict[str, Any] = {"person": person, "notice": notice[:300], "problem": problem, "field": field,
               "require_totp": desk.config.sign_in.require_totp, "passwords": desk.config.sign_in.passwords}
    if person is not None:
        context |= {"open_sessions": await desk.sessions.open_count(person.id), "totp_on": totp_on(person),
                    "totp_setup": desk.second_factor.setup_of(person)} | await reach_context(desk, person)
    return page(desk.renderer, "inbox/account.html", who, status=status, **context)


@router.get(PAGE, response_class=HTMLResponse, include_in_schema=False)
async def show(request: Request, notice: str = "", who: SignedIn = Depends(needs(Role.VIEWER))) -> HTMLResponse:
    return await account_page(request, who, notice=notice)


@router.post(f"{PAGE}/password", include_in_schema=False)
async def change_password(
    request: Request, attempts: LoginAttemptsDep, current: str = Form(default=""), password: str = Form(default=""),
    repeated: str = Form(default=""), who: SignedIn = Depends(posts(Role.VIEWER)),
) -> Response:
    """A new password, the current one required; this browser stays signed in, every other
    session of theirs ends."""
    if who.person is None:
        return _no_account(request)
    desk = app_desk(request)
    person = await desk.people.get(who.person.id)
    client = attempts.client(request)
    if (waiting := locked_out(request, attempts, client, person.email)) is not None:
        return waiting
    if person.password_hash is None or not verify_password(person.password_hash, current):
        attempts.failed(client, person.email)
        await desk.password_sign_in.failed(person, client=client, step="password_change", reason="wrong_password")
        return await account_page(request, who, status=400, field="current",
                                  problem="current: that is not your current password")
    try:
        check_new_password(password)
    except WeakPassword as weak:
        return await account_page(request, who, status=400, field="password", problem=weak.message)
    if password != repeated:
        return await account_page(request, who, status=400, field="repeated",
                                  problem="repeated: the two new passwords differ; type the same password twice")
    actor = who.actor().label
    try:
        await desk.people.set_password_hash(person.id, hash_password(password), actor=actor, event="password_changed",
                                            if_fingerprint=password_fingerprint(person.password_hash))
    except PasswordChanged:
        return await account_page(request, who, status=409, field="current",
                                  problem="current: your password was changed meanwhile; reload and try again")
    attempts.succeeded(client, person.email)
    ended = await desk.sessions.revoke_everywhere(person.id, actor=actor)
    token, _session = await desk.sessions.open(person, via="password")
    response = _done(f"Your password is changed. {ended - 1} other session(s) were signed out." if ended > 1
                     else "Your password is changed.")
    set_session_cookie(desk.config, response, token)
    return response


@router.post(f"{PAGE}/totp", include_in_schema=False)
async def begin_totp(request: Request, who: SignedIn = Depends(posts(Role.VIEWER))) -> Response:
    """A fresh TOTP secret, shown on the account page until a first code confirms it."""
    if who.person is None:
        return _no_account(request)
    desk = app_desk(request)
    person = await desk.people.get(who.person.id)
    try:
        await desk.second_factor.begin(person, actor=who.actor().label)
    except CodeRefused as refused:
        return await account_page(request, who, status=409, field="totp", problem=refused.message)
    return redirect(f"{PAGE}#totp")


@router.post(f"{PAGE}/totp/confirm", include_in_schema=False)
async def confirm_totp(request: Request, code: str = Form(default=""), who: SignedIn = Depends(posts(Role.VIEWER))) -> Response:
    if who.person is None:
        return _no_account(request)
    desk = app_desk(request)
    person = await desk.people.get(who.person.id)
    try:
        await desk.second_factor.confirm(person, code, actor=who.actor().label)
    except CodeRefused as refused:
        return await account_page(request, who, status=400, field="code", problem=refused.message)
    return _done("TOTP is on: signing in with your password now also asks for a code from your app.")


@router.post(f"{PAGE}/totp/off", include_in_schema=False)
async def turn_off_totp(request: Request, attempts: LoginAttemptsDep, code: str = Form(default=""),
                        who: SignedIn = Depends(posts(Role.VIEWER))) -> Response:
    """TOTP off, a current code required (refused while the desk requires TOTP); wrong codes
    count against the account like wrong sign-ins, so a borrowed session cannot guess one."""
    if who.person is None:
        return _no_account(request)
    desk = app_desk(request)
    person = await desk.people.get(who.person.id)
    if desk.config.sign_in.require_totp:
        return await account_page(request, who, status=409, field="totp",
                                  problem="totp: this desk requires it (sign_in.require_totp); it cannot be turned off")
    client = attempts.client(request)
    if (waiting := locked_out(request, attempts, client, person.email)) is not None:
        return waiting
    try:
        await desk.second_factor.check(person, code)
    except CodeRefused as refused:
        attempts.failed(client, person.email)
        await desk.password_sign_in.failed(person, client=client, step="totp_off", reason=refused.code)
        return await account_page(request, who, status=400, field="off-code", problem=refused.message)
    await desk.second_factor.turn_off(person, actor=who.actor().label)
    return _done("TOTP is off: signing in needs your password only.")


@router.post(f"{PAGE}/sign-out-everywhere", include_in_schema=False)
async def sign_out_everywhere(request: Request, who: SignedIn = Depends(posts(Role.VIEWER))) -> Response:
    """End every session of this person, this browser's too: back to the login page."""
    if who.person is None:
        return _no_account(request)
    await app_desk(request).sessions.revoke_everywhere(who.person.id, actor=who.actor().label)
    response = redirect("/inbox/login")
    response.delete_cookie(COOKIE, path="/")
    return response

