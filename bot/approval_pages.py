"""The signed decision page for approval prompts: `GET /a/{token}` shows, `POST` decides.

For channels without buttons and as a fallback everywhere (every prompt carries the link). The token is
the approval id signed with `secret_key` (its own salt), so it works only for that approval;
GET never decides (mail scanners open links); POST is accepted from the page itself only,
and the decision is the approvals' compare-and-set, so the link works once and a late
answer changes nothing.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from bot.approvals import PENDING
from bot.desk import Desk
from bot.errors import NotFound
from bot.models import Approval
from bot.web import render_page, same_origin
from channels.base import pretty_arguments

router = APIRouter(include_in_schema=False)

ENDED = {
    "approved": "It was approved",
    "denied": "It was denied",
    "expired": "Nobody answered in time, so it was denied",
    "unrouted": "It was denied: nobody could be asked",
    "cleared": "The prompt was cleared, so it was denied",
}


def _desk(request: Request) -> Desk:
    desk: Desk = request.app.state.desk  # Starlette's app.state is untyped
    return desk


async def _load(desk: Desk, token: str) -> Approval | None:
    approval_id = desk.approvals.approval_id(token)
    if approval_id is None:
        return None
    try:
        return await desk.approvals.get(approval_id)
    except NotFound:
        return None


async def _page(desk: Desk, approval: Approval, token: str, *, status: int = 200, notice: str | None = None) -> HTMLResponse:
    open_ = approval.state == PENDING and approval.deadline > desk.clock.now()
    subscriber = (await desk.conversation(approval.conversation_id)).subscriber_name
    return render_page(
        desk, "approvals/decide.html", status=status, a=approval, token=token, open=open_, notice=notice,
        subscriber=subscriber,
        ended=ENDED.get(approval.state, "It is closed"), arguments=pretty_arguments(approval.arguments)[0],
        deadline=approval.deadline.strftime("%d %b %Y, %H:%M UTC"),
    )


def _not_found(desk: Desk) -> HTMLResponse:
    return render_page(desk, "forms/status.html", status=404, title="This link is not valid", tone="info",
                       lines=["Check that you opened the whole link from the message you received."],
                       returned={}, missing=[], labels={})


@router.get("/a/{token}", response_class=HTMLResponse)
async def show(token: str, request: Request) -> HTMLResponse:
    desk = _desk(request)
    approval = await _load(desk, token)
    return await _page(desk, approval, token) if approval else _not_found(desk)


@router.post("/a/{token}", response_class=HTMLResponse)
async def decide(token: str, request: Request) -> HTMLResponse:
    desk = _desk(request)
    approval = await _load(desk, token)
    if approval is None:
        return _not_found(desk)
    form = await request.form()
    if not same_origin(request, desk.config.public_url) or form.get("token") != token:
        return await _page(desk, approval, token, status=403, notice="Please decide from this page.")
    choice = form.get("decision")
    if choice not in ("approve", "deny"):
        return await _page(desk, approval, token, status=400, notice="Choose Approve or Deny.")
    name = str(form.get("name") or "").strip()[:200]
    result = await desk.approvals.decide(
        approval.id, approve=choice == "approve", by=f"{name} (decision link)" if name else "decision link holder",
        via="link", reason=str(form.get("reason") or "") or None, always_allow=form.get("always") == "yes",
    )
    if not result.changed:
        return await _page(desk, await desk.approvals.get(approval.id), token, status=410,
                     notice="This request was already closed; your answer changed nothing.")
    return await _page(desk, await desk.approvals.get(approval.id), token, notice="Thank you: your decision is recorded.")
