"""Link a channel (`/inbox/account/linking`): a signed-in person's provider identities, and a
fresh one-time code to send from a channel (`/link CODE`) to link one more.

GET shows, never changes: the identities linked to the person and how to link a channel. A
code is issued only by a POST (CSRF-checked, same origin), and shown once in its answer: only
its hash is stored (bot/domain/people/linking.py); it works once, for 10 minutes. Where a
provider can send the command in one tap (a deep link to the bot, `ChannelAdapter.link_hint`) the page offers
that link too (`ChannelAdapter.link_hint`). A person may unlink an identity of their own
here; linking is only ever done from the channel, where the provider vouches for the sender.

The owner token signs in a service identity, not a person: it has nothing to link to, and
the page says so. Any role may link: a viewer's identities say who they are too. This module
is meant to be merged into the account page; its routes stand on their own until then.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, Response

from bot.config.people import Role
from bot.domain.people.linking import CODE_LIFETIME
from bot.flow.siblings import AgentChannel
from bot.store.models import PersonIdentity
from bot.web.deps import ChannelsDep, RendererDep, app_desk
from bot.web.inbox.owner import SignedIn, needs, page, posts, redirect
from bot.web.inbox_routes import OWNER_INBOX

PATH = "/inbox/account/linking"

router = APIRouter()


@dataclass(frozen=True)
class LinkableChannel:
    """A channel a person can send `/link CODE` from, and a one-tap link where there is one."""

    label: str
    kind: str
    hint: str | None = None


@router.get(PATH, include_in_schema=False, response_class=HTMLResponse)
async def linking(request: Request, renderer: RendererDep, channels: ChannelsDep,
                  me: SignedIn = Depends(needs(Role.VIEWER)), unlinked: bool = False) -> HTMLResponse:
    return await _page(request, renderer, channels, me, notice="The identity was unlinked." if unlinked else None)


@router.post(PATH, include_in_schema=False, response_class=HTMLResponse)
async def issue_code(request: Request, renderer: RendererDep, channels: ChannelsDep,
                     me: SignedIn = Depends(posts(Role.VIEWER))) -> HTMLResponse:
    """A fresh code for the signed-in person, shown in this answer only."""
    if me.person is None:
        return await _page(request, renderer, channels, me, status=400)
    code = await app_desk(request).link_codes.issue(me.person)
    return await _page(request, renderer, channels, me, code=code)


@router.post(f"{PATH}/unlink", include_in_schema=False)
async def unlink(request: Request, renderer: RendererDep, channels: ChannelsDep, identity: int = Form(default=0),
                 me: SignedIn = Depends(posts(Role.VIEWER))) -> Response:
    """Unlink one of the signed-in person's own identities (someone else's id changes nothing)."""
    if me.person is None or not await app_desk(request).people.unlink(me.person.id, identity, actor=me.actor().label):
        return await _page(request, renderer, channels, me, status=400,
                           notice="identity: not one of yours; nothing was unlinked.")
    return redirect(f"{PATH}?unlinked=1")


async def _page(request: Request, renderer: RendererDep, channels: ChannelsDep, me: SignedIn, *, status: int = 200,
                code: str | None = None, notice: str | None = None) -> HTMLResponse:
    identities: list[PersonIdentity] = await app_desk(request).people.identities(me.person.id) if me.person else []
    linkable = [LinkableChannel(adapter.label, adapter.kind, adapter.link_hint(code) if code else None)
                for adapter in channels.adapters()
                if adapter.capabilities.inbound and adapter.kind != OWNER_INBOX and not isinstance(adapter, AgentChannel)]
    return page(renderer, "inbox/linking.html", me, status=status, identities=identities, code=code, notice=notice,
                linkable=linkable, minutes=int(CODE_LIFETIME.total_seconds() // 60), person=me.person)
