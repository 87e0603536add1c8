"""Who is asking: the owner's signed session, its CSRF tokens, and the pages it answers with.

The inbox can end handoffs and speak to subscribers, so every request goes through here: a
signed, expiring, HttpOnly, SameSite=Strict cookie (`OwnerSessions`), not revoked by a logout
(`signed_in_session`); every POST carries a CSRF token bound to that cookie and comes from the
inbox's own origin (`verified_post`). A request without a session is sent to the login page
(or, on the long-polls and on POSTs, answered 401), a refused form gets a 403 page
(`install_inbox_errors`). `page` and `redirect` answer with the inbox's security headers.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from bot.config import Config
from bot.domain.rendering import Renderer
from bot.domain.revocations import Revocations
from bot.errors import error_body
from bot.web.deps import ClockDep, ConfigDep, RevocationsDep, app_desk
from bot.web.owner_name import COOKIE as NAME_COOKIE
from bot.web.owner_name import DEFAULT_NAME, NameCookie
from bot.web.pages import render_page, same_origin, secure_headers

COOKIE = "handoff_owner"
SESSION_MAX_AGE = 12 * 3600
SESSION_LIFETIME = timedelta(seconds=SESSION_MAX_AGE)


class NeedsLogin(Exception):
    pass


class OwnerSessions:
    """The inbox's signed cookies: the owner's session (and the CSRF tokens bound to it) and
    the name this browser replies as."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.secure = config.public_url.startswith("https://")

    def serializer(self, purpose: str) -> URLSafeTimedSerializer:
        # The owner token is part of the salt: changing the token (or setting one on an open
        # inbox) signs every existing session out.
        token = self.config.owner.token
        fingerprint = hashlib.sha256(token.get_secret_value().encode()).hexdigest()[:16] if token else "open"
        return URLSafeTimedSerializer(self.config.signing_keys, salt=f"inbox-{purpose}-{fingerprint}")

    def issue_cookie(self) -> tuple[str, str]:
        session_id = secrets.token_urlsafe(16)
        return session_id, self.serializer("session").dumps(session_id)

    def name_cookie(self) -> NameCookie:
        return NameCookie(self.config.signing_keys, secure=self.secure)

    def set_owner_cookie(self, response: Response, value: str) -> None:
        response.set_cookie(
            COOKIE, value, max_age=SESSION_MAX_AGE, path="/", httponly=True, samesite="strict", secure=self.secure,
        )


class Owner:
    """The signed-in owner's browser session (until `expires_at`, when its cookie does), and
    the name this browser replies as."""

    def __init__(self, sessions: OwnerSessions, session_id: str, expires_at: datetime, name: str = DEFAULT_NAME,
                 new_cookie: str | None = None) -> None:
        self.sessions, self.session_id, self.expires_at = sessions, session_id, expires_at
        self.name, self.new_cookie = name, new_cookie

    @property
    def csrf(self) -> str:
        return self.sessions.serializer("csrf").dumps(self.session_id)

    def check_csrf(self, token: str) -> bool:
        try:
            value = self.sessions.serializer("csrf").loads(token, max_age=SESSION_MAX_AGE)
        except BadSignature:
            return False
        return hmac.compare_digest(str(value), self.session_id)


async def signed_in_session(request: Request, sessions: OwnerSessions, revocations: Revocations) -> tuple[str, datetime] | None:
    """The owner's session this request carries (its id and when it was signed): a validly
    signed, unexpired cookie whose session was not logged out (bot/domain/revocations.py)."""
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        return None
    try:
        session_id, signed_at = sessions.serializer("session").loads(cookie, max_age=SESSION_MAX_AGE, return_timestamp=True)
    except BadSignature:
        return None
    return None if await revocations.is_revoked(str(session_id)) else (str(session_id), signed_at)


async def current_owner(request: Request, config: ConfigDep, clock: ClockDep, revocations: RevocationsDep) -> Owner:
    """The owner this request comes from: the session it carries (`signed_in_session`), else
    a login (or, on an open inbox, a new session)."""
    sessions = OwnerSessions(config)
    name = sessions.name_cookie().read(request.cookies.get(NAME_COOKIE))
    signed_in = await signed_in_session(request, sessions, revocations)
    if signed_in is not None:
        return Owner(sessions, signed_in[0], signed_in[1] + SESSION_LIFETIME, name)
    if config.owner.token is None and request.method == "GET":
        session_id, value = sessions.issue_cookie()
        return Owner(sessions, session_id, clock.now() + SESSION_LIFETIME, name, new_cookie=value)
    raise NeedsLogin()


async def verified_post(request: Request, csrf: str = Form(default=""), owner: Owner = Depends(current_owner)) -> Owner:
    if not same_origin(request, owner.sessions.config.public_url) or not owner.check_csrf(csrf):
        raise Forbidden()
    return owner


class Forbidden(Exception):
    pass


# --------------------------------------------------------------------------- responses


def page(renderer: Renderer, template: str, owner: Owner | None = None, status: int = 200, **context: Any) -> HTMLResponse:
    response = render_page(renderer, template, status=status, csrf=owner.csrf if owner else "",
                           reply_name=owner.name if owner else "", **context)
    if owner and owner.new_cookie:
        owner.sessions.set_owner_cookie(response, owner.new_cookie)
    return response


def redirect(url: str) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    secure_headers(response)
    return response


def install_inbox_errors(app: FastAPI) -> None:
    """Login redirects and CSRF refusals as pages, not JSON."""

    @app.exception_handler(NeedsLogin)
    async def _needs_login(request: Request, _exc: NeedsLogin) -> Response:
        if request.method != "GET" or request.url.path.endswith("/updates"):
            return JSONResponse(error_body("unauthorized", "log in to the inbox"), status_code=401)
        return redirect(f"/inbox/login?next={quote(request.url.path)}")

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, _exc: Forbidden) -> Response:
        return page(app_desk(request).renderer, "inbox/error.html", status=403, title="Refused",
                     message="This form expired or came from another site. Go back, reload the page and try again.")
