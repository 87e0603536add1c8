"""The web chat front: subscribers talk to the bot at `/chat`, or in the widget a site embeds
with `<script src="{public_url}/widget.js">` (config `fronts: [{kind: web}]`).

The page never sees the API key. A visitor's conversation is named by a token signed with
`secret_key` (its own salt) that the page keeps in localStorage and sends as `X-Chat-Token`:
a reload keeps the conversation, and another site cannot send the header without a CORS
preflight this server never grants (so no CSRF). The page shows what the subscriber should
see (their messages, the assistant's and people's replies) and never the system messages
written for the agent. New messages arrive by long-poll, including a person's replies during
a handoff. A pending user action is shown with its steps and Done / Cancel.

Abuse: anyone can start conversations here, and every message may cost an agent turn, so
the API is rate-limited with token buckets: new conversations per client address
(`max_new_conversations_per_minute`; an IPv6 client is its /64) and messages per
conversation (`max_messages_per_minute`). Over a limit: 429 with Retry-After, in the API's
error shape; the page says so in plain words and keeps what the visitor typed. The buckets
live in this process (per instance), take their time from the desk's clock and forget idle
clients, so memory stays bounded. The client address is the socket peer, unless that peer
is one of `server.trusted_proxies` (bot/web/client_address.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from bot.config import Config, WebFrontConfig
from bot.domain.handoffs import Handoffs
from bot.domain.rendering import Renderer
from bot.domain.satisfaction import COMMENT_LIMIT, Satisfaction
from bot.domain.user_actions import UserActions
from bot.errors import NotFound
from bot.runtime.clock import Clock
from bot.runtime.ratelimit import TokenBuckets
from bot.runtime.signed_ids import SignedIds
from bot.runtime.text import CleanStr
from bot.store.vocabulary import Role
from bot.tools.user_actions import outcome_result
from bot.web.api import ApiError, require_json
from bot.web.client_address import Network, address_key, client_ip, trusted_networks
from bot.web.deps import (
    ClockDep,
    ConfigDep,
    ConversationsDep,
    HandoffsDep,
    RendererDep,
    RouterDep,
    SatisfactionDep,
    UserActionsDep,
)
from bot.web.pages import render_page

router = APIRouter(include_in_schema=False)

SALT = "handoff-desk.chat-conversation.v1"
VISIBLE_ROLES = (Role.SUBSCRIBER, Role.AGENT, Role.HUMAN)
MAX_WAIT_SECONDS = 25.0


def _front(config: Config) -> WebFrontConfig:
    front = config.web_front
    if front is None:
        raise ApiError(404, "not_found", "the web chat is not enabled (config fronts: [{kind: web}])")
    return front


def _tokens(config: Config) -> SignedIds:
    return SignedIds(config.signing_keys, SALT)


async def _conversation(config: ConfigDep, conversations: ConversationsDep, x_chat_token: str = Header(default="")) -> str:
    """The visitor's conversation, from the signed token the page keeps."""
    _front(config)
    cid = _tokens(config).ident(x_chat_token)
    if cid is None:
        raise ApiError(401, "unauthorized", "start a conversation first (POST /chat/api/conversations)")
    try:
        conversation = await conversations.get(cid)
    except NotFound:
        raise ApiError(401, "unauthorized", "this conversation no longer exists; start a new one") from None
    if conversation.serves_handoff_session_id is not None:
        raise ApiError(403, "forbidden", "not a subscriber conversation")
    return cid


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class StartBody(_Body):
    name: CleanStr | None = Field(default=None, max_length=200)


class SayBody(_Body):
    text: CleanStr = Field(min_length=1, max_length=10_000)


class AnswerBody(_Body):
    outcome: Literal["done", "cancelled"]


class StepBody(_Body):
    move: Literal["next", "previous"]


class RateBody(_Body):
    satisfied: bool


class CommentBody(_Body):
    text: CleanStr = Field(min_length=1, max_length=COMMENT_LIMIT)


# --------------------------------------------------------------------------- rate limits

class RateLimited(ApiError):
    """429 in the API's error shape, with Retry-After (seconds) in the header and the body."""

    def __init__(self, retry_after: int, hint: str) -> None:
        super().__init__(429, "rate_limited", hint, retry_after=retry_after)
        self.retry_after = retry_after

    def response(self) -> JSONResponse:
        response = super().response()
        response.headers["Retry-After"] = str(self.retry_after)
        return response


class ChatLimits:
    def __init__(self, front: WebFrontConfig, clock: Clock, trusted_proxies: Sequence[Network | str]) -> None:
        self.front = front
        self.trusted_proxies = trusted_networks(trusted_proxies)
        self.conversations = TokenBuckets(front.max_new_conversations_per_minute, clock)
        self.messages = TokenBuckets(front.max_messages_per_minute, clock)

    def check(self, buckets: TokenBuckets, key: str, hint: str) -> None:
        wait = buckets.take(key)
        if wait:
            seconds = max(1, math.ceil(wait))
            raise RateLimited(seconds, hint.format(seconds=seconds))


async def _limits(request: Request, config: ConfigDep, clock: ClockDep) -> ChatLimits:
    """This app's buckets, made on first use from the web front's config and the desk's clock."""
    front = _front(config)
    limits: ChatLimits | None = getattr(request.app.state, "chat_limits", None)
    if limits is None or limits.front is not front:
        limits = request.app.state.chat_limits = ChatLimits(front, clock, config.server.trusted_proxies)
    return limits


LimitsDep = Annotated[ChatLimits, Depends(_limits)]


# --------------------------------------------------------------------------- the page and the widget


