"""The JSON HTTP API: its routes are a contract clients depend on (docs/architecture.md, "Contracts").

Errors are always `{"error": code, "details": {"hint": …}}` with a fitting status; request
bodies are validated by pydantic models that forbid unknown keys, so a misspelt field is
an error naming it, not a silently ignored value.
"""

from __future__ import annotations

import hmac
import json
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, EmailStr, Field, SecretStr

from bot.domain.approval_votes import ANSWERS, OWNER, DecisionOutcome
from bot.domain.approvals import approval_view
from bot.domain.conversations import message_view
from bot.domain.handoffs import OutcomeInput
from bot.domain.satisfaction import satisfaction_view
from bot.domain.user_actions import view as user_action_view
from bot.errors import error_body
from bot.runtime.metrics import CONTENT_TYPE
from bot.runtime.text import CleanStr, iso
from bot.store.audit import event_view
from bot.store.models import HandoffRecipient, HandoffSession
from bot.store.vocabulary import OPEN_STATES, HandoffState, ReleaseReason
from bot.tools.user_actions import outcome_result
from bot.web.deps import (
    ApprovalsDep,
    ChannelsDep,
    ConfigDep,
    ConversationsDep,
    FormLinksDep,
    HandoffsDep,
    InboundDep,
    MetricsDep,
    QueriesDep,
    RouterDep,
    SatisfactionDep,
    UserActionsDep,
)
from bot.web.idempotency import keyed_routes
from channels.base import WebhookRequest
from forms.links import FormLinks

MAX_WAIT_SECONDS = 30.0
MAX_ID = 2**63 - 1


async def agent_caller(request: Request, config: ConfigDep) -> None:
    """The guard of the API: the caller holds api.key, and a POST says it is JSON. Both checks
    are one dependency because FastAPI solves every dependency of a route on each request."""
    _require_bearer(request, config.api.key, "api.key")
    await require_json(request)


async def owner_caller(request: Request, config: ConfigDep) -> None:
    """The guard of approval decisions. Deciding an approval is the owner's act, not the
    agent's: the agent side holds api.key (the webhook bot, DeskClient, the MCP bridge) and
    must not approve its own calls. With owner.token set, only it decides; without one,
    api.key does. A POST says it is JSON, as everywhere in the API."""
    if config.owner.token is not None:
        _require_bearer(request, config.owner.token, "owner.token")
    else:
        _require_bearer(request, config.api.key, "api.key")
    await require_json(request)


def _require_bearer(request: Request, key: SecretStr | None, name: str) -> None:
    if key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.get_secret_value().encode()):
        raise ApiError(401, "unauthorized", f"send the header Authorization: Bearer <{name}>")


class ApiError(Exception):
    def __init__(self, status: int, code: str, hint: str, **details: Any) -> None:
        super().__init__(hint)
        self.status, self.code, self.hint, self.details = status, code, hint, details

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(error_body(self.code, self.hint, **self.details), self.status, headers=headers)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Subscriber(_Body):
    name: CleanStr | None = Field(default=None, max_length=200)
    email: EmailStr | None = None
    external_id: CleanStr | None = Field(default=None, max_length=200)


class CreateConversation(_Body):
    subscriber: Subscriber | None = None
    # A sibling agent (run outside this server) serving a handoff gets a conversation
    # bound to it; there it may call handoff_release for exactly that session.
    serves_handoff_session_id: str | None = Field(default=None, max_length=40)
    # Run as a background task: user actions go to the orchestrator's webhook (USER_ACTION_REQUESTED).
    background: bool = False


class PostMessage(_Body):
    text: CleanStr = Field(min_length=1, max_length=10_000)


class ReleaseBody(_Body):
    outcome: OutcomeInput | None = Field(default=None, title="Outcome")
    note: CleanStr | None = Field(default=None, max_length=2000)
    return_values: dict[str, Any] | None = None


