"""The pages around a session: sign in (wrong tokens counted per address,
bot/web/login_attempts.py), sign out (the session revoked on the server), the name the owner
token's replies carry (bot/web/owner_name.py; a person replies under their own name), and
the stylesheet every inbox page links.
"""

from __future__ import annotations

import hmac
from datetime import datetime, timedelta
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from bot.config.people import Role
from bot.domain.rendering import Renderer
from bot.runtime.paths import TEMPLATES_DIR
from bot.web.deps import ClockDep, ConfigDep, RendererDep, app_desk
from bot.web.inbox.owner import COOKIE, SignedIn, name_cookie, needs, page, posts, redirect, set_session_cookie
from bot.web.inbox.sso import login_link
from bot.web.login_attempts import LoginAttemptsDep
from bot.web.owner_name import InvalidName, parse_name
from bot.web.pages import same_origin

router = APIRouter()


@router.get("/static/desk.css", include_in_schema=False)
async def stylesheet() -> FileResponse:
    return FileResponse(TEMPLATES_DIR / "static" / "desk.css", media_type="text/css", headers={"Cache-Control": "public, max-age=3600"})


@router.get("/inbox/login", include_in_schema=False)
async def login_page(renderer: RendererDep, config: ConfigDep, next: str = "/inbox", failed: bool = False) -> HTMLResponse:
    sso = config.sign_in.sso
    return page(renderer, "inbox/login.html", next=_safe_next(next), failed=failed, status=401 if failed else 200,
                sso_link=login_link(config, next), sso_label=sso.label if sso else "")


@router.post("/inbox/login", include_in_schema=False)
async def login(
    request: Request, config: ConfigDep, renderer: RendererDep, clock: ClockDep, attempts: LoginAttemptsDep,
    token: str = Form(default=""), next: str = Form(default="/inbox"),
) -> Response:
    """Sign the owner in. Wrong tokens are counted per client address (bot/web/login_attempts.py):
    past the allowance the address waits, whatever it sends."""
    expected = config.owner.token
    if not same_origin(request, config.public_url):
        return page(renderer, "inbox/error.html", status=403, title="Refused", message="Cross-site login refused.")
    if expected is not None:
        client = attempts.client(request)
        locked = attempts.locked_for(client)
        if locked:
            return _locked_out(renderer, locked, clock.now() + timedelta(seconds=locked))
        if not hmac.compare_digest(token.encode(), expected.get_secret_value().encode()):
            attempts.failed(client)
            return redirect(f"/inbox/login?failed=1&next={quote(_safe_next(next))}")
        attempts.succeeded(client)
    token_value, _session = await app_desk(request).sessions.open(None, via="owner_token")
    response = redirect(_safe_next(next))
    set_session_cookie(config, response, token_value)
    return response


def _locked_out(renderer: Renderer, seconds: int, until: datetime) -> HTMLResponse:
    response = page(renderer, "inbox/error.html", status=429, title="Too many attempts",
                     message=f"Too many wrong tokens came from your address. Try again in {seconds} s "
                             f"(after {until.strftime('%H:%M:%S')} UTC).")
    response.headers["Retry-After"] = str(seconds)
    return response


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
    return page(renderer, "inbox/name.html", owner, next=_safe_next(next), typed=owner.name, problem="")


@router.post("/inbox/name", include_in_schema=False)
async def set_name(renderer: RendererDep, name: str = Form(default=""), next: str = Form(default="/inbox"),
                   owner: SignedIn = Depends(posts(Role.AGENT))) -> Response:
    """Remember, in this browser, the name subscribers see on the owner token's replies."""
    try:
        chosen = parse_name(name)
    except InvalidName as exc:
        return page(renderer, "inbox/name.html", owner, status=400, next=_safe_next(next), typed=name[:200],
                     problem=exc.message)
    target = _safe_next(next)
    notice = quote(f"Subscribers now see your replies as {chosen}.")
    response = redirect(f"{target}{'&' if '?' in target else '?'}notice={notice}")
    name_cookie(owner.config).store(response, chosen)
    return response


def _safe_next(target: str) -> str:
    """Only local paths: a login link must not bounce the owner to another site."""
    return target if target.startswith("/inbox") and "//" not in target and "\\" not in target else "/inbox"
