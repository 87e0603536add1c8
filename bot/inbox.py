"""The owner inbox (`/inbox`): active handoffs, a live transcript, reply and release.

Threat model, briefly. The inbox can end handoffs and speak to subscribers, so:
- it sits behind `owner.token`; a login sets a signed, expiring, HttpOnly, SameSite=Strict
  cookie scoped to /inbox (an inbox without a token — loopback only, see config — still
  gets the cookie, because CSRF protection hangs off it);
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
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from datetime import datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import select

from bot.approvals import PENDING
from bot.conversations import message_view, speaker
from bot.desk import Desk
from bot.errors import DeskError
from bot.handoffs import stored_fields
from bot.models import ACTIVE, Approval, Conversation, HandoffSession
from bot.paths import TEMPLATES_DIR
from bot.web import render_page, same_origin, secure_headers
from channels.base import InboundMessage, pretty_arguments
from forms.fields import preview_line

COOKIE = "handoff_owner"
SESSION_MAX_AGE = 12 * 3600

inbox = APIRouter()


class NeedsLogin(Exception):
    pass


def _desk(request: Request) -> Desk:
    return request.app.state.desk


def _serializer(desk: Desk, purpose: str) -> URLSafeTimedSerializer:
    # The owner token is part of the salt: changing the token (or setting one on an open
    # inbox) signs every existing session out.
    token = desk.config.owner.token
    fingerprint = hashlib.sha256(token.get_secret_value().encode()).hexdigest()[:16] if token else "open"
    return URLSafeTimedSerializer(desk.config.signing_keys, salt=f"inbox-{purpose}-{fingerprint}")


class Owner:
    """The signed-in owner's browser session."""

    def __init__(self, desk: Desk, session_id: str, new_cookie: str | None = None) -> None:
        self.desk, self.session_id, self.new_cookie = desk, session_id, new_cookie

    @property
    def csrf(self) -> str:
        return _serializer(self.desk, "csrf").dumps(self.session_id)

    def check_csrf(self, token: str) -> bool:
        try:
            value = _serializer(self.desk, "csrf").loads(token, max_age=SESSION_MAX_AGE)
        except BadSignature:
            return False
        return hmac.compare_digest(str(value), self.session_id)


def _issue_cookie(desk: Desk) -> tuple[str, str]:
    session_id = secrets.token_urlsafe(16)
    return session_id, _serializer(desk, "session").dumps(session_id)


def current_owner(request: Request) -> Owner:
    desk = _desk(request)
    cookie = request.cookies.get(COOKIE)
    if cookie:
        try:
            return Owner(desk, str(_serializer(desk, "session").loads(cookie, max_age=SESSION_MAX_AGE)))
        except BadSignature:
            pass
    if desk.config.owner.token is None and request.method == "GET":
        session_id, value = _issue_cookie(desk)
        return Owner(desk, session_id, new_cookie=value)
    raise NeedsLogin()


def verified_post(request: Request, csrf: str = Form(default=""), owner: Owner = Depends(current_owner)) -> Owner:
    if not same_origin(request, owner.desk.config.public_url) or not owner.check_csrf(csrf):
        raise Forbidden()
    return owner


class Forbidden(Exception):
    pass


# --------------------------------------------------------------------------- responses


def _page(desk: Desk, template: str, owner: Owner | None = None, status: int = 200, **context: Any) -> HTMLResponse:
    response = render_page(desk, template, status=status, csrf=owner.csrf if owner else "", **context)
    if owner and owner.new_cookie:
        set_owner_cookie(response, desk, owner.new_cookie)
    return response


def set_owner_cookie(response: Response, desk: Desk, value: str) -> None:
    response.set_cookie(
        COOKIE, value, max_age=SESSION_MAX_AGE, path="/", httponly=True, samesite="strict",
        secure=desk.config.public_url.startswith("https://"),
    )


def _redirect(url: str) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    secure_headers(response)
    return response


# --------------------------------------------------------------------------- view helpers


