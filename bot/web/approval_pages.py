"""The signed decision page for approval prompts: `GET /a/{token}` shows, `POST` decides.

For channels without buttons and as a fallback everywhere (every prompt carries the link). The token is
the approval id signed with `secret_key` (its own salt), so it works only for that approval;
GET never decides (mail scanners open links); POST is accepted from the page itself only,
and the decision is the approvals' compare-and-set, so the link works once and a late
answer changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from bot.domain.approvals import PENDING, Approvals
from bot.domain.conversations import Conversations
from bot.domain.rendering import Renderer
from bot.errors import NotFound
from bot.runtime.clock import Clock
from bot.store.models import Approval
from bot.web.deps import ConfigDep, app_desk
from bot.web.pages import link_not_valid, render_page, same_origin
from channels.base import pretty_arguments

NAME_LIMIT = 200  # the page's maxlength for the approver's name
REASON_LIMIT = 2000  # and for the reason

router = APIRouter(include_in_schema=False)

ENDED = {
    "approved": "It was approved",
    "denied": "It was denied",
    "expired": "Nobody answered in time, so it was denied",
    "unrouted": "It was denied: nobody could be asked",
    "cleared": "The prompt was cleared, so it was denied",
}


@dataclass(frozen=True)
class DecisionPages:
    """The services the decision page reads: the approvals, and the subscriber's name."""

    approvals: Approvals
    conversations: Conversations
    renderer: Renderer
    clock: Clock

    async def load(self, token: str) -> Approval | None:
        approval_id = self.approvals.approval_id(token)
        if approval_id is None:
            return None
        try:
            return await self.approvals.get(approval_id)
        except NotFound:
            return None

    async def page(self, approval: Approval, token: str, *, status: int = 200, notice: str | None = None) -> HTMLResponse:
        open_ = approval.state == PENDING and approval.deadline > self.clock.now()
        subscriber = (await self.conversations.get(approval.conversation_id)).subscriber_name
        return render_page(
            self.renderer, "approvals/decide.html", status=status, a=approval, token=token, open=open_, notice=notice,
            subscriber=subscriber,
            ended=ENDED.get(approval.state, "It is closed"), arguments=pretty_arguments(approval.arguments)[0],
            deadline=approval.deadline.strftime("%d %b %Y, %H:%M UTC"),
        )

    def not_found(self) -> HTMLResponse:
        return link_not_valid(self.renderer)


async def decision_pages(request: Request) -> DecisionPages:
    """The approval page's services, taken from the desk in one lookup (one dependency
    solved per request instead of four)."""
    desk = app_desk(request)
    return DecisionPages(desk.approvals, desk.conversations, desk.renderer, desk.clock)


DecisionPagesDep = Annotated[DecisionPages, Depends(decision_pages)]


@router.get("/a/{token}", response_class=HTMLResponse)
async def show(token: str, pages: DecisionPagesDep) -> HTMLResponse:
    approval = await pages.load(token)
    return await pages.page(approval, token) if approval else pages.not_found()


@router.post("/a/{token}", response_class=HTMLResponse)
async def decide(token: str, request: Request, pages: DecisionPagesDep, config: ConfigDep) -> HTMLResponse:
    approval = await pages.load(token)
    if approval is None:
        return pages.not_found()
    form = await request.form()
    if not same_origin(request, config.public_url) or form.get("token") != token:
        return await pages.page(approval, token, status=403, notice="Please decide from this page.")
    choice = form.get("decision")
    if choice not in ("approve", "deny"):
        return await pages.page(approval, token, status=400, notice="Choose Approve or Deny.")
    name, reason = str(form.get("name") or "").strip(), str(form.get("reason") or "").strip()
    # The page's maxlength stops a browser; a longer value posted some other way is refused,
    # never cut short behind the approver's back.
    too_long = [f"{label} is longer than {limit} characters ({len(value)})"
                for label, value, limit in (("Your name", name, NAME_LIMIT), ("The reason", reason, REASON_LIMIT))
                if len(value) > limit]
    if too_long:
        return await pages.page(approval, token, status=400, notice=f"Nothing was decided: {'; '.join(too_long)}.")
    result = await pages.approvals.decide(
        approval.id, approve=choice == "approve", by=f"{name} (decision link)" if name else "decision link holder",
        via="link", reason=reason or None, always_allow=form.get("always") == "yes",
    )
    if not result.changed:
        return await pages.page(await pages.approvals.get(approval.id), token, status=410,
                                notice="This request was already closed; your answer changed nothing.")
    return await pages.page(await pages.approvals.get(approval.id), token, notice="Thank you: your decision is recorded.")
