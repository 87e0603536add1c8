"""The JSON HTTP API: its routes are a contract clients depend on (docs/architecture.md, "Contracts").

Errors are always `{"error": code, "details": {"hint": …}}` with a fitting status; request
bodies are validated by pydantic models that forbid unknown keys, so a misspelt field is
an error naming it, not a silently ignored value.

Who calls (`identify`): the bearer is the agent's key (`api.key`: the AI agent's side — the
webhook bot, DeskClient, the MCP bridge — a machine that never decides approvals), the owner
token (its service identity: admin, but nobody in a two-person approval), or a person's own
API token (`hdp_…`, bot/domain/people/tokens.py), acting as that person with the token's role.
Each route declares who it lets in with `api_needs(role, agent=…)`, and `ApiNeeds` is the one
place that checks it: 401 (with `WWW-Authenticate: Bearer`) for no or an unknown credential,
403 `forbidden` naming what is `needed` for a known one that may not. Releases and decisions
record the caller (`Actor.label`, and its `voter`: "person:<id>", "owner", or None for the
agent). tests/test_roles.py asks every route as every kind of caller.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, EmailStr, Field, SecretStr

from bot.config.people import Role
from bot.domain.approval_votes import ANSWERS, DecisionOutcome
from bot.domain.approvals import approval_view, settled
from bot.domain.conversations import message_view
from bot.domain.handoffs import OutcomeInput
from bot.domain.people import Actor
from bot.domain.people.tokens import PREFIX as TOKEN_PREFIX
from bot.domain.satisfaction import satisfaction_view
from bot.domain.user_actions import PENDING as USER_ACTION_PENDING
from bot.domain.user_actions import view as user_action_view
from bot.errors import error_body
from bot.runtime.metrics import CONTENT_TYPE
from bot.runtime.text import CleanStr, iso
from bot.store.audit import event_view
from bot.store.models import HandoffRecipient, HandoffSession
from bot.store.vocabulary import OPEN_STATES, HandoffState, ReleaseReason
from bot.tools.user_actions import outcome_result
from bot.web.answers import (
    ApprovalAnswer,
    ApprovalList,
    ConversationCreated,
    EventList,
    HandoffAnswer,
    HandoffList,
    HandoffReleased,
    MessageList,
    MessagePosted,
    ToolList,
    UserActionAnswer,
    UserActionResponded,
    answer,
)
from bot.web.deps import (
    ApprovalsDep,
    ChannelsDep,
    ConfigDep,
    ConversationsDep,
    FormLinksDep,
    HandoffsDep,
    InboundDep,
    MetricsDep,
    OnCallDep,
    QueriesDep,
    RouterDep,
    SatisfactionDep,
    UserActionsDep,
    app_desk,
)
from bot.web.idempotency import keyed_routes
from channels.base import WebhookRequest
from forms.links import FormLinks

MAX_WAIT_SECONDS = 30.0
MAX_ID = 2**63 - 1


# --------------------------------------------------------------------------- who is calling

AGENT = Actor(name="agent", via="api")  # the agent's key: a machine, nobody in a vote (voter None)


@dataclass(frozen=True, slots=True)
class ApiCaller:
    """Who sent a request: the agent's key (`role` None: a machine with routes, not a role),
    the owner token's service identity (admin, not a person), or a person through one of their
    API tokens (the token's role, capped by theirs). `anonymous`: the agent of an API without
    `api.key`, which sent no key because none is asked."""

    actor: Actor
    role: Role | None = None
    anonymous: bool = False

    @property
    def is_agent(self) -> bool:
        return self.role is None


AGENT_KEY = ApiCaller(AGENT)
OPEN_API = ApiCaller(AGENT, anonymous=True)
OWNER_SERVICE = ApiCaller(Actor.owner_token("api"), Role.ADMIN)
_TOKEN_CALLER = "handoff.api_caller"  # the request scope's cache of a personal token's caller


def _same(sent: str, secret: SecretStr) -> bool:
    return hmac.compare_digest(sent.encode(), secret.get_secret_value().encode())


async def identify(request: Request) -> ApiCaller:
    """The caller the request's bearer names, or a 401. The agent's key is one constant-time
    compare and no read (it is every agent call); owner.token a second compare; only a
    personal token (`hdp_…`) reads the database. Without `api.key` the API is open: a request
    with no known credential is the agent, as it always was — but a personal token that no
    longer works is refused, never quietly taken for the agent."""
    config = app_desk(request).config
    key = config.api.key
    scheme, _, sent = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        sent = sent.strip()
        if key is not None and _same(sent, key):
            return AGENT_KEY
        if config.owner.token is not None and _same(sent, config.owner.token):
            return OWNER_SERVICE
        if sent.startswith(TOKEN_PREFIX):
            return await _token_caller(request, sent)
    if key is None:
        return OPEN_API
    raise ApiError(401, "unauthorized", "send the header Authorization: Bearer <api.key>, <owner.token> or a personal "
                                        "API token (hdp_…)")


async def _token_caller(request: Request, secret: str) -> ApiCaller:
    """A person through their token. Kept on the request, so the idempotency check and the
    route's own dependency (bot/web/idempotency.py runs both) read the token once."""
    cached: ApiCaller | None = request.scope.get(_TOKEN_CALLER)
    if cached is not None:
        return cached
    use = await app_desk(request).api_tokens.authenticate(secret)
    if use is None:
        raise ApiError(401, "unauthorized", "this personal API token does not work: it was revoked, its person "
                                            "disabled, or it never existed; make a new one at /inbox/tokens")
    caller = ApiCaller(Actor.of_person(use.person, "api"), use.role)
    request.scope[_TOKEN_CALLER] = caller
    return caller


@dataclass(frozen=True)
class ApiNeeds:
    """What an /api route allows, declared on the route (`api_needs`) and checked here alone:
    a person or service whose role allows `role` (None: no person at all), the agent's key
    when `agent`, and, with `agent_alone`, the agent's key while the desk has neither
    owner.token nor people (a one-operator desk, where api.key is the only key there is).
    An API without api.key is open: its agent routes take everyone, as they always did.

    Called by FastAPI as the route's dependency (the caller, checked, and a POST's JSON body
    type, in one dependency because FastAPI solves every dependency on each request), and
    by the idempotency wrapper before a key is taken (bot/web/idempotency.py)."""

    role: Role | None
    agent: bool = False
    agent_alone: bool = False

    async def __call__(self, request: Request) -> ApiCaller:
        caller = await identify(request)
        if not self.allows(caller, open_api=app_desk(request).config.api.key is None):
            if not (caller.is_agent and self.agent_alone and await _alone(request)):
                raise self.refusal(caller)
        await require_json(request)
        return caller

    def allows(self, caller: ApiCaller, *, open_api: bool) -> bool:
        if caller.role is None:
            return self.agent
        if self.role is not None and caller.role.allows(self.role):
            return True
        return self.agent and open_api

    def refusal(self, caller: ApiCaller) -> ApiError:
        if caller.anonymous:
            return ApiError(401, "unauthorized", "send the header Authorization: Bearer <owner.token> or a personal "
                                                 "API token (hdp_…)")
        if caller.role is None:
            return ApiError(403, "forbidden", f"this needs the {self.role} role, which the agent's key (api.key) does "
                                              "not have (the agent must not approve its own calls): send owner.token "
                                              "or a personal API token", needed=self.role)
        if self.role is None:
            return ApiError(403, "forbidden", "only the agent's key (api.key) calls this route: it speaks as the AI "
                                              "agent and the subscriber, never as a person", needed="api.key")
        return ApiError(403, "forbidden", f"this needs the {self.role} role; {caller.actor.name} acts as {caller.role} "
                                          "here", needed=self.role)


def api_needs(role: Role | None, *, agent: bool = False, agent_alone: bool = False) -> ApiNeeds:
    """The dependency of an /api route: who may call it (see ApiNeeds)."""
    return ApiNeeds(role, agent=agent, agent_alone=agent_alone)


async def _alone(request: Request) -> bool:
    desk = app_desk(request)
    return desk.config.owner.token is None and await desk.people.count() == 0


def declared_needs(route: APIRoute) -> ApiNeeds:
    """The one `api_needs` an /api route declares; a route without one is a mistake caught
    when the app is built (its POSTs' idempotency check runs it)."""
    found = [d.call for d in route.dependant.dependencies if isinstance(d.call, ApiNeeds)]
    if len(found) != 1:
        raise TypeError(f"{route.path}: an /api route declares who may call it once, with api_needs(…)")
    return found[0]


def api_router() -> APIRouter:
    """A router under /api: its POSTs take Idempotency-Key, checked against each route's
    declared `api_needs` (bot/web/people_api.py and others make theirs here too)."""
    return APIRouter(prefix="/api", route_class=keyed_routes(declared_needs))


# Who may call each route: one declaration per route, checked in ApiNeeds alone.
AGENTS = api_needs(None, agent=True)  # the agent's own surface: it speaks as the AI agent and the subscriber
READS = api_needs(Role.VIEWER, agent=True)  # handoffs and approvals: anyone who may look, and the agent
RELEASES = api_needs(Role.AGENT, agent=True)  # a person (or the owner token) ends a handoff; the agent as today
DECIDES = api_needs(Role.AGENT, agent_alone=True)  # never the agent: it must not approve its own calls


class ApiError(Exception):
    def __init__(self, status: int, code: str, hint: str, **details: Any) -> None:
        super().__init__(hint)
        self.status, self.code, self.hint, self.details = status, code, hint, details

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(error_body(self.code, self.hint, **self.details), self.status, headers=headers)


def _require_bearer(request: Request, key: SecretStr | None, name: str) -> None:
    """The check of a route outside /api that one configured token guards (/metrics)."""
    if key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not _same(token.strip(), key):
        raise ApiError(401, "unauthorized", f"send the header Authorization: Bearer <{name}>")


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


def long_poll(until: str) -> Any:
    """The `wait` query parameter of a GET that can long-poll: it answers as soon as what it
    waits for happens, or after `wait` seconds with the state as it is (0: at once)."""
    return Query(default=0, ge=0, le=MAX_WAIT_SECONDS,
                 description=f"Long-poll: wait up to this many seconds {until}; it answers as soon as that happens.")


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


def recipient_view(recipient: HandoffRecipient, names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One channel a route's handoff notified, or one person it was offered to directly:
    which step and turn, whether it was reached, when, and how the offer ended. A person's
    offer names them and the kind of contact method, never its address (the agent's key
    reads this too). `names`: the directory's names by person id."""
    person = recipient.person_id
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
        "person_id": person,
        "person_name": (names or {}).get(person, person) if person is not None else None,
        "target": recipient.target,
        "contact": recipient.channel_kind if person is not None else None,
        "contact_index": recipient.contact_index,
        "turn": recipient.turn,
        "result": recipient.result,
        "ended_at": iso(recipient.ended_at),
    }


# Its POST routes take an Idempotency-Key (bot/web/idempotency.py); each route declares who may call it.
api = api_router()


@api.post("/conversations", status_code=201, dependencies=[Depends(AGENTS)], responses=answer(ConversationCreated, 201))
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


@api.post("/conversations/{cid}/messages", dependencies=[Depends(AGENTS)], responses=answer(MessagePosted))
async def post_message(cid: str, body: PostMessage, router: RouterDep) -> dict[str, Any]:
    result = await router.subscriber_message(cid, body.text)
    return {
        "message_id": result.message_id,
        "routed_to": result.routed_to,
        "handoff_session_id": result.handoff_session_id,
        "replies": [{"id": m.id, "role": m.role, "text": m.text} for m in result.replies],
    }


@api.get("/conversations/{cid}/messages", dependencies=[Depends(AGENTS)], responses=answer(MessageList))
async def list_messages(
    cid: str,
    conversations: ConversationsDep,
    after: int = Query(default=0, ge=0, le=MAX_ID, description="Only messages with a larger id."),
    limit: int = Query(default=200, ge=1, le=500),
    wait: float = long_poll("for a new message"),
) -> dict[str, Any]:
    messages = await conversations.wait_for_messages(cid, after, limit, wait)
    return {"messages": [message_view(m) for m in messages]}


@api.get("/conversations/{cid}/tools", dependencies=[Depends(AGENTS)], responses=answer(ToolList))
async def list_tools(
    cid: str, router: RouterDep, format: Literal["plain", "openai", "anthropic"] = "plain"
) -> dict[str, Any]:
    return {"tools": [spec.render(format) for spec in await router.tool_specs(cid)]}


@api.post("/conversations/{cid}/tools/{name}", dependencies=[Depends(AGENTS)])
async def call_tool(cid: str, name: str, request: Request, router: RouterDep) -> dict[str, Any]:
    raw = await request.body()
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:  # UnicodeDecodeError included
        raise invalid_json(f"{exc}; send the tool input as a JSON object") from None
    return await router.call_tool(cid, name, args)


@api.get("/handoffs", dependencies=[Depends(READS)], responses=answer(HandoffList))
async def list_handoffs(
    queries: QueriesDep,
    forms: FormLinksDep,
    state: Literal["open", "active", "dispatching", "released", "failed"] = "open",
    limit: int = Query(default=100, ge=1, le=500),
) -> dict[str, Any]:
    states = OPEN_STATES if state == "open" else (HandoffState(state),)
    return {"handoffs": [handoff_view(h, forms) for h in await queries.handoffs(states=states, limit=limit)]}


@api.get("/handoffs/{sid}", dependencies=[Depends(READS)], responses=answer(HandoffAnswer))
async def get_handoff(
    sid: str, handoffs: HandoffsDep, forms: FormLinksDep, satisfaction: SatisfactionDep, queries: QueriesDep,
    conversations: ConversationsDep,
    wait: float = long_poll("for the handoff to end (released or failed)"),
) -> dict[str, Any]:
    handoff = await conversations.wait_for(lambda: handoffs.get(sid), lambda h: h.state not in OPEN_STATES, wait)
    view = handoff_view(handoff, forms)
    view["satisfaction"] = satisfaction_view(await satisfaction.of(sid))
    if handoff.route_id is not None:
        recipients = await handoffs.recipients_of(sid)
        names = await queries.person_names({r.person_id for r in recipients if r.person_id is not None})
        view["recipients"] = [recipient_view(r, names) for r in recipients]
    resume = await queries.resume_message(handoff) if handoff.state == HandoffState.RELEASED else None
    view["resume_message"] = {"id": resume.id, "text": resume.text} if resume is not None else None
    return view


@api.get("/handoffs/{sid}/events", dependencies=[Depends(READS)], responses=answer(EventList))
async def handoff_events(sid: str, queries: QueriesDep) -> dict[str, Any]:
    return {"events": [event_view(e) for e in await queries.events(sid)]}


@api.post("/handoffs/{sid}/release", responses=answer(HandoffReleased))
async def release_handoff(
    sid: str, handoffs: HandoffsDep, forms: FormLinksDep, caller: Annotated[ApiCaller, Depends(RELEASES)],
    body: ReleaseBody | None = None,
) -> Any:
    body = body or ReleaseBody()
    result = await handoffs.release(
        sid, reason=ReleaseReason.OWNER, actor=caller.actor.label, person_id=caller.actor.person_id, outcome=body.outcome, note=body.note,
        return_values=body.return_values,
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
    # Only for the owner token's service identity (which human behind the shared token); a
    # person's token always decides as that person.
    decided_by: CleanStr | None = Field(default=None, min_length=1, max_length=200)


@api.get("/approvals", dependencies=[Depends(READS)], responses=answer(ApprovalList))
async def list_approvals(
    approvals: ApprovalsDep,
    state: Literal["pending", "approved", "denied", "expired", "unrouted", "cleared"] | None = None,
    limit: int = Query(default=100, ge=1, le=500),
) -> dict[str, Any]:
    return {"approvals": [approval_view(a) for a in await approvals.listing(state=state, limit=limit)]}


@api.get("/approvals/{aid}", dependencies=[Depends(READS)], responses=answer(ApprovalAnswer))
async def get_approval(
    aid: str, approvals: ApprovalsDep, conversations: ConversationsDep,
    wait: float = long_poll("for the approval to settle (decided or closed, and when approved, run or handed to the agent)"),
) -> dict[str, Any]:
    approval = await conversations.wait_for(lambda: approvals.get(aid), settled, wait)
    return approval_view(approval, await approvals.votes(aid))


@api.post("/approvals/{aid}/decision", responses=answer(ApprovalAnswer))
async def decide_approval(
    aid: str, body: DecisionBody, approvals: ApprovalsDep, caller: Annotated[ApiCaller, Depends(DECIDES)],
) -> dict[str, Any]:
    """A person decides as themselves (a personal token of Olga votes as Olga); the owner
    token's service identity votes as the owner and may say which human it is (`decided_by`);
    the agent's key decides only on a desk with no owner.token and no people, and counts as
    nobody where two people must approve."""
    if caller.actor.is_person and body.decided_by is not None:
        raise ApiError(422, "invalid_request", f"decided_by: a personal token decides as its person "
                       f"({caller.actor.name}); leave decided_by out", fields={"decided_by": "is not for a personal token"})
    result = await approvals.decide(
        aid, approve=body.decision == "approve", by=body.decided_by or caller.actor.label, via="api",
        voter=caller.actor.voter, reason=body.reason, always_allow=body.always_allow,
    )
    if result.outcome is DecisionOutcome.UNIDENTIFIED:
        raise ApiError(403, "approval_needs_identity", "two people must approve this action, and the agent's key "
                       "counts as nobody: decide with a personal API token (or owner.token)", approval=await approvals.view(aid))
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


@api.get("/user_actions/{uaid}", dependencies=[Depends(AGENTS)], responses=answer(UserActionAnswer))
async def get_user_action(
    uaid: str, user_actions: UserActionsDep, conversations: ConversationsDep,
    wait: float = long_poll("for the user action to end (done, cancelled, timeout or failed)"),
) -> dict[str, Any]:
    return user_action_view(await conversations.wait_for(
        lambda: user_actions.get(uaid), lambda a: a.state != USER_ACTION_PENDING, wait))


@api.post("/user_actions/{uaid}/step", dependencies=[Depends(AGENTS)], responses=answer(UserActionAnswer))
async def move_user_action_step(uaid: str, body: StepBody, user_actions: UserActionsDep) -> dict[str, Any]:
    return user_action_view(await user_actions.move(uaid, body.move))


@api.post("/user_actions/{uaid}/response", dependencies=[Depends(AGENTS)], responses=answer(UserActionResponded))
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
async def metrics(request: Request, metrics: MetricsDep, config: ConfigDep, oncall: OnCallDep) -> Response:
    """Prometheus metrics; behind `Authorization: Bearer <metrics.token>` when one is set (the
    counts say how busy the desk is and which channels are down). The on-call gaps are
    worked out now, for this scrape."""
    _require_bearer(request, config.metrics.token, "metrics.token")
    await oncall.measure()
    return Response(metrics.exposition(), media_type=CONTENT_TYPE)
