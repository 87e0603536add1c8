"""The inbox's list page (`/inbox`) and its live updates (`/inbox/updates`, a long-poll that
answers once the list's version changed, with the whole list as data for textContent).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse, JSONResponse

from bot.config.people import Role
from bot.store.vocabulary import HandoffState
from bot.web.deps import ConfigDep, RendererDep
from bot.web.inbox.owner import SignedIn, needs, page
from bot.web.inbox.view import InboxViewDep
from bot.web.pages import secure_headers

LIST_MAX_WAIT = 25.0

router = APIRouter()


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
    elif a.run_state == "agent":
        result, failed = "handed to the agent to run", False
    else:
        result, failed = a.run_state or "did not run", False
    return {"id": a.id, "action_id": a.action_id, "risk": a.risk, "state": a.state, "subscriber": card["subscriber"] or "—",
            "outcome": card["ended"] + (" · always allowed" if a.always_allow else ""), "reason": a.reason or "",
            "receipt": f"{a.decided_by} · {card['decided_at']} · via {card['via']}",
            "hash": a.arguments_hash, "result": result, "failed": failed}


@router.get("/inbox", response_class=HTMLResponse, include_in_schema=False)
async def inbox_list(
    view: InboxViewDep, renderer: RendererDep, config: ConfigDep, notice: str = "", owner: SignedIn = Depends(needs(Role.VIEWER)),
) -> HTMLResponse:
    version = await view.list_version()  # before the read: a change in between shows next poll
    return page(
        renderer, "inbox/list.html", owner, **await view.list_snapshot(), version=version,
        open_inbox=config.owner.token is None, notice=notice[:300],
    )


@router.get("/inbox/updates", include_in_schema=False)
async def list_updates(
    view: InboxViewDep,
    since: str = Query(default="", max_length=64), wait: float = Query(default=LIST_MAX_WAIT, ge=0, le=LIST_MAX_WAIT),
    owner: SignedIn = Depends(needs(Role.VIEWER)),
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