def media_type(request: Request) -> str:
    """The request's Content-Type without its parameters (`application/json; charset=utf-8`
    is `application/json`)."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def require_json(request: Request) -> None:
    """POSTs to the API must say they are JSON: a cross-site page cannot send that without
    a CORS preflight, which this server never grants."""
    if request.method == "POST" and media_type(request) != "application/json":
        raise ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json")


def invalid_json(reason: str) -> ApiError:
    """The 400 for a body that does not parse, wherever the API reads one."""
    return ApiError(400, "invalid_json", f"the body is not valid JSON ({reason})")


def handoff_view(handoff: HandoffSession, forms: FormLinks) -> dict[str, Any]:
    """A handoff as the API shows it; the form link only while the handoff is active."""
    return {
        "handoff_session_id": handoff.id,
        "short_code": handoff.short_code,
        "conversation_id": handoff.conversation_id,
        "state": handoff.state,
        "channel_id": handoff.channel_id,
        "channel_kind": handoff.channel_kind,
        "channel_label": handoff.channel_label,
        "channel_message_id": handoff.channel_message_id,
        "urgency": handoff.urgency,
        "summary": handoff.summary,
        "expected_action": handoff.expected_action,
        "contact_back_email": handoff.contact_back_email,
        "extra_context": handoff.extra_context,
        "expected_return": handoff.expected_return,
        "estimated_response": handoff.estimated_response,
        "release_reason": handoff.release_reason,
        "released_by": handoff.released_by,
        "outcome": handoff.outcome,
        "note": handoff.note,
        "returned": handoff.returned,
        "missing_required": handoff.missing_required,
        "failure": handoff.failure,
        "form_url": forms.url_for(handoff),
        "created_at": iso(handoff.created_at),
        "activated_at": iso(handoff.activated_at),
        "last_activity_at": iso(handoff.last_activity_at),
        "idle_deadline": iso(handoff.idle_deadline) if handoff.state == HandoffState.ACTIVE else None,
        "released_at": iso(handoff.released_at),
        # On a route (config `routes:`); all None for a handoff straight to a channel
        "route_id": handoff.route_id,
        "step": handoff.step,
        "escalate_at": iso(handoff.escalate_at) if handoff.state == HandoffState.ACTIVE else None,
        "claimed_by": handoff.claimed_by,
        "claimed_at": iso(handoff.claimed_at),
        "claimed_via": handoff.claimed_via,
    }


def recipient_view(recipient: HandoffRecipient) -> dict[str, Any]:
    """One channel a route's handoff notified: which step, whether it was reached, and when."""
    return {
        "channel_id": recipient.channel_id,
        "channel_kind": recipient.channel_kind,
        "channel_label": recipient.channel_label,
        "step": recipient.step,
        "state": recipient.state,
        "channel_message_id": recipient.channel_message_id,
        "notified_at": iso(recipient.notified_at),
        "failed_at": iso(recipient.failed_at),
        "error": recipient.error,
    }


# Their POST routes take an Idempotency-Key (bot/web/idempotency.py).
api = APIRouter(prefix="/api", dependencies=[Depends(agent_caller)], route_class=keyed_routes(agent_caller))


@api.post("/conversations", status_code=201)
async def create_conversation(
    conversations: ConversationsDep, handoffs: HandoffsDep, body: CreateConversation | None = None,
) -> dict[str, Any]:
    body = body or CreateConversation()
    if body.serves_handoff_session_id:
        await handoffs.get(body.serves_handoff_session_id)  # 404 when unknown
    subscriber = body.subscriber or Subscriber()
    cid = await conversations.start(
        name=subscriber.name, email=str(subscriber.email) if subscriber.email else None,
        external_id=subscriber.external_id, serves_handoff_session_id=body.serves_handoff_session_id,
        background=body.background,
    )
    return {"conversation_id": cid}


@api.post("/conversations/{cid}/messages")
async def post_message(cid: str, body: PostMessage, router: RouterDep) -> dict[str, Any]:
    result = await router.subscriber_message(cid, body.text)
    return {
        "message_id": result.message_id,
        "routed_to": result.routed_to,
        "handoff_session_id": result.handoff_session_id,
        "replies": [{"id": m.id, "role": m.role, "text": m.text} for m in result.replies],
    }


@api.get("/conversations/{cid}/messages")
async def list_messages(
    cid: str,
    conversations: ConversationsDep,
    after: int = Query(default=0, ge=0, le=MAX_ID, description="Only messages with a larger id."),
    limit: int = Query(default=200, ge=1, le=500),
    wait: float = Query(default=0, ge=0, le=MAX_WAIT_SECONDS, description="Long-poll: wait up to this many seconds for a new message."),
) -> dict[str, Any]:
    messages = await conversations.wait_for_messages(cid, after, limit, wait)
    return {"messages": [message_view(m) for m in messages]}


