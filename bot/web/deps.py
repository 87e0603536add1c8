"""How a route gets the services it uses: one FastAPI dependency per service.

The desk only wires. `create_app` puts it on `app.state`, `app_desk` reads it back, and each
service below is taken from it here, in one place; a route declares the services it uses
(`handoffs: HandoffsDep`, `renderer: RendererDep`, …) and never the whole desk. A test swaps
one service with `app.dependency_overrides[handoffs_of]`, or every one at once by putting
another desk on `app.state.desk`.

Each dependency reads the request alone, with no dependency of its own: FastAPI solves every
sub-dependency of a dependency again for each one that declares it (the cached value is
reused, the solving is not), so a service taken through a shared `desk` dependency cost two
solves per route instead of one. Like every dependency here they are `async def` although
they await nothing: FastAPI runs a plain `def` dependency in its threadpool, a thread hop per
dependency per request for a lookup.
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
from bot.domain.idempotency import IdempotencyKeys
from bot.domain.oncall_service import OnCall
from bot.domain.people.contact import direct_channels
from bot.domain.people.reach import DirectChannel
from bot.domain.people.roster import Roster
from bot.domain.queries import Queries
from bot.domain.rendering import Renderer
from bot.domain.revocations import Revocations
from bot.domain.satisfaction import Satisfaction
from bot.domain.user_actions import UserActions
from bot.flow.inbound import Inbound
from bot.flow.router import Router
from bot.runtime.bus import ConversationBus
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from forms.links import FormLinks


def app_desk(request: Request) -> Desk:
    """The desk the app was built around (`create_app` sets `app.state.desk`): what every
    dependency below takes its service from, and what exception handlers (which FastAPI does
    not inject) read."""
    desk: Desk = request.app.state.desk  # Starlette's app.state is untyped
    return desk


async def config_of(request: Request) -> Config:
    return app_desk(request).config


async def clock_of(request: Request) -> Clock:
    return app_desk(request).clock


async def renderer_of(request: Request) -> Renderer:
    """The templates: pages, and the texts a page shows (the chat's banner, the widget)."""
    return app_desk(request).renderer


async def conversations_of(request: Request) -> Conversations:
    return app_desk(request).conversations


async def queries_of(request: Request) -> Queries:
    return app_desk(request).queries


async def revocations_of(request: Request) -> Revocations:
    return app_desk(request).revocations


async def handoffs_of(request: Request) -> Handoffs:
    return app_desk(request).handoffs


async def approvals_of(request: Request) -> Approvals:
    return app_desk(request).approvals


async def user_actions_of(request: Request) -> UserActions:
    return app_desk(request).user_actions


async def satisfaction_of(request: Request) -> Satisfaction:
    return app_desk(request).satisfaction


async def router_of(request: Request) -> Router:
    return app_desk(request).router


async def inbound_of(request: Request) -> Inbound:
    return app_desk(request).inbound


async def channels_of(request: Request) -> ChannelSet:
    return app_desk(request).channels


async def form_links_of(request: Request) -> FormLinks:
    return app_desk(request).forms


async def idempotency_of(request: Request) -> IdempotencyKeys:
    """The kept requests of `Idempotency-Key` (bot/web/idempotency.py, which is not injected:
    it wraps the API's POST routes around their dependencies)."""
    return app_desk(request).idempotency


def roster_of_desk(desk: Desk) -> Roster:
    """The directory under the admin rules (bot/domain/people/roster.py), for the people page,
    the people API and the command line alike. Its links come from the desk's `invitations`
    (the sign-in side) when this build has them."""
    return Roster(desk.people, desk.db, owner_token=desk.config.owner.token is not None,
                  links=desk.invitations, availability=desk.availability)


def desk_direct_channels(desk: Desk) -> list[DirectChannel]:
    """The desk's channels that can send to one person, under their identities' kind (the
    config's kind of the channel), for the pages and the API that show contact methods."""
    def kind_of(cid: int) -> str:
        configured = desk.config.channel(cid)
        return configured.kind if configured is not None else getattr(desk.channels.get(cid), "kind", "unknown")
    return direct_channels(desk.channels.adapters(), kind_of)


async def roster_of(request: Request) -> Roster:
    return roster_of_desk(app_desk(request))


async def oncall_of(request: Request) -> OnCall:
    return app_desk(request).oncall


async def bus_of(request: Request) -> ConversationBus:
    return app_desk(request).bus


async def metrics_of(request: Request) -> Metrics:
    return app_desk(request).metrics


ConfigDep = Annotated[Config, Depends(config_of)]
ClockDep = Annotated[Clock, Depends(clock_of)]
RendererDep = Annotated[Renderer, Depends(renderer_of)]
ConversationsDep = Annotated[Conversations, Depends(conversations_of)]
QueriesDep = Annotated[Queries, Depends(queries_of)]
RevocationsDep = Annotated[Revocations, Depends(revocations_of)]
HandoffsDep = Annotated[Handoffs, Depends(handoffs_of)]
ApprovalsDep = Annotated[Approvals, Depends(approvals_of)]
UserActionsDep = Annotated[UserActions, Depends(user_actions_of)]
SatisfactionDep = Annotated[Satisfaction, Depends(satisfaction_of)]
RouterDep = Annotated[Router, Depends(router_of)]
InboundDep = Annotated[Inbound, Depends(inbound_of)]
ChannelsDep = Annotated[ChannelSet, Depends(channels_of)]
FormLinksDep = Annotated[FormLinks, Depends(form_links_of)]
BusDep = Annotated[ConversationBus, Depends(bus_of)]
MetricsDep = Annotated[Metrics, Depends(metrics_of)]
RosterDep = Annotated[Roster, Depends(roster_of)]
OnCallDep = Annotated[OnCall, Depends(oncall_of)]
