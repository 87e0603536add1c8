"""The second step of a password sign-in: the TOTP code, or setting TOTP up first.

Reached only halfway through a sign-in (bot/web/inbox/pending.py: the password was right
less than five minutes ago in this browser). A person with TOTP on types the current code of
their app; a person without it, on a desk with `sign_in.require_totp`, sees the secret that
the password step made for them (otpauth:// URI and base32 text) and types a first code from
it, which turns TOTP on. No session exists until the code is right. Wrong codes count
against the client's address and the account, like wrong passwords (bot/web/login_attempts.py),
and each code is accepted once (bot/domain/people/second_factor.py).
"""

from __future__ import annotations

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from bot.domain.people import CodeRefused, totp_on
from bot.domain.rendering import Renderer
from bot.web.deps import ConfigDep, RendererDep, app_desk
from bot.web.inbox.owner import page
from bot.web.inbox.pending import COOKIE, COOKIE_PATH, HalfSignedIn, NotSigningIn, check_csrf, finish, half_signed_in, locked_out
from bot.web.login_attempts import LoginAttemptsDep
from bot.web.pages import same_origin

router = APIRouter()


def _start_again(renderer: Renderer) -> HTMLResponse:
    response = page(renderer, "inbox/error.html", status=401, title="Sign in again",
                    message="This sign-in expired or is no longer valid (it lasts five minutes). Sign in again from the login page.")
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


def _code_form(request: Request, renderer: Renderer, pending: HalfSignedIn, *, problem: str = "",
               status: int = 200) -> HTMLResponse:
    """The code page: the code of their app, or (setting up) the secret to add to it first."""
    setup = None if totp_on(pending.person) else app_desk(request).second_factor.setup_of(pending.person)
    if setup is None and not totp_on(pending.person):
        return _start_again(renderer)
    return page(renderer, "inbox/login_code.html", status=status, step_csrf=pending.csrf, setup=setup,
                person_name=pending.person.name, problem=problem)


@router.get("/inbox/login/code", include_in_schema=False)
async def code_page(request: Request, config: ConfigDep, renderer: RendererDep) -> HTMLResponse:
    try:
        pending = await half_signed_in(config, request)
    except NotSigningIn:
        return _start_again(renderer)
    return _code_form(request, renderer, pending)


@router.post("/inbox/login/code", include_in_schema=False)
async def code_sign_in(request: Request, config: ConfigDep, renderer: RendererDep, attempts: LoginAttemptsDep,
                       csrf: str = Form(default=""), code: str = Form(default="")) -> Response:
    """Check the code (or confirm the new secret with it) and, if right, open the session."""
    if not same_origin(request, config.public_url):
        return page(renderer, "inbox/error.html", status=403, title="Refused", message="Cross-site sign-in refused.")
    try:
        pending = await half_signed_in(config, request)
    except NotSigningIn:
        return _start_again(renderer)
    if not check_csrf(pending, csrf):
        return page(renderer, "inbox/error.html", status=403, title="Refused",
                    message="This form expired or came from another site. Sign in again.")
    desk = app_desk(request)
    client, person = attempts.client(request), pending.person
    if (waiting := locked_out(request, attempts, client, person.email)) is not None:
        return waiting
    try:
        await _check(request, pending, code)
    except CodeRefused as refused:
        attempts.failed(client, person.email)
        await desk.password_sign_in.failed(person, client=client, step="totp", reason=refused.code)
        return _code_form(request, renderer, pending, problem=refused.message, status=401)
    return await finish(request, attempts, client, person, via="password+totp", target=pending.next)


async def _check(request: Request, pending: HalfSignedIn, code: str) -> None:
    second_factor = app_desk(request).second_factor
    if totp_on(pending.person):
        await second_factor.check(pending.person, code)
    else:
        await second_factor.confirm(pending.person, code, actor=f"{pending.person.name} (sign-in)")