def _time_left(desk: Desk, deadline: datetime | None) -> str:
    if deadline is None:
        return ""
    left = deadline - desk.clock.now()
    if left.total_seconds() <= 0:
        return "releasing now"
    minutes = int(left.total_seconds() // 60)
    return f"{minutes} min left" if minutes else f"{int(left.total_seconds())} s left"


def _card(desk: Desk, handoff: HandoffSession) -> dict[str, Any]:
    fields = stored_fields(handoff)
    return {
        "h": handoff,
        "time_left": _time_left(desk, handoff.idle_deadline) if handoff.state == ACTIVE else "",
        "deadline": handoff.idle_deadline.isoformat() if handoff.idle_deadline and handoff.state == ACTIVE else "",
        "field_lines": [preview_line(f) for f in fields],
        "form_url": desk.forms.url_for(handoff),
        "can_reply": handoff.state == ACTIVE and handoff.channel_kind == "owner_inbox",
    }


ENDED = {"approved": "approved", "denied": "denied", "expired": "expired (nobody answered)",
         "unrouted": "denied (nobody could be asked)", "cleared": "denied (prompt cleared)"}


def _approval_time_left(desk: Desk, deadline: datetime) -> str:
    left = (deadline - desk.clock.now()).total_seconds()
    if left <= 0:
        return "expired"
    minutes = int(left // 60)
    return f"{minutes} min left" if minutes else f"{int(left)} s left"


async def _approval_cards(desk: Desk, approvals: list[Approval]) -> list[dict[str, Any]]:
    """What the inbox shows of approvals: the invocation, who it is for, and the receipt."""
    conversation_ids = {a.conversation_id for a in approvals}
    names: dict[str, str | None] = {}
    if conversation_ids:
        async with desk.db.read() as session:
            rows = await session.execute(
                select(Conversation.id, Conversation.subscriber_name).where(Conversation.id.in_(conversation_ids))
            )
            names = {cid: name for cid, name in rows.all()}
    now = desk.clock.now()
    cards = []
    for a in approvals:
        channel_labels = []
        for channel_id in a.channel_ids:
            adapter = desk.channels.get(channel_id)
            channel_labels.append(adapter.label if adapter is not None else f"channel {channel_id}")
        via = a.decided_via or ""
        if via.startswith("channel:") and via[8:].isdigit():
            adapter = desk.channels.get(int(via[8:]))
            via = f"{adapter.label} ({via})" if adapter is not None else via
        cards.append({
            "a": a,
            "subscriber": names.get(a.conversation_id),
            "arguments": pretty_arguments(a.arguments)[0],
            "open": a.state == PENDING and a.deadline > now,
            "time_left": _approval_time_left(desk, a.deadline),
            "deadline": a.deadline.isoformat(),
            "deadline_text": a.deadline.strftime("%Y-%m-%d %H:%M UTC"),
            "decided_at": a.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC") if a.decided_at else "",
            "ended": ENDED.get(a.state, a.state),
            "via": via,
            "channels": channel_labels,
            "result": json.dumps(a.result, ensure_ascii=False) if a.result is not None else "",
        })
    return cards


async def _conversation_approvals(desk: Desk, conversation_id: str) -> list[Approval]:
    async with desk.db.read() as session:
        query = select(Approval).where(Approval.conversation_id == conversation_id).order_by(Approval.created_at)
        return list((await session.scalars(query)).all())


# --------------------------------------------------------------------------- routes


@inbox.get("/static/desk.css", include_in_schema=False)
async def stylesheet() -> FileResponse:
    return FileResponse(TEMPLATES_DIR / "static" / "desk.css", media_type="text/css", headers={"Cache-Control": "public, max-age=3600"})


@inbox.get("/inbox/login", include_in_schema=False)
async def login_page(request: Request, next: str = "/inbox", failed: bool = False) -> HTMLResponse:
    desk = _desk(request)
    return _page(desk, "inbox/login.html", next=_safe_next(next), failed=failed, status=401 if failed else 200)


@inbox.post("/inbox/login", include_in_schema=False)
async def login(request: Request, token: str = Form(default=""), next: str = Form(default="/inbox")) -> Response:
    desk = _desk(request)
    expected = desk.config.owner.token
    if not same_origin(request, desk.config.public_url):
        return _page(desk, "inbox/error.html", status=403, title="Refused", message="Cross-site login refused.")
    if expected is not None and not hmac.compare_digest(token.encode(), expected.get_secret_value().encode()):
        return _redirect(f"/inbox/login?failed=1&next={quote(_safe_next(next))}")
    _session_id, value = _issue_cookie(desk)
    response = _redirect(_safe_next(next))
    set_owner_cookie(response, desk, value)
    return response


@inbox.post("/inbox/logout", include_in_schema=False)
async def logout(owner: Owner = Depends(verified_post)) -> Response:
    response = _redirect("/inbox/login")
    response.delete_cookie(COOKIE, path="/")
    return response


def _safe_next(target: str) -> str:
    """Only local paths: a login link must not bounce the owner to another site."""
    return target if target.startswith("/inbox") and "//" not in target and "\\" not in target else "/inbox"


@inbox.get("/inbox", response_class=HTMLResponse, include_in_schema=False)
async def inbox_list(request: Request, notice: str = "", owner: Owner = Depends(current_owner)) -> HTMLResponse:
    desk = owner.desk
    active = await desk.handoff_list(states=("dispatching", "active"))
    recent = await desk.handoff_list(states=("released", "failed"), limit=20)
    now = desk.clock.now()
    pending = [a for a in await desk.approvals.listing(state=PENDING, limit=100) if a.deadline > now]
    pending.reverse()  # the oldest first: it runs out first
    decided = [a for a in await desk.approvals.listing(state=None, limit=40) if a.state != PENDING][:20]
    return _page(
        desk, "inbox/list.html", owner,
        active=[_card(desk, h) for h in active], recent=[_card(desk, h) for h in recent],
        approvals=await _approval_cards(desk, pending), decided=await _approval_cards(desk, decided),
        open_inbox=desk.config.owner.token is None, notice=notice[:300],
    )


@inbox.get("/inbox/handoffs/{sid}", response_class=HTMLResponse, include_in_schema=False)
async def handoff_page(sid: str, request: Request, notice: str = "", owner: Owner = Depends(current_owner)) -> HTMLResponse:
    desk = owner.desk
    handoff = await desk.handoffs.get(sid)
    conversation = await desk.conversation(handoff.conversation_id)
    messages = await desk.messages(handoff.conversation_id, 0, 500)
    events = await desk.events(sid)
    return _page(
        desk, "inbox/handoff.html", owner,
        card=_card(desk, handoff),
        conversation=conversation,
        messages=[{**message_view(m), "speaker": speaker(m, conversation)} for m in messages],
        last_id=messages[-1].id if messages else 0,
        events=[desk.event_view(e) for e in events],
        approvals=await _approval_cards(desk, await _conversation_approvals(desk, handoff.conversation_id)),
        nonce_reply=secrets.token_urlsafe(12),
        notice=notice[:200],
    )


@inbox.get("/inbox/handoffs/{sid}/updates", include_in_schema=False)
async def handoff_updates(
    sid: str, after: int = Query(default=0, ge=0, le=2**63 - 1), wait: float = Query(default=25, ge=0, le=30),
    owner: Owner = Depends(current_owner),
) -> JSONResponse:
    """Long-poll for the live transcript: returns as soon as something new is there."""
    desk = owner.desk
    handoff = await desk.handoffs.get(sid)
    messages = await desk.wait_for_messages(handoff.conversation_id, after, 200, wait)
    handoff = await desk.handoffs.get(sid)  # its state may have changed while we waited
    conversation = await desk.conversation(handoff.conversation_id)
    card = _card(desk, handoff)
    response = JSONResponse({
        "messages": [{**message_view(m), "speaker": speaker(m, conversation)} for m in messages],
        "state": handoff.state,
        "time_left": card["time_left"],
        "deadline": card["deadline"],
    })
    secure_headers(response)
    return response


@inbox.post("/inbox/handoffs/{sid}/reply", include_in_schema=False)
async def reply(
    sid: str, text: str = Form(default=""), nonce: str = Form(default=""), owner: Owner = Depends(verified_post)
) -> Response:
    desk = owner.desk
    handoff = await desk.handoffs.get(sid)
    text = text.strip()
    if not text:
        return _redirect(f"/inbox/handoffs/{sid}?notice={quote('Write a message first.')}")
    if handoff.channel_kind != "owner_inbox" or handoff.thread_key is None:
        return _redirect(f"/inbox/handoffs/{sid}?notice={quote('Replies to this handoff go through its own channel.')}")
    outcome = await desk.inbound.submit_and_wait(
        handoff.channel_id,
        InboundMessage(thread_key=handoff.thread_key, text=text[:10_000], author="Owner", dedupe_key=f"inbox:{nonce[:64]}" if nonce else None),
    )
    notice = "" if outcome in ("relayed", "duplicate") else outcome
    return _redirect(f"/inbox/handoffs/{sid}" + (f"?notice={quote(notice)}" if notice else ""))


@inbox.post("/inbox/handoffs/{sid}/release", include_in_schema=False)
async def release(
    sid: str, outcome: str = Form(default="resolved"), note: str = Form(default=""), owner: Owner = Depends(verified_post)
) -> Response:
    desk = owner.desk
    if outcome not in ("resolved", "unresolved", "needs_followup"):
        outcome = "resolved"
    try:
        result = await desk.handoffs.release(sid, reason="owner", actor="owner (inbox)", outcome=outcome, note=note[:2000])
    except DeskError as exc:
        return _page(desk, "inbox/error.html", owner, status=exc.status if exc.status >= 400 else 400,
                     title="Could not release", message=exc.message)
    notice = "Released; the assistant has the conversation again." if result.released else (
        f"Already {result.session.state} ({result.session.release_reason or 'no reason'}); nothing changed."
    )
    return _redirect(f"/inbox/handoffs/{sid}?notice={quote(notice)}")


@inbox.post("/inbox/handoffs/{sid}/form-link", include_in_schema=False)
async def new_form_link(sid: str, owner: Owner = Depends(verified_post)) -> Response:
    desk = owner.desk
    try:
        await desk.handoffs.reissue_form_link(sid, actor="owner (inbox)")
    except DeskError as exc:
        return _redirect(f"/inbox/handoffs/{sid}?notice={quote(exc.message)}")
    notice = "A new return-form link was issued and sent to the recipient; older links no longer work."
    return _redirect(f"/inbox/handoffs/{sid}?notice={quote(notice)}")


@inbox.post("/inbox/approvals/{aid}/decision", include_in_schema=False)
async def decide_approval(
    aid: str, decision: str = Form(default=""), reason: str = Form(default=""), always: str = Form(default=""),
    owner: Owner = Depends(verified_post),
) -> Response:
    """Approve or deny from the inbox: the approvals' compare-and-set decides, so only the
    first answer on a pending, unexpired approval counts; the action runs before we answer."""
    desk = owner.desk
    if decision not in ("approve", "deny"):
        return _redirect(f"/inbox?notice={quote('Choose Approve or Deny.')}")
    try:
        result = await desk.approvals.decide(
            aid, approve=decision == "approve", by="owner (inbox)", via="inbox", reason=reason.strip()[:2000] or None,
            always_allow=always == "yes",
        )
    except DeskError as exc:
        return _page(desk, "inbox/error.html", owner, status=exc.status if exc.status >= 400 else 400,
                     title="Could not decide", message=exc.message)
    approval = await desk.approvals.get(aid)
    if not result.changed:
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


def install_inbox_errors(app: Any) -> None:
    """Login redirects and CSRF refusals as pages, not JSON."""

    @app.exception_handler(NeedsLogin)
    async def _needs_login(request: Request, _exc: NeedsLogin) -> Response:
        if request.method != "GET" or request.url.path.endswith("/updates"):
            return JSONResponse({"error": "unauthorized", "details": {"hint": "log in to the inbox"}}, status_code=401)
        return _redirect(f"/inbox/login?next={quote(request.url.path)}")

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, _exc: Forbidden) -> Response:
        desk = _desk(request)
        return _page(desk, "inbox/error.html", status=403, title="Refused",
                     message="This form expired or came from another site. Go back, reload the page and try again.")

