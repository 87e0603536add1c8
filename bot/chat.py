"""The web chat front: subscribers talk to the bot at `/chat`, or in the widget a site embeds
with `<script src="{public_url}/widget.js">` (config `fronts: [{kind: web}]`).

The page never sees the API key. A visitor's conversation is named by a token signed with
`secret_key` (its own salt) that the page keeps in localStorage and sends as `X-Chat-Token`:
a reload keeps the conversation, and another site cannot send the header without a CORS
preflight this server never grants (so no CSRF). The page shows what the subscriber should
see (their messages, the assistant's and people's replies) and never the system messages
written for the agent. New messages arrive by long-poll, including a person's replies during
a handoff. A pending user action is shown with its steps and Done / Cancel.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from itsdangerous import BadSignature, URLSafeSerializer
from pydantic import BaseModel, ConfigDict, Field

from bot.api import ApiError, require_json
from bot.config import WebFrontConfig
from bot.desk import Desk
from bot.errors import NotFound
from bot.handoffs import ACTIVE
from bot.text import CleanStr
from bot.web import render_page

router = APIRouter(include_in_schema=False)

SALT = "handoff-desk.chat-conversation.v1"
VISIBLE_ROLES = ("subscriber", "agent", "human")
MAX_WAIT_SECONDS = 25.0


def _desk(request: Request) -> Desk:
    return request.app.state.desk


def _front(desk: Desk) -> WebFrontConfig:
    front = desk.config.web_front
    if front is None:
        raise ApiError(404, "not_found", "the web chat is not enabled (config fronts: [{kind: web}])")
    return front


def _tokens(desk: Desk) -> URLSafeSerializer:
    return URLSafeSerializer(desk.config.signing_keys, salt=SALT)


async def _conversation(request: Request, x_chat_token: str = Header(default="")) -> str:
    """The visitor's conversation, from the signed token the page keeps."""
    desk = _desk(request)
    _front(desk)
    try:
        cid = _tokens(desk).loads(x_chat_token)
    except BadSignature:
        raise ApiError(401, "unauthorized", "start a conversation first (POST /chat/api/conversations)") from None
    if not isinstance(cid, str):
        raise ApiError(401, "unauthorized", "start a conversation first (POST /chat/api/conversations)")
    try:
        conversation = await desk.conversation(cid)
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


# --------------------------------------------------------------------------- the page and the widget


@router.get("/chat", response_class=HTMLResponse)
async def chat_page(request: Request, embed: bool = False) -> HTMLResponse:
    desk = _desk(request)
    front = desk.config.web_front
    if front is None:
        return render_page(desk, "forms/status.html", status=404, title="There is no chat here", tone="info",
                           lines=["The web chat is not enabled on this server."], returned={}, missing=[], labels={})
    response = render_page(desk, "chat/chat.html", front=front, embed=embed)
    if embed:  # the widget's iframe: only the sites the owner named may frame it
        ancestors = " ".join(["'self'", *front.embed_origins])
        response.headers["Content-Security-Policy"] = response.headers["Content-Security-Policy"].replace(
            "frame-ancestors 'none'", f"frame-ancestors {ancestors}")
        del response.headers["X-Frame-Options"]
    return response


@router.get("/widget.js")
async def widget(request: Request) -> Response:
    desk = _desk(request)
    front = _front(desk)
    script = desk.renderer.render("chat/widget.js.txt", chat_url=json.dumps(f"{desk.config.public_url}/chat?embed=1"),
                                  title=json.dumps(front.title))
    return Response(script, media_type="text/javascript", headers={
        "Cache-Control": "public, max-age=300", "X-Content-Type-Options": "nosniff"})


# --------------------------------------------------------------------------- the page's API


chat_api = APIRouter(prefix="/chat/api", include_in_schema=False, dependencies=[Depends(require_json)])


@chat_api.post("/conversations", status_code=201)
async def start(request: Request, body: StartBody | None = None) -> dict[str, Any]:
    desk = _desk(request)
    _front(desk)
    cid = await desk.create_conversation(name=(body.name if body else None) or None)
    return {"token": _tokens(desk).dumps(cid)}


@chat_api.post("/messages")
async def say(request: Request, body: SayBody, cid: str = Depends(_conversation)) -> dict[str, Any]:
    desk = _desk(request)
    result = await desk.router.subscriber_message(cid, body.text)
    return {"message_id": result.message_id, "routed_to": result.routed_to}


@chat_api.get("/messages")
async def updates(
    request: Request, after: int = Query(default=0, ge=0), wait: float = Query(default=0, ge=0, le=MAX_WAIT_SECONDS),
    cid: str = Depends(_conversation),
) -> JSONResponse:
    desk = _desk(request)
    messages = await desk.wait_for_messages(cid, after, 200, wait)
    last = max([after, *(int(m.id or 0) for m in messages)])
    shown = [{"id": m.id, "role": m.role, "text": m.text, "author": m.author if m.role == "human" else None}
             for m in messages if m.role in VISIBLE_ROLES]
    return JSONResponse({"messages": shown, "last_id": last, **await _state(desk, cid)},
                        headers={"Cache-Control": "no-store"})


async def _state(desk: Desk, cid: str) -> dict[str, Any]:
    """What the page shows besides messages: a person on the line, a step to do."""
    async with desk.db.read() as session:
        handoff = await desk.handoffs.open_session(session, cid)
    action = await desk.user_actions.pending_for(cid)
    return {
        "person": {"label": handoff.channel_label} if handoff is not None and handoff.state == ACTIVE else None,
        "user_action": None if action is None else {
            "id": action.id, "reason": action.reason, "suggested_action": action.suggested_action,
            "steps": action.steps, "step": action.step,
        },
    }


@chat_api.post("/user_actions/{uaid}/response")
async def answer(request: Request, uaid: str, body: AnswerBody, cid: str = Depends(_conversation)) -> dict[str, Any]:
    desk = _desk(request)
    return await desk.user_actions.respond(uaid, body.outcome, via="subscriber", conversation_id=cid)


@chat_api.post("/user_actions/{uaid}/step")
async def step(request: Request, uaid: str, body: StepBody, cid: str = Depends(_conversation)) -> dict[str, Any]:
    desk = _desk(request)
    action = await desk.user_actions.get(uaid)
    if action.conversation_id != cid:
        raise NotFound("user action", uaid)
    moved = await desk.user_actions.move(uaid, body.move)
    return {"step": moved.step}
