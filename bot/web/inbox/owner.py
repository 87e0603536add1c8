"""Who is asking, and may they: the inbox's server-side session, its CSRF tokens, the role
each page needs, and the pages it answers with.

The inbox can end handoffs and speak to subscribers, so every request goes through here. The
session is a random token in an HttpOnly, SameSite=Strict cookie; the server keeps only its
hash (bot/domain/people/sessions.py), so signing out, "sign out everywhere" and disabling a
person end it at once, on every instance. Each route declares the role it needs with
`needs(Role.X)` (a page) or `posts(Role.X)` (a form post, which also checks the CSRF token
bound to the session and that the post comes from the inbox's own origin); both check it
in `_allowed`, the one place roles are checked. A request without a session is sent to the
login page (or, on the long-polls and on POSTs, answered 401); a role too low gets a 403
page naming the role needed (`install_inbox_errors`).

Who a session is: a person of the directory (bot/domain/people/), or the owner token's
service identity — the bootstrap admin, who is nobody in a two-person approval. On an open
inbox (no `owner.token`; loopback only, see config) a first GET opens a service session,
because CSRF protection hangs off it.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from bot.config import Config
from bot.config.people import Role
from bot.domain.people import Actor, OpenSession, Sessions
from bot.domain.rendering import Renderer
from bot.errors import error_body
from bot.web.deps import app_desk
from bot.web.owner_name import COOKIE as NAME_COOKIE
from bot.web.owner_name import DEFAULT_NAME, NameCookie
from bot.web.pages import render_page, same_origin, secure_headers

COOKIE = "handoff_session"


class NeedsLogin(Exception):
    pass


class Forbidden(Exception):
    pass


class RoleRefused(Exception):
    def __init__(self, needed: Role, have: Role) -> None:
        super().__init__(f"needs {needed}")
        self.needed, self.have = needed, have


class SignedIn:
    """The session this request carries: who (a person, or the owner token's service
    identity), their role, the CSRF token of their forms, and the name their replies carry."""

    def __init__(self, config: Config, session: OpenSession, *, reply_name: str, new_cookie: str | None = None) -> None:
        self.config, self.session, self.new_cookie = config, session, new_cookie
        self.person = session.person
        self.role = session.role
        # A person replies under their own name; the owner token's service session under the
        # name its browser chose (bot/web/owner_name.py).
        self.name = session.person.name if session.person is not None else reply_name

    @property
    def csrf(self) -> str:
        return self.session.csrf(self.config.secret_key.get_secret_value())

    def check_csrf(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.csrf.encode())

    def actor(self, via: str = "inbox") -> Actor:
        if self.person is not None:
            return Actor.of_person(self.person, via)
        return Actor.owner_token(via)

    @property
    def expires_at(self) -> datetime:
        return self.session.expires_at


def name_cookie(config: Config) -> NameCookie:
    return NameCookie(config.signing_keys, secure=config.public_url.startswith("https://"))


def set_session_cookie(config: Config, response: Response, token: str) -> None:
    # No max-age: the server decides when a session ends (idle and absolute expiry); the
    # browser forgets the cookie when it closes, or on sign-out.
    response.set_cookie(COOKIE, token, path="/", httponly=True, samesite="strict",
                        secure=config.public_url.startswith("https://"))


async def session_of(request: Request) -> OpenSession | None:
    """The good session the request's cookie opens, if any (for pages outside the inbox that
    only want to know who, such as the approval decision page)."""
    sessions: Sessions = app_desk(request).sessions
    return await sessions.current(request.cookies.get(COOKIE))


async def _signed_in(request: Request) -> SignedIn:
    desk = app_desk(request)
    config = desk.config
    reply_name = name_cookie(config).read(request.cookies.get(NAME_COOKIE))
    session = await desk.sessions.current(request.cookies.get(COOKIE))
    if session is not None:
        return SignedIn(config, session, reply_name=reply_name)
    if config.owner.token is None and request.method == "GET":
        token, opened = await desk.sessions.open(None, via="open")
        return SignedIn(config, opened, reply_name=reply_name or DEFAULT_NAME, new_cookie=token)
    raise NeedsLogin()


def _allowed(who: SignedIn, needed: Role) -> SignedIn:
    """The one place a role is checked."""
    if not who.role.allows(needed):
        raise RoleRefused(needed, who.role)
    return who


Guard = Callable[..., Awaitable[SignedIn]]


def needs(role: Role) -> Guard:
    """The dependency of a page that needs `role`: the signed-in session, checked."""

    async def page_guard(request: Request) -> SignedIn:
        return _allowed(await _signed_in(request), role)

    page_guard.role = role  # type: ignore[attr-defined]  # read by the route × role test
    return page_guard


def posts(role: Role) -> Guard:
    """The dependency of a form post that needs `role`: the signed-in session, checked, with
    its CSRF token and the inbox's own origin."""

    async def post_guard(request: Request, csrf: str = Form(default="")) -> SignedIn:
        who = await _signed_in(request)
        if not same_origin(request, who.config.public_url) or not who.check_csrf(csrf):
            raise Forbidden()
        return _allowed(who, role)

    post_guard.role = role  # type: ignore[attr-defined]  # read by the route × role test
    return post_guard


# --------------------------------------------------------------------------- responses


def page(renderer: Renderer, template: str, who: SignedIn | None = None, status: int = 200, **context: Any) -> HTMLResponse:
    response = render_page(renderer, template, status=status, csrf=who.csrf if who else "",
                           reply_name=who.name if who else "", me=who, **context)
    if who and who.new_cookie:
        set_session_cookie(who.config, response, who.new_cookie)
    return response


def redirect(url: str) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    secure_headers(response)
    return response


def install_inbox_errors(app: FastAPI) -> None:
    """Login redirects, CSRF and role refusals as pages, not JSON."""

    @app.exception_handler(NeedsLogin)
    async def _needs_login(request: Request, _exc: NeedsLogin) -> Response:
        if request.method != "GET" or request.url.path.endswith("/updates"):
            return JSONResponse(error_body("unauthorized", "log in to the inbox"), status_code=401)
        return redirect(f"/inbox/login?next={quote(request.url.path)}")

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, _exc: Forbidden) -> Response:
        return page(app_desk(request).renderer, "inbox/error.html", status=403, title="Refused",
                     message="This form expired or came from another site. Go back, reload the page and try again.")

    @app.exception_handler(RoleRefused)
    async def _role_refused(request: Request, exc: RoleRefused) -> Response:
        message = f"This needs the {exc.needed} role; you are signed in as {exc.have}. An admin can change roles."
        if request.url.path.endswith("/updates"):
            return JSONResponse(error_body("forbidden", message, needed=exc.needed), status_code=403)
        return page(app_desk(request).renderer, "inbox/error.html", status=403, title="Not allowed", message=message)
