"""The pages of an invitation or password-reset link: choose a password, and be signed in.

`/inbox/welcome/<token>` (an invitation) and `/inbox/reset/<token>` (a reset an admin issued)
are the same page for the two kinds of link (bot/domain/people/invitations.py: signed,
expiring, single-use, dead once the person is disabled). Opening one only shows the form
(mail scanners open links); the post sets the password, once, and signs the person in, or
takes them to the TOTP step when they have TOTP on or the desk requires it: a link never
skips the second factor. The form's CSRF token is an HMAC of the link's token, and a post
from another origin is refused.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from bot.config import Config
from bot.domain.people import LinkKind, LinkNotValid
from bot.domain.people.credentials import MIN_PASSWORD, WeakPassword, check_new_password
from bot.domain.rendering import Renderer
from bot.store.models import Person
from bot.web.deps import app_desk
from bot.web.inbox.owner import page
from bot.web.inbox.pending import password_was_right
from bot.web.login_attempts import LoginAttempts, LoginAttemptsDep
from bot.web.pages import same_origin

router = APIRouter()


def _csrf(config: Config, kind: LinkKind, token: str) -> str:
    return hmac.new(config.secret_key.get_secret_value().encode(), f"link:{kind}:{token}".encode(), hashlib.sha256).hexdigest()


def _not_valid(renderer: Renderer, refused: LinkNotValid) -> HTMLResponse:
    return page(renderer, "inbox/error.html", status=404 if refused.reason == "invalid" else 410,
                title="This link does not work", message=refused.message)


def _form(renderer: Renderer, config: Config, kind: LinkKind, token: str, person: Person, *, problem: str = "",
          field: str = "", status: int = 200) -> HTMLResponse:
    return page(renderer, "inbox/welcome.html", status=status, kind=kind.value, action=f"{kind.path}{token}",
                link_csrf=_csrf(config, kind, token), person=person, problem=problem, field=field,
                min_password=MIN_PASSWORD)


async def _show(request: Request, kind: LinkKind, token: str) -> HTMLResponse:
    desk = app_desk(request)
    try:
        person = await desk.invitations.person_for(token, kind)
    except LinkNotValid as refused:
        return _not_valid(desk.renderer, refused)
    return _form(desk.renderer, desk.config, kind, token, person)


async def _use(request: Request, attempts: LoginAttempts, kind: LinkKind, token: str, *, csrf: str,
               password: str, repeated: str) -> Response:
    """The form's post: the password checked (each problem naming its field), set once, and
    the person signed in (or on to the TOTP step)."""
    desk = app_desk(request)
    config, renderer = desk.config, desk.renderer
    if not same_origin(request, config.public_url) or not hmac.compare_digest(csrf.encode(), _csrf(config, kind, token).encode()):
        return page(renderer, "inbox/error.html", status=403, title="Refused",
                    message="This form expired or came from another site. Open the link again and retry.")
    try:
        person = await desk.invitations.person_for(token, kind)
    except LinkNotValid as refused:
        return _not_valid(renderer, refused)
    try:
        check_new_password(password)
    except WeakPassword as weak:
        return _form(renderer, config, kind, token, person, status=400, field="password", problem=weak.message)
    if password != repeated:
        return _form(renderer, config, kind, token, person, status=400, field="repeated",
                     problem="repeated: the two passwords differ; type the same password twice")
    try:
        person = await desk.invitations.set_password(token, kind, password)
    except LinkNotValid as refused:
        return _not_valid(renderer, refused)
    return await password_was_right(request, attempts, attempts.client(request), person, target="/inbox")


@router.get("/inbox/welcome/{token}", include_in_schema=False)
async def welcome_page(request: Request, token: str) -> HTMLResponse:
    return await _show(request, LinkKind.INVITE, token)


@router.post("/inbox/welcome/{token}", include_in_schema=False)
async def welcome(request: Request, token: str, attempts: LoginAttemptsDep, csrf: str = Form(default=""),
                  password: str = Form(default=""), repeated: str = Form(default="")) -> Response:
    """Set the invited person's first password, and sign them in."""
    return await _use(request, attempts, LinkKind.INVITE, token, csrf=csrf, password=password, repeated=repeated)


@router.get("/inbox/reset/{token}", include_in_schema=False)
async def reset_page(request: Request, token: str) -> HTMLResponse:
    return await _show(request, LinkKind.RESET, token)


@router.post("/inbox/reset/{token}", include_in_schema=False)
async def reset(request: Request, token: str, attempts: LoginAttemptsDep, csrf: str = Form(default=""),
                password: str = Form(default=""), repeated: str = Form(default="")) -> Response:
    """Set a new password from a reset link (every older session ends), and sign them in."""
    return await _use(request, attempts, LinkKind.RESET, token, csrf=csrf, password=password, repeated=repeated)

