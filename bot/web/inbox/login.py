"""The pages around a session: sign in, sign out, the name the owner token's replies carry
(bot/web/owner_name.py; a person replies under their own name), and the stylesheet every
inbox page links.

Signing in. A person signs in with their e-mail and password (when `sign_in.passwords`); the
owner token stays as the secondary form, the bootstrap admin and service login, which signs
in a service identity, not a person. A wrong e-mail, a wrong password, a disabled person
and a person with no password yet all get the same page, status and words after the same
work (bot/domain/people/sign_in.py). Failures are counted per client address and per account
(bot/web/login_attempts.py): past either allowance the sign-in waits (429, Retry-After),
whatever it sends. When the person has TOTP on, or `sign_in.require_totp` asks for it, the
password only gets them halfway (bot/web/inbox/pending.py); the code comes next
(bot/web/inbox/second_step.py). The login forms have no session to bind a CSRF token to: a
post from another site is refused by its origin (same_origin), and the cookies a sign-in
sets are SameSite=Strict.
"""

from __future__ import annotations

import hmac
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from bot.config import Config
from bot.config.people import Role
from bot.domain.people import SignInRefused
from bot.domain.rendering import Renderer
from bot.runtime.paths import TEMPLATES_DIR
from bot.web.deps import ConfigDep, RendererDep, app_desk
from bot.web.inbox.owner import COOKIE, SignedIn, name_cookie, needs, page, posts, redirect, set_session_cookie
from bot.web.inbox.pending import locked_out, password_was_right, safe_next
from bot.web.inbox.sso import login_link
from bot.web.login_attempts import LoginAttempts, LoginAttemptsDep
from bot.web.owner_name import InvalidName, parse_name
from bot.web.pages import same_origin

router = APIRouter()


@router.get("/static/desk.css", include_in_schema=False)
async def stylesheet() -> FileResponse:
    return FileResponse(TEMPLATES_DIR / "static" / "desk.css", media_type="text/css", headers={"Cache-Control": "public, max-age=3600"})


def login_form(renderer: Renderer, config: Config, *, next: str, failed: bool = False, email: str = "",
               problem: str = "", status: int = 200) -> HTMLResponse:
    """The login page: e-mail and password (when passwords are on), then the owner token."""
    sso = config.sign_in.sso
    return page(renderer, "inbox/login.html", status=status, next=safe_next(next), failed=failed, email=email,
                problem=problem, passwords=config.sign_in.passwords, sso_link=login_link(config, next),
                sso_label=sso.label if sso else "")


@router.get("/inbox/login", include_in_schema=False)
async def login_page(renderer: RendererDep, config: ConfigDep, next: str = "/inbox", failed: bool = False) -> HTMLResponse:
    return login_form(renderer, config, next=next, failed=failed, status=401 if failed else 200)


@router.post("/inbox/login", include_in_schema=False)
async def login(
    request: Request, config: ConfigDep, renderer: RendererDep, attempts: LoginAttemptsDep,
    token: str = Form(default=""), email: str | None = Form(default=None), password: str = Form(default=""),
    next: str = Form(default="/inbox"),
) -> Response:
    """Sign in: with an e-mail and password when the form has an e-mail field, else with the
    owner token. Failures are counted per client address (and per account): past the
    allowance the sign-in waits, whatever it sends."""
    if not same_origin(request, config.public_url):
        return page(renderer, "inbox/error.html", status=403, title="Refused", message="Cross-site login refused.")
    if email is not None:
        return await _password_login(request, config, renderer, attempts, email=email, password=password, next=next)
    expected = config.owner.token
    if expected is not None:
        client = attempts.client(request)
        if (waiting := locked_out(request, attempts, client, cause="Too many wrong tokens came from your address.")) is not None:
            return waiting
        if not hmac.compare_digest(token.encode(), expected.get_secret_value().encode()):
            attempts.failed(client)
            return redirect(f"/inbox/login?failed=1&next={quote(safe_next(next))}")
        attempts.succeeded(client)
    token_value, _session = await app_desk(request).sessions.open(None, via="owner_token")
    response = redirect(safe_next(next))
    set_session_cookie(config, response, token_value)
    return response


async def _password_login(request: Request, config: Config, renderer: Renderer, attempts: LoginAttempts, *,
                          email: str, password: str, next: str) -> Response:
    """The password step. Right → a session, or halfway to the TOTP step; wrong (for any
    reason) → the login page again, the same whichever reason."""
    desk = app_desk(request)
    if not config.sign_in.passwords:
        return page(renderer, "inbox/error.html", status=403, title="Refused",
                    message="Signing in with a password is turned off on this desk (sign_in.passwords).")
    client = attempts.client(request)
    if (waiting := locked_out(request, attempts, client, email)) is not None:
        return waiting
    try:
        person = await desk.password_sign_in.check(email, password, client=client)
    except SignInRefused as refused:
        attempts.failed(client, email)
        return login_form(renderer, config, next=next, email=email[:320], problem=refused.message, status=401)
    return await password_was_right(request, attempts, client, person, target=safe_next(next))


@router.post("/inbox/logout", include_in_schema=False)
async def logout(request: Request, owner: SignedIn = Depends(posts(Role.VIEWER))) -> Response:
    """Sign this session out on the server: its cookie, replayed, is refused from now on."""
    await app_desk(request).sessions.revoke(
        owner.session.token_hash, actor=owner.actor().label,
        person_id=owner.person.id if owner.person else None,
    )
    response = redirect("/inbox/login")
    response.delete_cookie(COOKIE, path="/")
    return response


@router.get("/inbox/name", response_class=HTMLResponse, include_in_schema=False)
async def name_page(renderer: RendererDep, next: str = "/inbox", owner: SignedIn = Depends(needs(Role.AGENT))) -> HTMLResponse:
    return page(renderer, "inbox/name.html", owner, next=safe_next(next), typed=owner.name, problem="")


@router.post("/inbox/name", include_in_schema=False)
async def set_name(renderer: RendererDep, name: str = Form(default=""), next: str = Form(default="/inbox"),
                   owner: SignedIn = Depends(posts(Role.AGENT))) -> Response:
    """Remember, in this browser, the name subscribers see on the owner token's replies."""
    try:
        chosen = parse_name(name)
    except InvalidName as exc:
        return page(renderer, "inbox/name.html", owner, status=400, next=safe_next(next), typed=name[:200],
                     problem=exc.message)
    target = safe_next(next)
    notice = quote(f"Subscribers now see your replies as {chosen}.")
    response = redirect(f"{target}{'&' if '?' in target else '?'}notice={notice}")
    name_cookie(owner.config).store(response, chosen)
    return response
