"""A person's own API tokens (`/inbox/tokens`): list, create, revoke.

A personal API token lets a script call `/api` as its person (bot/web/api.py `identify`),
with a role no higher than theirs (bot/domain/people/tokens.py). Anyone signed in as a person
manages their own tokens here, whatever their role; nobody sees or revokes another's (an
admin disables the person instead, which ends all their tokens). The secret is shown once,
on the page that answers the create post (sent no-store, never in a URL); afterwards only
its name, role and dates are. The owner token's service session is nobody, so it has no
tokens: the page says so, and its posts change nothing. Posts are CSRF-checked like every
inbox form (`posts`, bot/web/inbox/owner.py); GET changes nothing.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, Response

from bot.config.people import Role
from bot.domain.people import ApiTokens, InvalidToken
from bot.domain.rendering import Renderer
from bot.store.models import Person
from bot.web.deps import RendererDep, app_desk
from bot.web.inbox.owner import SignedIn, needs, page, posts, redirect

router = APIRouter()

# What a revoke post says afterwards, by the key the redirect carries (never text from the URL)
NOTICES = {
    "revoked": "Revoked: a script using it is refused from its next request.",
    "unchanged": "Nothing changed: that token was already revoked, or is not yours.",
}


async def api_tokens_of(request: Request) -> ApiTokens:
    return app_desk(request).api_tokens


@router.get("/inbox/tokens", response_class=HTMLResponse, include_in_schema=False)
async def tokens_page(
    request: Request, renderer: RendererDep, done: str = "", who: SignedIn = Depends(needs(Role.VIEWER)),
) -> HTMLResponse:
    return await _page(request, renderer, who, notice=NOTICES.get(done, ""))


@router.post("/inbox/tokens", include_in_schema=False)
async def create_token(
    request: Request, renderer: RendererDep, name: str = Form(default=""), role: str = Form(default=""),
    who: SignedIn = Depends(posts(Role.VIEWER)),
) -> Response:
    """A new token; its secret is on this answer and nowhere else. A wrong name or role is
    refused naming the field, with what was typed kept in the form."""
    if who.person is None:
        return redirect("/inbox/tokens")  # the page says why the service has none
    if role not in tuple(Role) or not who.role.allows(Role(role)):
        return await _page(request, renderer, who, status=400, typed=name[:80],
                           problem=f"role: one of {', '.join(_roles_of(who))}, got {role[:20]!r}")
    try:
        secret, token = await (await api_tokens_of(request)).create(
            who.person, name=name, role=Role(role), actor=who.actor().label)
    except InvalidToken as refused:
        return await _page(request, renderer, who, status=400, typed=name[:80], problem=refused.message)
    return await _page(request, renderer, who, secret=secret, made=token.name)


@router.post("/inbox/tokens/{tid}/revoke", include_in_schema=False)
async def revoke_token(request: Request, tid: str, who: SignedIn = Depends(posts(Role.VIEWER))) -> Response:
    """Revoke one of your tokens (only yours: another's id changes nothing)."""
    if who.person is None:
        return redirect("/inbox/tokens")
    revoked = await (await api_tokens_of(request)).revoke(tid[:40], person_id=who.person.id, actor=who.actor().label)
    return redirect(f"/inbox/tokens?done={'revoked' if revoked else 'unchanged'}")


def _roles_of(who: SignedIn) -> list[Role]:
    """The roles a token of this person may have: theirs and below."""
    return [role for role in Role if who.role.allows(role)]


async def _page(request: Request, renderer: Renderer, who: SignedIn, *, status: int = 200, **shown: str) -> HTMLResponse:
    person: Person | None = who.person
    tokens = await (await api_tokens_of(request)).of_person(person.id) if person is not None else []
    shown = {"typed": "", "problem": "", "notice": "", "secret": "", "made": "", **shown}
    return page(renderer, "inbox/tokens.html", who, status=status, person=person, tokens=tokens[::-1],
                roles=_roles_of(who), **shown)