@api.get("/conversations/{cid}/tools")
async def list_tools(
    cid: str, router: RouterDep, format: Literal["plain", "openai", "anthropic"] = "plain"
) -> dict[str, Any]:
    return {"tools": [spec.render(format) for spec in await router.tool_specs(cid)]}


@api.post("/conversations/{cid}/tools/{name}")
async def call_tool(cid: str, name: str, request: Request, router: RouterDep) -> dict[str, Any]:
    raw = await request.body()
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:  # UnicodeDecodeError included
        raise invalid_json(f"{exc}; send the tool input as a JSON object") from None
    return await router.call_tool(cid, name, args)


@api.get("/handoffs")
async def list_handoffs(
    queries: QueriesDep,
    forms: FormLinksDep,
    state: Literal["open", "active", "dispatching", "released", "failed"] = "open",
    limit: int = Query(default=100, ge=1, le=500),
) -> dict[str, Any]:
    states = OPEN_STATES if state == "open" else (HandoffState(state),)
    return {"handoffs": [handoff_view(h, forms) for h in await queries.handoffs(states=states, limit=limit)]}


@api.get("/handoffs/{sid}")
async def get_handoff(sid: str, handoffs: HandoffsDep, forms: FormLinksDep, satisfaction: SatisfactionDep) -> dict[str, Any]:
    handoff = await handoffs.get(sid)
    view = handoff_view(handoff, forms)
    view["satisfaction"] = satisfaction_view(await satisfaction.of(sid))
    if handoff.route_id is not None:
        view["recipients"] = [recipient_view(r) for r in await handoffs.recipients_of(sid)]
    return view


@api.get("/handoffs/{sid}/events")
async def handoff_events(sid: str, queries: QueriesDep) -> dict[str, Any]:
    return {"events": [event_view(e) for e in await queries.events(sid)]}


@api.post("/handoffs/{sid}/release")
async def release_handoff(sid: str, handoffs: HandoffsDep, forms: FormLinksDep, body: ReleaseBody | None = None) -> Any:
    body = body or ReleaseBody()
    result = await handoffs.release(
        sid, reason=ReleaseReason.OWNER, actor="owner (API)", outcome=body.outcome, note=body.note, return_values=body.return_values
    )
    view = handoff_view(result.session, forms)
    if not result.released:
        hint = f"the handoff is {result.session.state}" + (
            f" (released by {result.session.release_reason})" if result.session.release_reason else ""
        )
        raise ApiError(409, "handoff_not_active", hint, state=result.session.state, handoff=view)
    return {"released": True, "resume_message_id": result.resume_message_id, "handoff": view}


class DecisionBody(_Body):
    decision: Literal["approve", "deny"]
    reason: CleanStr | None = Field(default=None, max_length=2000)
    always_allow: bool = False
    decided_by: CleanStr = Field(default="owner (API)", min_length=1, max_length=200)


@api.get("/approvals")
async def list_approvals(
    approvals: ApprovalsDep,
    state: Literal["pending", "approved", "denied", "expired", "unrouted", "cleared"] | None = None,
    limit: int = Query(default=100, ge=1, le=500),
) -> dict[str, Any]:
    return {"approvals": [approval_view(a) for a in await approvals.listing(state=state, limit=limit)]}


@api.get("/approvals/{aid}")
async def get_approval(aid: str, approvals: ApprovalsDep) -> dict[str, Any]:
    return await approvals.view(aid)


decisions = APIRouter(prefix="/api", dependencies=[Depends(owner_caller)], route_class=keyed_routes(owner_caller))


