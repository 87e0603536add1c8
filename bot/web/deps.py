"""How a route gets the services it uses: one FastAPI dependency per service.

The desk only wires. `create_app` puts it on `app.state`, `desk_of` hands it over, and each
service below is taken from it here, in one place; a route declares the services it uses
(`handoffs: HandoffsDep`, `renderer: RendererDep`, …) and never the whole desk. A test swaps
one service with `app.dependency_overrides[handoffs_of]`, or every one at once by overriding
`desk_of`. Exception handlers, which FastAPI does not inject, call `app_desk(request)`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from bot.config import Config
from bot.delivery.channel_set import ChannelSet
from bot.desk import Desk
from bot.domain.approvals import Approvals
from bot.domain.conversations import Conversations
from bot.domain.handoffs import Handoffs
from bot.domain.queries import Queries
from bot.domain.rendering import Renderer
from bot.domain.user_actions import UserActions
from bot.flow.inbound import Inbound
from bot.flow.router import Router
from bot.runtime.bus import ConversationBus
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from forms.links import FormLinks


def app_desk(request: Request) -> Desk:
    """The desk the app was built around (`create_app` sets `app.state.desk`), for code that
    FastAPI does not inject (exception handlers)."""
    desk: Desk = request.app.state.desk  # Starlette's app.state is untyped
    return desk


async def desk_of(request: Request) -> Desk:
    """The desk, as the dependency every service below is taken from. Like every dependency
    here it is `async def` although it awaits nothing: FastAPI runs a plain `def` dependency
    in its threadpool, a thread hop per dependency per request for a lookup."""
    return app_desk(request)


DeskDep = Annotated[Desk, Depends(desk_of)]


async def config_of(desk: DeskDep) -> Config:
    return desk.config


async def clock_of(desk: DeskDep) -> Clock:
    return desk.clock


async def renderer_of(desk: DeskDep) -> Renderer:
    """The templates: pages, and the texts a page shows (the chat's banner, the widget)."""
    return desk.renderer


async def conversations_of(desk: DeskDep) -> Conversations:
    return desk.conversations


async def queries_of(desk: DeskDep) -> Queries:
    return desk.queries


async def handoffs_of(desk: DeskDep) -> Handoffs:
    return desk.handoffs


async def approvals_of(desk: DeskDep) -> Approvals:
    return desk.approvals


async def user_actions_of(desk: DeskDep) -> UserActions:
    return desk.user_actions


async def router_of(desk: DeskDep) -> Router:
    return desk.router


async def inbound_of(desk: DeskDep) -> Inbound:
    return desk.inbound


async def channels_of(desk: DeskDep) -> ChannelSet:
    return desk.channels


async def form_links_of(desk: DeskDep) -> FormLinks:
    return desk.forms


async def bus_of(desk: DeskDep) -> ConversationBus:
    return desk.bus


async def metrics_of(desk: DeskDep) -> Metrics:
    return desk.metrics


ConfigDep = Annotated[Config, Depends(config_of)]
ClockDep = Annotated[Clock, Depends(clock_of)]
RendererDep = Annotated[Renderer, Depends(renderer_of)]
ConversationsDep = Annotated[Conversations, Depends(conversations_of)]
QueriesDep = Annotated[Queries, Depends(queries_of)]
HandoffsDep = Annotated[Handoffs, Depends(handoffs_of)]
ApprovalsDep = Annotated[Approvals, Depends(approvals_of)]
UserActionsDep = Annotated[UserActions, Depends(user_actions_of)]
RouterDep = Annotated[Router, Depends(router_of)]
InboundDep = Annotated[Inbound, Depends(inbound_of)]
ChannelsDep = Annotated[ChannelSet, Depends(channels_of)]
FormLinksDep = Annotated[FormLinks, Depends(form_links_of)]
BusDep = Annotated[ConversationBus, Depends(bus_of)]
MetricsDep = Annotated[Metrics, Depends(metrics_of)]