@router.get("/chat", response_class=HTMLResponse)
async def chat_page(config: ConfigDep, renderer: RendererDep, embed: bool = False) -> HTMLResponse:
    front = config.web_front
    if front is None:
        return render_page(renderer, "forms/status.html", status=404, title="There is no chat here", tone="info",
                           lines=["The web chat is not enabled on this server."], returned={}, missing=[], labels={})
    response = render_page(renderer, "chat/chat.html", front=front, embed=embed)
    if embed:  # the widget's iframe: only the sites the owner named may frame it
        ancestors = " ".join(["'self'", *front.embed_origins])
        response.headers["Content-Security-Policy"] = response.headers["Content-Security-Policy"].replace(
            "frame-ancestors 'none'", f"frame-ancestors {ancestors}")
        del response.headers["X-Frame-Options"]
    return response


@router.get("/widget.js")
async def widget(config: ConfigDep, renderer: RendererDep) -> Response:
    front = _front(config)
    script = renderer.render("chat/widget.js.txt", chat_url=json.dumps(f"{config.public_url}/chat?embed=1"),
                                  title=json.dumps(front.title))
    return Response(script, media_type="text/javascript", headers={
        "Cache-Control": "public, max-age=300", "X-Content-Type-Options": "nosniff"})


# --------------------------------------------------------------------------- the page's API


chat_api = APIRouter(prefix="/chat/api", include_in_schema=False, dependencies=[Depends(require_json)])


@chat_api.post("/conversations", status_code=201)
async def start(
    request: Request, config: ConfigDep, clock: ClockDep, conversations: ConversationsDep, body: StartBody | None = None,
) -> dict[str, Any]:
    limits = await _limits(request, config, clock)  # here, not as a dependency: a bad body stays a 422 where the chat is off
    limits.check(limits.conversations, address_key(client_ip(request, limits.trusted_proxies)),
                 "too many new conversations from your address; try again in {seconds} s")
    cid = await conversations.start(name=(body.name if body else None) or None, front="web")
    return {"token": _tokens(config).token(cid)}


@chat_api.post("/messages")
async def say(limits: LimitsDep, router: RouterDep, body: SayBody, cid: str = Depends(_conversation)) -> dict[str, Any]:
    limits.check(limits.messages, cid, "too many messages in this conversation; try again in {seconds} s")
    result = await router.subscriber_message(cid, body.text)
    return {"message_id": result.message_id, "routed_to": result.routed_to}


@chat_api.get("/messages")
async def updates(
    conversations: ConversationsDep, handoffs: HandoffsDep, user_actions: UserActionsDep, renderer: RendererDep,
    satisfaction: SatisfactionDep, after: int = Query(default=0, ge=0), wait: float = Query(default=0, ge=0, le=MAX_WAIT_SECONDS),
    cid: str = Depends(_conversation),
) -> JSONResponse:
    messages = await conversations.wait_for_messages(cid, after, 200, wait)
    last = max([after, *(int(m.id or 0) for m in messages)])
    shown = [{"id": m.id, "role": m.role, "text": m.text, "author": m.author if m.role == Role.HUMAN else None}
             for m in messages if m.role in VISIBLE_ROLES]
    return JSONResponse({"messages": shown, "last_id": last, **await _state(handoffs, user_actions, satisfaction, renderer, cid)},
                        headers={"Cache-Control": "no-store"})


async def _state(
    handoffs: Handoffs, user_actions: UserActions, satisfaction: Satisfaction, renderer: Renderer, cid: str,
) -> dict[str, Any]:
    """What the page shows besides messages: who is on the line (or awaited), a step to do,
    the satisfaction question's quick replies (or its comment box)."""
    line = await handoffs.on_the_line(cid)
    action = await user_actions.pending_for(cid)
    asked = await satisfaction.open_for(cid)
    return {
        "person": None if line is None else {
            "joined": line.joined, "name": line.name,
            "text": renderer.render("chat/banner.txt", joined=line.joined, who=line.name,
                                         estimated_response=line.estimated_response).strip(),
        },
        "user_action": None if action is None else {
            "id": action.id, "reason": action.reason, "suggested_action": action.suggested_action,
            "steps": action.steps, "step": action.step,
        },
        "satisfaction": None if asked is None or asked.in_words else {"handoff_id": asked.handoff_id, "stage": asked.stage},
    }


@chat_api.post("/user_actions/{uaid}/response")
async def answer(user_actions: UserActionsDep, uaid: str, body: AnswerBody, cid: str = Depends(_conversation)) -> dict[str, Any]:
    return outcome_result(await user_actions.respond(uaid, body.outcome, via="subscriber", conversation_id=cid))


@chat_api.post("/user_actions/{uaid}/step")
async def step(user_actions: UserActionsDep, uaid: str, body: StepBody, cid: str = Depends(_conversation)) -> dict[str, Any]:
    action = await user_actions.get(uaid)
    if action.conversation_id != cid:
        raise NotFound("user action", uaid)
    moved = await user_actions.move(uaid, body.move)
    return {"step": moved.step}


@chat_api.post("/satisfaction/{sid}")
async def rate(satisfaction: SatisfactionDep, sid: str, body: RateBody, cid: str = Depends(_conversation)) -> dict[str, Any]:
    """👍 / 👎 on the satisfaction question; a closed question records nothing."""
    result = await satisfaction.answer(sid, body.satisfied, conversation_id=cid, via="web")
    return {"recorded": result.recorded}


@chat_api.post("/satisfaction/{sid}/comment")
async def comment(satisfaction: SatisfactionDep, sid: str, body: CommentBody, cid: str = Depends(_conversation)) -> dict[str, Any]:
    """The optional comment after the answer."""
    result = await satisfaction.comment(sid, body.text, conversation_id=cid)
    return {"recorded": result.recorded}