@decisions.post("/approvals/{aid}/decision")
async def decide_approval(aid: str, body: DecisionBody, approvals: ApprovalsDep, config: ConfigDep) -> dict[str, Any]:
    """The owner decides. Under owner.token the caller is the owner token's service identity
    (the same as the inbox's owner-token session): it decides a one-person approval, and never
    counts as a person in a two-person one; without one, api.key says nobody."""
    result = await approvals.decide(
        aid, approve=body.decision == "approve", by=body.decided_by, via="api",
        voter=OWNER if config.owner.token is not None else None, reason=body.reason, always_allow=body.always_allow,
    )
    if result.outcome is DecisionOutcome.UNIDENTIFIED:
        raise ApiError(403, "approval_needs_identity", "a person must decide this action, and the API under api.key "
                       "says nobody", approval=await approvals.view(aid))
    if result.outcome in (DecisionOutcome.NOT_A_PERSON, DecisionOutcome.UNLINKED):
        raise ApiError(403, "approval_needs_a_person", ANSWERS[result.outcome], approval=await approvals.view(aid))
    if result.outcome is DecisionOutcome.SAME_PERSON:
        raise ApiError(409, "approval_already_counted", ANSWERS[result.outcome], approval=await approvals.view(aid))
    if not result.changed:
        raise ApiError(409, "approval_not_pending", f"the approval is {result.approval.state}; the decision changed nothing",
                       approval=approval_view(result.approval))
    return await approvals.view(aid)


class StepBody(_Body):
    move: Literal["next", "previous"]


class UserActionResponseBody(_Body):
    outcome: Literal["done", "cancelled"]


@api.get("/user_actions/{uaid}")
async def get_user_action(uaid: str, user_actions: UserActionsDep) -> dict[str, Any]:
    return user_action_view(await user_actions.get(uaid))


@api.post("/user_actions/{uaid}/step")
async def move_user_action_step(uaid: str, body: StepBody, user_actions: UserActionsDep) -> dict[str, Any]:
    return user_action_view(await user_actions.move(uaid, body.move))


@api.post("/user_actions/{uaid}/response")
async def respond_user_action(uaid: str, body: UserActionResponseBody, user_actions: UserActionsDep) -> dict[str, Any]:
    """The subscriber's Done / Cancel, through the subscriber's front (or the owner's API)."""
    return outcome_result(await user_actions.respond(uaid, body.outcome, via="api"))


# --------------------------------------------------------------------------- outside /api

public = APIRouter()


@public.post("/webhooks/{channel_id}")
async def webhook(
    channel_id: int, request: Request, channels: ChannelsDep, inbound: InboundDep, config: ConfigDep,
) -> Response:
    """Provider callbacks: the adapter verifies the signature on the raw body, then parses it
    (a body that does not parse is a 400 `invalid_json`, MalformedWebhook); messages are
    stored (deduplicated) before the answer, relayed after it. A body of a type the provider
    never sends is a 415 before the adapter sees it."""
    adapter = channels.get(channel_id)
    if adapter is None or not adapter.capabilities.webhook or not channels.is_available(channel_id):
        raise ApiError(404, "not_found", f"channel {channel_id} takes no webhooks")
    if media_type(request) not in adapter.webhook_media_types:
        raise ApiError(415, "unsupported_media_type",
                       f"this channel's webhook takes {' or '.join(sorted(adapter.webhook_media_types))}")
    reply = await adapter.handle_webhook(WebhookRequest(
        body=await request.body(),
        headers={k.lower(): v for k, v in request.headers.items()},
        query=dict(request.query_params),
        url=config.public_url + request.url.path + (f"?{request.url.query}" if request.url.query else ""),
    ))
    for message in reply.messages:
        await inbound.submit(channel_id, message)
    return Response(reply.body, status_code=reply.status, media_type=reply.content_type)


@public.get("/healthz")
async def healthz(queries: QueriesDep, channels: ChannelsDep) -> JSONResponse:
    try:
        await queries.ping()
        database = "ok"
    except Exception as exc:  # report, don't raise: this is the page that says what is wrong
        database = f"error: {type(exc).__name__}"
    body = {"status": "ok" if database == "ok" else "degraded", "database": database, "channels": channels.health()}
    return JSONResponse(body, status_code=200 if database == "ok" else 503)


@public.get("/metrics")
async def metrics(request: Request, metrics: MetricsDep, config: ConfigDep) -> Response:
    """Prometheus metrics; behind `Authorization: Bearer <metrics.token>` when one is set (the
    counts say how busy the desk is and which channels are down)."""
    _require_bearer(request, config.metrics.token, "metrics.token")
    return Response(metrics.exposition(), media_type=CONTENT_TYPE)
