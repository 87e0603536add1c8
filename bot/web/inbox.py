"""The owner inbox (`/inbox`): active handoffs, a live transcript, reply and release.

Threat model, briefly. The inbox can end handoffs and speak to subscribers, so:
- it sits behind `owner.token`; a login sets a signed, expiring, HttpOnly, SameSite=Strict
  cookie scoped to /inbox (an inbox without a token — loopback only, see config — still
  gets the cookie, because CSRF protection hangs off it);
- wrong tokens are counted per client address, and past `owner.max_login_failures_per_minute`
  the address waits (429, bot/web/login_attempts.py);
- logging out revokes the session on the server (bot/domain/revocations.py): a copy of the
  cookie, replayed before it expires, is refused like no cookie at all;
- every POST carries a CSRF token bound to that cookie, and a cross-site `Origin` or
  `Sec-Fetch-Site` is refused, so another site cannot make the owner's browser release a
  handoff;
- GET never changes state; pages are autoescaped and sent with a strict CSP (one nonce per
  response for the small live-update script), no-referrer and no-store.

Approvals: the list page shows every pending approval ("Waiting for approval": action, risk,
subscriber, the exact arguments, deadline) with Approve / Deny (an optional reason, and
"Always allow" when the policy is `ask`), posted like every other inbox form (CSRF token,
same origin) and decided by the approvals' compare-and-set (`via="inbox"`), so a stale or
repeated post changes nothing. Decided approvals are listed with their receipt (who, when,
through what, the argument hash) and what running the action returned, on the list page and
on the handoff page of their conversation. The owner decides any approval, whichever
channels its prompt went to: the inbox is the owner's own console, like the HTTP API.

Who is speaking: replies from the inbox carry the name this browser chose (bot/web/owner_name.py,
"Support" until then), so subscribers and the chat's "joined" line see a person, not a role.

Return-form link: the handoff page shows the current link's state as forms/links.py decides
it and offers the link only while it works; a fresh one is a CSRF-protected POST that
supersedes the older links (`reissue_form_link`, audited as `form_link_issued`).

Routes: a handoff on a route shows its step, who was notified where, who took it and, while
nobody has, when the ladder moves on (bot/web/inbox_routes.py builds it for the pages and both
long-polls). Claim is a POST like release, decided by the handoff service's compare-and-set, so
a late or repeated press changes nothing and says who has it; inbox replies on a route come
from the route's owner inbox thread and claim it as any recipient's reply does.

Live list: `/inbox` long-polls `GET /inbox/updates?since=<version>`. The version is a hash
of a few indexed reads (the open handoffs with their states, deadlines and newest message
id; the pending approvals; approved ones whose action has not finished; `Queries.inbox_version`
in bot/domain/queries.py, where all of the inbox's reads live), so asking "anything
newer than X?" costs little; only a changed version builds the whole list. A waiting request
wakes on any write this process's ConversationBus hears (a handoff starting in a conversation
the list does not show yet too) and re-reads the database every 2 s, so what another
instance writes shows up as well. The page applies the answer in place with DOM calls (textContent, never markup from
data) and never touches a form the owner is typing in.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from bot.config import Config
from bot.delivery.channel_set import ChannelSet
from bot.domain.approvals import ANSWERS, OWNER, PENDING, Approvals, DecisionOutcome
from bot.domain.conversations import message_view, speaker
from bot.domain.handoffs import Handoffs, stored_fields
from bot.domain.queries import ConversationPreview, Queries
from bot.domain.rendering import Renderer
from bot.domain.revocations import Revocations
from bot.errors import DeskError, error_body
from bot.runtime.bus import ConversationBus
from bot.runtime.clock import Clock
from bot.runtime.paths import TEMPLATES_DIR
from bot.store.audit import event_view
from bot.store.models import Approval, HandoffRecipient, HandoffSession
from bot.store.vocabulary import ENDED_STATES, OPEN_STATES, HandoffState, Outcome, ReleaseReason
from bot.web.deps import (
    ApprovalsDep,
    ClockDep,
    ConfigDep,
    ConversationsDep,
    HandoffsDep,
    InboundDep,
    RendererDep,
    RevocationsDep,
    SatisfactionDep,
    app_desk,
)
from bot.web.inbox_routes import NoInboxLine, RouteStatus, inbox_line, route_status, span
from bot.web.login_attempts import LoginAttemptsDep
from bot.web.owner_name import COOKIE as NAME_COOKIE
from bot.web.owner_name import DEFAULT_NAME, InvalidName, NameCookie, parse_name
from bot.web.pages import render_page, same_origin, secure_headers
from bot.web.timeline import timeline
from channels.base import RecipientText, pretty_arguments
from channels.text import clip
from forms.fields import preview_line
from forms.links import FormLinks, LinkUnavailable

COOKIE = "handoff_owner"
SESSION_MAX_AGE = 12 * 3600
SESSION_LIFETIME = timedelta(seconds=SESSION_MAX_AGE)
LIST_LIMIT = 100  # the list shows the newest 100 open handoffs (an index range, also at 100k open)
LIST_MAX_WAIT = 25.0
RECHECK_SECONDS = 2.0  # how often a waiting list request re-reads the database
PREVIEW_CHARS = 160

MAX_REPLY = 10_000  # the reply box's maxlength
MAX_RELEASE_NOTE = 2000  # a release note or decision reason: the same bound as the API and tools

inbox = APIRouter()


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


def _page(renderer: Renderer, template: str, owner: Owner | None = None, status: int = 200, **context: Any) -> HTMLResponse:
    response = render_page(renderer, template, status=status, csrf=owner.csrf if owner else "",
                           reply_name=owner.name if owner else "", **context)
    if owner and owner.new_cookie:
        owner.sessions.set_owner_cookie(response, owner.new_cookie)
    return response


def _redirect(url: str) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    secure_headers(response)
    return response


# --------------------------------------------------------------------------- view helpers


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _returned_view(handoff: HandoffSession) -> dict[str, Any]:
    """What came back, under the labels the form showed ("What was done", not `resolution`);
    a key nobody declared keeps its name."""
    labels = {f.name: f.display_label for f in stored_fields(handoff)}
    return {
        "returned": [(labels.get(key, key), _shown(value)) for key, value in (handoff.returned or {}).items()],
        "missing": [labels.get(name, name) for name in handoff.missing_required or []],
    }


@dataclass(frozen=True)
class FormLinkState:
    """What the handoff page says about the handoff's current return-form link: its URL only
    while the link still works, and in words why it does not when it does not."""

    url: str | None
    status: str  # "valid", or why not: "expired", "already used", "replaced by a newer link", "missing"
    text: str


class Preview:
    """What a list card shows of its conversation: who it is, the subscriber's last words and
    when anyone last spoke."""

    def __init__(self, found: ConversationPreview | None = None) -> None:
        self.subscriber = found.conversation.subscriber_name if found else None
        self.last, self.said = (found.last, found.said) if found else (None, None)
        self.conversation = found.conversation if found else None


ENDED = {"approved": "approved", "denied": "denied", "expired": "expired (nobody answered)",
         "unrouted": "denied (nobody could be asked)", "cleared": "denied (prompt cleared)"}


@dataclass(frozen=True)
class InboxView:
    """The services the inbox's pages read, and how it words times, previews and approvals."""

    queries: Queries
    approvals: Approvals
    channels: ChannelSet
    forms: FormLinks
    clock: Clock
    bus: ConversationBus
    handoffs: Handoffs

    def time_left(self, deadline: datetime | None, *, when_past: str = "releasing now") -> str:
        """"12 min left", "40 s left", or `when_past` once the deadline has passed (a handoff is
        about to be released by its timer; an approval has expired)."""
        if deadline is None:
            return ""
        left = (deadline - self.clock.now()).total_seconds()
        return when_past if left <= 0 else f"{span(left)} left"

    def ago(self, moment: datetime | None) -> str:
        if moment is None:
            return ""
        seconds = (self.clock.now() - moment).total_seconds()
        if seconds < 60:
            return "just now"
        if seconds < 3600:
            return f"{int(seconds // 60)} min ago"
        if seconds < 86400:
            return f"{int(seconds // 3600)} h ago"
        return _when(moment)

    def preview_view(self, preview: Preview) -> dict[str, Any]:
        last, said = preview.last, preview.said
        return {
            "subscriber": preview.subscriber or "",
            "said": None if said is None else {"id": said.id, "text": clip(" ".join(said.text.split()), PREVIEW_CHARS)},
            "last_id": last.id if last is not None else 0,
            "last_at": last.created_at.isoformat() if last is not None else "",
            "last_ago": self.ago(last.created_at) if last is not None else "",
            "last_who": speaker(last, preview.conversation) if last is not None and preview.conversation is not None else "",
        }

    def last_line(self, preview: Preview) -> dict[str, str]:
        view = self.preview_view(preview)
        if not view["last_at"]:
            return {"last_line": "", "last_who": ""}
        return {"last_line": f"Last message {view['last_ago']}, from {view['last_who']}", "last_who": view["last_who"]}

    def card(self, handoff: HandoffSession, found: ConversationPreview | None = None,
             route: RouteStatus | None = None) -> dict[str, Any]:
        """What the pages show of a handoff; `route` is its route's state (`route_of`) when
        it is on one and the page shows it."""
        fields = stored_fields(handoff)
        preview = Preview(found)
        try:
            inbox_line(handoff, route)
            refusal = ""
        except NoInboxLine as no_line:
            refusal = no_line.message
        return {
            "h": handoff,
            "channel": self.target_label(handoff),
            "time_left": self.time_left(handoff.idle_deadline) if handoff.state == HandoffState.ACTIVE else "",
            "deadline": handoff.idle_deadline.isoformat() if handoff.idle_deadline and handoff.state == HandoffState.ACTIVE else "",
            "field_lines": [preview_line(f) for f in fields],
            "can_reply": handoff.state == HandoffState.ACTIVE and not refusal,
            "reply_refusal": refusal,
            "route": route,
            "p": preview,
            **self.last_line(preview),
        }

    def target_label(self, handoff: HandoffSession) -> str:
        """What the handoff was handed to: its route's label, or its channel's."""
        if handoff.route_id is None:
            return handoff.channel_label
        ladder = self.handoffs.ladders.get(handoff.route_id)
        return ladder.route.label if ladder is not None else f"route {handoff.route_id}"

    async def route_of(self, handoff: HandoffSession) -> RouteStatus | None:
        """The route's state of a handoff on one (its recipients read now); None otherwise."""
        if handoff.route_id is None:
            return None
        return self._route_status(handoff, await self.handoffs.recipients_of(handoff.id))

    async def routes_of(self, handoffs: list[HandoffSession]) -> dict[str, RouteStatus | None]:
        """`route_of` for a listing: the recipients of all its routed handoffs in one read."""
        routed = [h.id for h in handoffs if h.route_id is not None]
        found = await self.handoffs.recipients_of_many(routed) if routed else {}
        return {h.id: self._route_status(h, found[h.id]) if h.id in found else None for h in handoffs}

    def _route_status(self, handoff: HandoffSession, recipients: list[HandoffRecipient]) -> RouteStatus | None:
        ladder = self.handoffs.ladders.get(handoff.route_id) if handoff.route_id is not None else None
        return route_status(handoff, recipients, ladder, self.clock.now(), self.ago)

    async def form_link_state(self, handoff: HandoffSession) -> FormLinkState | None:
        """The link's state as forms/links.py decides it (expiry, single use, superseded), so
        the inbox never offers a link the form would refuse. None once the handoff has ended."""
        if handoff.state != HandoffState.ACTIVE:
            return None
        link = await self.queries.form_link(handoff.form_link_id) if handoff.form_link_id else None
        if link is None:
            return FormLinkState(None, "missing", "This handoff has no return-form link.")
        now = self.clock.now()
        try:
            FormLinks.check(link, now)
        except LinkUnavailable as exc:
            since = {"expired": link.expires_at, "already used": link.consumed_at,
                     "replaced by a newer link": link.superseded_at}.get(exc.reason)
            by = f" by {link.consumed_by}" if exc.reason == "already used" and link.consumed_by else ""
            return FormLinkState(None, exc.reason, f"The return-form link is {exc.reason}{by}"
                                 + (f" (since {_when(since)})." if since else "."))
        hours = int((link.expires_at - now).total_seconds() // 3600)
        left = f"{hours} h left" if hours else self.time_left(link.expires_at)
        return FormLinkState(self.forms.url(link.id), "valid", f"Link valid until {_when(link.expires_at)} ({left}).")

    def channel_name(self, channel_id: int) -> str:
        """A channel's label, or its number once the config no longer has it."""
        return self._channel_label(channel_id) or f"channel {channel_id}"

    def _channel_label(self, channel_id: int) -> str | None:
        adapter = self.channels.get(channel_id)
        return adapter.label if adapter is not None else None

    async def approval_cards(self, approvals: list[Approval]) -> list[dict[str, Any]]:
        """What the inbox shows of approvals: the invocation, who it is for, and the receipt."""
        names = await self.queries.subscriber_names({a.conversation_id for a in approvals})
        now = self.clock.now()
        cards = []
        for a in approvals:
            channel_labels = [self.channel_name(channel_id) for channel_id in a.channel_ids]
            via = a.decided_via or ""
            if via.startswith("channel:") and via[8:].isdigit():
                label = self._channel_label(int(via[8:]))
                via = f"{label} ({via})" if label is not None else via
            cards.append({
                "a": a,
                "subscriber": names.get(a.conversation_id),
                "arguments": pretty_arguments(a.arguments)[0],
                "open": a.state == PENDING and a.deadline > now,
                "time_left": self.time_left(a.deadline, when_past="expired"),
                "deadline": a.deadline.isoformat(),
                "deadline_text": _when(a.deadline),
                "decided_at": a.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC") if a.decided_at else "",
                "ended": ENDED.get(a.state, a.state),
                "via": via,
                "channels": channel_labels,
                "result": json.dumps(a.result, ensure_ascii=False) if a.result is not None else "",
            })
        return cards

    # ----------------------------------------------------------------------- the live list

    async def list_version(self) -> str:
        """A short hash of what decides the list's content (Queries.inbox_version)."""
        return await self.queries.inbox_version(self.clock.now(), limit=LIST_LIMIT)

    async def wait_for_list_change(self, since: str, wait: float) -> str:
        """The list's version once it differs from `since`, or the same version after `wait` s."""
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        version = await self.list_version()
        while version == since and (left := until - loop.time()) > 0:
            # woken by a write to any conversation in this process (a new handoff's too), and
            # re-read every few seconds for what other instances write
            await self.bus.wait_any(min(RECHECK_SECONDS, left))
            version = await self.list_version()
        return version

    async def list_snapshot(self) -> dict[str, Any]:
        """Everything the list page shows, for the page and for its live updates alike."""
        active = await self.queries.handoffs(states=OPEN_STATES, limit=LIST_LIMIT)
        recent = await self.queries.handoffs(states=ENDED_STATES, limit=20)
        now = self.clock.now()
        pending = [a for a in await self.approvals.listing(state=PENDING, limit=LIST_LIMIT) if a.deadline > now]
        pending.reverse()  # the oldest first: it runs out first
        decided = [a for a in await self.approvals.listing(state=None, limit=40) if a.state != PENDING][:20]
        previews = await self.queries.previews([h.conversation_id for h in active])
        routes = await self.routes_of(active)
        return {
            "active": [self.card(h, previews.get(h.conversation_id), routes[h.id]) for h in active],
            "recent": [self.card(h) for h in recent],
            "approvals": await self.approval_cards(pending),
            "decided": await self.approval_cards(decided),
        }

    def handoff_json(self, card: dict[str, Any]) -> dict[str, Any]:
        h, route = card["h"], card["route"]
        return {
            "id": h.id, "code": h.short_code, "state": h.state, "urgency": h.urgency, "channel": card["channel"],
            "summary": h.summary, "expected_action": h.expected_action, "deadline": card["deadline"],
            "time_left": card["time_left"], "route": route.json() if route else None,
            **self.preview_view(card["p"]),
        }


async def inbox_view(request: Request) -> InboxView:
    """The inbox's services, taken from the desk in one lookup (one dependency solved per
    request instead of six)."""
    desk = app_desk(request)
    return InboxView(desk.queries, desk.approvals, desk.channels, desk.forms, desk.clock, desk.bus, desk.handoffs)


InboxViewDep = Annotated[InboxView, Depends(inbox_view)]


def _ended_json(card: dict[str, Any]) -> dict[str, Any]:
    h = card["h"]
    return {"id": h.id, "code": h.short_code, "summary": h.summary, "channel": card["channel"],
            "ended": "failed" if h.state == HandoffState.FAILED else
            f"{(h.release_reason or '').replace('_', ' ')} · {(h.outcome or '').replace('_', ' ')}",
            "failed": h.state == HandoffState.FAILED}


def _approval_json(card: dict[str, Any]) -> dict[str, Any]:
    a = card["a"]
    return {"id": a.id, "action_id": a.action_id, "risk": a.risk, "policy": a.policy, "description": a.description,
            "subscriber": card["subscriber"] or "", "arguments": card["arguments"], "deadline": card["deadline"],
            "deadline_text": card["deadline_text"], "time_left": card["time_left"], "channels": card["channels"]}


def _decided_json(card: dict[str, Any]) -> dict[str, Any]:
    a = card["a"]
    if a.run_state == "succeeded":
        result, failed = f"ran: {card['result']}", False
    elif a.run_state == "failed":
        result, failed = f"failed: {a.error}", True
    else:
        result, failed = a.run_state or "did not run", False
    return {"id": a.id, "action_id": a.action_id, "risk": a.risk, "state": a.state, "subscriber": card["subscriber"] or "—",
            "outcome": card["ended"] + (" · always allowed" if a.always_allow else ""), "reason": a.reason or "",
            "receipt": f"{a.decided_by} · {card['decided_at']} · via {card['via']}",
            "hash": a.arguments_hash, "result": result, "failed": failed}


# --------------------------------------------------------------------------- routes


@inbox.get("/static/desk.css", include_in_schema=False)
async def stylesheet() -> FileResponse:
    return FileResponse(TEMPLATES_DIR / "static" / "desk.css", media_type="text/css", headers={"Cache-Control": "public, max-age=3600"})


@inbox.get("/inbox/login", include_in_schema=False)
async def login_page(renderer: RendererDep, next: str = "/inbox", failed: bool = False) -> HTMLResponse:
    return _page(renderer, "inbox/login.html", next=_safe_next(next), failed=failed, status=401 if failed else 200)


@inbox.post("/inbox/login", include_in_schema=False)
async def login(
    request: Request, config: ConfigDep, renderer: RendererDep, clock: ClockDep, attempts: LoginAttemptsDep,
    token: str = Form(default=""), next: str = Form(default="/inbox"),
) -> Response:
    """Sign the owner in. Wrong tokens are counted per client address (bot/web/login_attempts.py):
    past the allowance the address waits, whatever it sends."""
    expected = config.owner.token
    if not same_origin(request, config.public_url):
        return _page(renderer, "inbox/error.html", status=403, title="Refused", message="Cross-site login refused.")
    if expected is not None:
        client = attempts.client(request)
        locked = attempts.locked_for(client)
        if locked:
            return _locked_out(renderer, locked, clock.now() + timedelta(seconds=locked))
        if not hmac.compare_digest(token.encode(), expected.get_secret_value().encode()):
            attempts.failed(client)
            return _redirect(f"/inbox/login?failed=1&next={quote(_safe_next(next))}")
        attempts.succeeded(client)
    sessions = OwnerSessions(config)
    _session_id, value = sessions.issue_cookie()
    response = _redirect(_safe_next(next))
    sessions.set_owner_cookie(response, value)
    return response


def _locked_out(renderer: Renderer, seconds: int, until: datetime) -> HTMLResponse:
    response = _page(renderer, "inbox/error.html", status=429, title="Too many attempts",
                     message=f"Too many wrong tokens came from your address. Try again in {seconds} s "
                             f"(after {until.strftime('%H:%M:%S')} UTC).")
    response.headers["Retry-After"] = str(seconds)
    return response


@inbox.post("/inbox/logout", include_in_schema=False)
async def logout(revocations: RevocationsDep, owner: Owner = Depends(verified_post)) -> Response:
    """Sign this session out on the server too: its cookie, replayed, is refused from now on."""
    await revocations.revoke(owner.session_id, expires_at=owner.expires_at)
    response = _redirect("/inbox/login")
    response.delete_cookie(COOKIE, path="/")
    return response


@inbox.get("/inbox/name", response_class=HTMLResponse, include_in_schema=False)
async def name_page(renderer: RendererDep, next: str = "/inbox", owner: Owner = Depends(current_owner)) -> HTMLResponse:
    return _page(renderer, "inbox/name.html", owner, next=_safe_next(next), typed=owner.name, problem="")


@inbox.post("/inbox/name", include_in_schema=False)
async def set_name(renderer: RendererDep, name: str = Form(default=""), next: str = Form(default="/inbox"),
                   owner: Owner = Depends(verified_post)) -> Response:
    """Remember, in this browser, the name subscribers see on this owner's replies."""
    try:
        chosen = parse_name(name)
    except InvalidName as exc:
        return _page(renderer, "inbox/name.html", owner, status=400, next=_safe_next(next), typed=name[:200],
                     problem=exc.message)
    target = _safe_next(next)
    notice = quote(f"Subscribers now see your replies as {chosen}.")
    response = _redirect(f"{target}{'&' if '?' in target else '?'}notice={notice}")
    owner.sessions.name_cookie().store(response, chosen)
    return response


def _safe_next(target: str) -> str:
    """Only local paths: a login link must not bounce the owner to another site."""
    return target if target.startswith("/inbox") and "//" not in target and "\\" not in target else "/inbox"


@inbox.get("/inbox", response_class=HTMLResponse, include_in_schema=False)
async def inbox_list(
    view: InboxViewDep, renderer: RendererDep, config: ConfigDep, notice: str = "", owner: Owner = Depends(current_owner),
) -> HTMLResponse:
    version = await view.list_version()  # before the read: a change in between shows next poll
    return _page(
        renderer, "inbox/list.html", owner, **await view.list_snapshot(), version=version,
        open_inbox=config.owner.token is None, notice=notice[:300],
    )


@inbox.get("/inbox/updates", include_in_schema=False)
async def list_updates(
    view: InboxViewDep,
    since: str = Query(default="", max_length=64), wait: float = Query(default=LIST_MAX_WAIT, ge=0, le=LIST_MAX_WAIT),
    owner: Owner = Depends(current_owner),
) -> JSONResponse:
    """Long-poll for the list page: `{version, changed: false}` after `wait` seconds when
    nothing changed since `since`, else at once the whole list (`changed: true`)."""
    version = await view.wait_for_list_change(since, wait)
    body: dict[str, Any] = {"version": version, "changed": version != since}
    if body["changed"]:
        snapshot = await view.list_snapshot()
        body.update({
            "now": view.clock.now().isoformat(),
            "handoffs": [view.handoff_json(c) for c in snapshot["active"]],
            "approvals": [_approval_json(c) for c in snapshot["approvals"]],
            "recent": [_ended_json(c) for c in snapshot["recent"]],
            "decided": [_decided_json(c) for c in snapshot["decided"]],
        })
    response = JSONResponse(body)
    secure_headers(response)
    return response


@inbox.get("/inbox/handoffs/{sid}", response_class=HTMLResponse, include_in_schema=False)
async def handoff_page(
    sid: str, view: InboxViewDep, handoffs: HandoffsDep, conversations: ConversationsDep, renderer: RendererDep,
    satisfaction: SatisfactionDep, notice: str = "", owner: Owner = Depends(current_owner),
) -> HTMLResponse:
    handoff = await handoffs.get(sid)
    conversation = await conversations.get(handoff.conversation_id)
    messages = await conversations.messages(handoff.conversation_id, 0, 500)
    events = await view.queries.events(sid)
    return _page(
        renderer, "inbox/handoff.html", owner,
        card=view.card(handoff, route=await view.route_of(handoff)), outcomes=list(Outcome),
        form_link=await view.form_link_state(handoff),
        **_returned_view(handoff),
        conversation=conversation,
        messages=[{**message_view(m), "speaker": speaker(m, conversation)} for m in messages],
        last_id=messages[-1].id if messages else 0,
        events=[event_view(e) for e in events],
        timeline=timeline(handoff, events, view.channel_name),
        approvals=await view.approval_cards(await view.queries.conversation_approvals(handoff.conversation_id)),
        nonce_reply=secrets.token_urlsafe(12),
        notice=notice[:200],
        satisfaction=await satisfaction.of(sid),
    )


@inbox.get("/inbox/handoffs/{sid}/updates", include_in_schema=False)
async def handoff_updates(
    sid: str, view: InboxViewDep, handoffs: HandoffsDep, conversations: ConversationsDep,
    after: int = Query(default=0, ge=0, le=2**63 - 1), wait: float = Query(default=25, ge=0, le=30),
    owner: Owner = Depends(current_owner),
) -> JSONResponse:
    """Long-poll for the live transcript: returns as soon as something new is there."""
    handoff = await handoffs.get(sid)
    messages = await conversations.wait_for_messages(handoff.conversation_id, after, 200, wait)
    handoff = await handoffs.get(sid)  # its state may have changed while we waited
    conversation = await conversations.get(handoff.conversation_id)
    route = await view.route_of(handoff)
    card = view.card(handoff, route=route)
    response = JSONResponse({
        "messages": [{**message_view(m), "speaker": speaker(m, conversation)} for m in messages],
        "state": handoff.state,
        "time_left": card["time_left"],
        "deadline": card["deadline"],
        "route": route.json() if route else None,
    })
    secure_headers(response)
    return response


@inbox.post("/inbox/handoffs/{sid}/reply", include_in_schema=False)
async def reply(
    sid: str, view: InboxViewDep, inbound: InboundDep, renderer: RendererDep,
    text: str = Form(default=""), nonce: str = Form(default=""), owner: Owner = Depends(verified_post),
) -> Response:
    """The owner's reply, as a recipient's reply on the owner inbox channel: straight to the
    handoff's thread, or on a route from the inbox's recipient thread, where the first reply
    claims the handoff as anyone's does."""
    handoff = await view.handoffs.get(sid)
    text = text.strip()
    if not text:
        return _redirect(f"/inbox/handoffs/{sid}?notice={quote('Write a message first.')}")
    try:
        line = inbox_line(handoff, await view.route_of(handoff))
    except NoInboxLine as no_line:
        return _redirect(f"/inbox/handoffs/{sid}?notice={quote(no_line.message)}")
    if len(text) > MAX_REPLY:
        return _page(renderer, "inbox/error.html", owner, status=400, title="Could not send",
                     message=f"text: at most {MAX_REPLY} characters, got {len(text)}; nothing was sent.")
    outcome = await inbound.submit_and_wait(
        line.channel_id,
        RecipientText(thread_key=line.thread_key, text=text, author=owner.name, dedupe_key=f"inbox:{nonce[:64]}" if nonce else None),
    )
    notice = "" if outcome in ("relayed", "duplicate") else outcome
    return _redirect(f"/inbox/handoffs/{sid}" + (f"?notice={quote(notice)}" if notice else ""))


@inbox.post("/inbox/handoffs/{sid}/release", include_in_schema=False)
async def release(
    sid: str, handoffs: HandoffsDep, renderer: RendererDep,
    outcome: str = Form(default=Outcome.RESOLVED), note: str = Form(default=""), owner: Owner = Depends(verified_post),
) -> Response:
    # A value is never silently changed: an unknown outcome or an over-long note is refused
    # with the field named, instead of becoming "resolved" or being cut.
    if outcome not in tuple(Outcome):
        return _page(renderer, "inbox/error.html", owner, status=400, title="Could not release",
                     message=f"outcome: expected one of {', '.join(Outcome)}, got {outcome[:40]!r}; nothing was released.")
    if len(note) > MAX_RELEASE_NOTE:
        return _page(renderer, "inbox/error.html", owner, status=400, title="Could not release",
                     message=f"note: at most {MAX_RELEASE_NOTE} characters, got {len(note)}; nothing was released.")
    chosen = Outcome(outcome)
    try:
        result = await handoffs.release(
            sid, reason=ReleaseReason.OWNER, actor="owner (inbox)", outcome=chosen, note=note
        )
    except DeskError as exc:
        return _page(renderer, "inbox/error.html", owner, status=exc.status if exc.status >= 400 else 400,
                     title="Could not release", message=exc.message)
    notice = "Released; the assistant has the conversation again." if result.released else (
        f"Already {result.session.state} ({result.session.release_reason or 'no reason'}); nothing changed."
    )
    return _redirect(f"/inbox/handoffs/{sid}?notice={quote(notice)}")


@inbox.post("/inbox/handoffs/{sid}/claim", include_in_schema=False)
async def claim(sid: str, view: InboxViewDep, owner: Owner = Depends(verified_post)) -> Response:
    """Take a route's handoff from the inbox under the owner's name. The handoff service's
    compare-and-set decides: the first claim anywhere wins, a later one changes nothing. On
    a route that notified the owner inbox the claim names that thread, so the subscriber's
    messages come here and the inbox answers them."""
    handoff = await view.handoffs.get(sid)
    route = await view.route_of(handoff)
    if route is None:
        return _redirect(f"/inbox/handoffs/{sid}?notice={quote('This handoff went to one channel; there is nothing to claim.')}")
    inbox = route.inbox_recipient
    result = await view.handoffs.claim(sid, by=owner.name, via="inbox", recipient_id=inbox.id if inbox else None, effect=False)
    taken = result.handoff
    if result.claimed:
        notice = "You have it now; everyone else asked was told."
    elif taken.claimed_by is not None:
        notice = f"Already taken by {taken.claimed_by}; nothing changed."
    else:
        notice = f"Already {taken.state}; nothing changed."
    return _redirect(f"/inbox/handoffs/{sid}?notice={quote(notice)}")


@inbox.post("/inbox/handoffs/{sid}/form-link", include_in_schema=False)
async def new_form_link(sid: str, handoffs: HandoffsDep, owner: Owner = Depends(verified_post)) -> Response:
    try:
        await handoffs.reissue_form_link(sid, actor="owner (inbox)")
    except DeskError as exc:
        return _redirect(f"/inbox/handoffs/{sid}?notice={quote(exc.message)}")
    notice = "A new return-form link was issued and sent to the recipient; older links no longer work."
    return _redirect(f"/inbox/handoffs/{sid}?notice={quote(notice)}")


@inbox.post("/inbox/approvals/{aid}/decision", include_in_schema=False)
async def decide_approval(
    aid: str, approvals: ApprovalsDep, renderer: RendererDep,
    decision: str = Form(default=""), reason: str = Form(default=""), always: str = Form(default=""),
    owner: Owner = Depends(verified_post),
) -> Response:
    """Approve or deny from the inbox: the approvals' compare-and-set decides, so only the
    first answer on a pending, unexpired approval counts; the action runs before we answer."""
    if decision not in ("approve", "deny"):
        return _redirect(f"/inbox?notice={quote('Choose Approve or Deny.')}")
    if len(reason.strip()) > MAX_RELEASE_NOTE:
        return _page(renderer, "inbox/error.html", owner, status=400, title="Could not decide",
                     message=f"reason: at most {MAX_RELEASE_NOTE} characters, got {len(reason.strip())}; nothing was decided.")
    try:
        result = await approvals.decide(
            aid, approve=decision == "approve", by="owner (inbox)", via="inbox", voter=OWNER,
            reason=reason.strip() or None, always_allow=always == "yes",
        )
    except DeskError as exc:
        return _page(renderer, "inbox/error.html", owner, status=exc.status if exc.status >= 400 else 400,
                     title="Could not decide", message=exc.message)
    approval = await approvals.get(aid)
    if result.outcome in (DecisionOutcome.FIRST_APPROVAL, DecisionOutcome.SAME_PERSON):
        notice = f"{approval.action_id}: {ANSWERS[result.outcome]}"
    elif not result.changed:
        notice = f"{approval.action_id} was already {ENDED.get(approval.state, approval.state)}; your answer changed nothing."
    elif approval.state == "denied":
        notice = f"Denied: {approval.action_id} did not run."
    elif approval.run_state == "succeeded":
        notice = f"Approved: {approval.action_id} ran."
    elif approval.run_state == "failed":
        notice = f"Approved, but {approval.action_id} failed: {approval.error or 'no detail'}"
    else:
        notice = f"Approved: {approval.action_id} is running."
    return _redirect(f"/inbox?notice={quote(notice[:300])}#approvals")


def install_inbox_errors(app: FastAPI) -> None:
    """Login redirects and CSRF refusals as pages, not JSON."""

    @app.exception_handler(NeedsLogin)
    async def _needs_login(request: Request, _exc: NeedsLogin) -> Response:
        if request.method != "GET" or request.url.path.endswith("/updates"):
            return JSONResponse(error_body("unauthorized", "log in to the inbox"), status_code=401)
        return _redirect(f"/inbox/login?next={quote(request.url.path)}")

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, _exc: Forbidden) -> Response:
        return _page(app_desk(request).renderer, "inbox/error.html", status=403, title="Refused",
                     message="This form expired or came from another site. Go back, reload the page and try again.")

