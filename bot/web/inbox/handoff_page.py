"""A handoff's page (`/inbox/handoffs/{sid}`): its card, the transcript, what came back, the
return-form link, the audit trail and timeline, its conversation's approvals; and the
long-poll that keeps its transcript live.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse, JSONResponse

from bot.config.people import Role
from bot.domain.conversations import message_view, speaker
from bot.domain.handoffs import stored_fields
from bot.store.audit import event_view
from bot.store.models import HandoffSession
from bot.store.vocabulary import Outcome
from bot.web.deps import ConversationsDep, HandoffsDep, RendererDep, SatisfactionDep
from bot.web.inbox.owner import SignedIn, needs, page
from bot.web.inbox.view import InboxViewDep
from bot.web.pages import secure_headers
from bot.web.timeline import timeline

router = APIRouter()


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


@router.get("/inbox/handoffs/{sid}", response_class=HTMLResponse, include_in_schema=False)
async def handoff_page(
    sid: str, view: InboxViewDep, handoffs: HandoffsDep, conversations: ConversationsDep, renderer: RendererDep,
    satisfaction: SatisfactionDep, notice: str = "", owner: SignedIn = Depends(needs(Role.VIEWER)),
) -> HTMLResponse:
    handoff = await handoffs.get(sid)
    conversation = await conversations.get(handoff.conversation_id)
    messages = await conversations.messages(handoff.conversation_id, 0, 500)
    events = await view.queries.events(sid)
    return page(
        renderer, "inbox/handoff.html", owner,
        card=view.card(handoff, route=await view.route_of(handoff, events)), outcomes=list(Outcome),
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


@router.get("/inbox/handoffs/{sid}/updates", include_in_schema=False)
async def handoff_updates(
    sid: str, view: InboxViewDep, handoffs: HandoffsDep, conversations: ConversationsDep,
    after: int = Query(default=0, ge=0, le=2**63 - 1), wait: float = Query(default=25, ge=0, le=30),
    owner: SignedIn = Depends(needs(Role.VIEWER)),
) -> JSONResponse:
    """Long-poll for the live transcript: returns as soon as something new is there."""
    handoff = await handoffs.get(sid)
    messages = await conversations.wait_for_messages(handoff.conversation_id, after, 200, wait)
    handoff = await handoffs.get(sid)  # its state may have changed while we waited
    conversation = await conversations.get(handoff.conversation_id)
    route = await view.route_of(handoff, await view.queries.events(sid) if handoff.route_id is not None else ())
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
