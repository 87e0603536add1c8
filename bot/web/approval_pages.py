"""The signed decision page for approval prompts: `GET /a/{token}` shows, `POST` decides.

For channels without buttons and as a fallback everywhere (every prompt carries the link). The token is
the approval id signed with `secret_key` (its own salt), so it works only for that approval;
GET never decides (mail scanners open links); POST is accepted from the page itself only,
and the decision is the approvals' compare-and-set, so the link works once and a late
answer changes nothing.

A link proves only that its holder has it, not who they are. When two people must approve,
the page counts a decision only from a browser signed in to the inbox as a person (with the
agent role or above), and counts it as that person; a bare link's decision, or one from the
owner token's service session, is refused, saying so, and recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from bot.config import Config
from bot.config.people import Role
from bot.domain.approval_votes import ANSWERS, REFUSED, DecisionOutcome
from bot.domain.approvals import PENDING, Approvals
from bot.domain.conversations import Conversations
from bot.domain.people import Actor
from bot.domain.rendering import Renderer
from bot.errors import NotFound
from bot.runtime.clock import Clock
from bot.store.models import Approval
from bot.web.deps import ConfigDep, app_desk
from bot.web.inbox import session_of
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
    """The services the decision page reads: the approvals, the subscriber's name, and the
    inbox session of whoever opens the page (a verified identity)."""

    approvals: Approvals
    conversations: Conversations
    renderer: Renderer
    clock: Clock
    config: Config

    async def signed_in(self, request: Request) -> Actor | None:
        """Who the browser is signed in to the inbox as, when they may decide (the agent role
        or above); None otherwise."""
        session = await session_of(request)
        if session is None or not session.role.allows(Role.AGENT):
            return None
        return Actor.of_person(session.person, "link") if session.person else Actor.owner_token("link")

    async def load(self, token: str) -> Approval | None:
        approval_id = self.approvals.approval_id(token)
        if approval_id is None:
            return None
        try:
            return await self.approvals.get(approval_id)
        except NotFound:
            return None

    async def page(self, approval: Approval, token: str, *, status: int = 200, notice: str | None = None,
                   signed_in: bool = False) -> HTMLResponse:
        open_ = approval.state == PENDING and approval.deadline > self.clock.now()
        subscriber = (await self.conversations.get(approval.conversation_id)).subscriber_name
        approvers = [v.name for v in await self.approvals.votes(approval.id) if v.approve]
        return render_page(
            self.renderer, "approvals/decide.html", status=status, a=approval, token=token, open=open_, notice=notice,
            subscriber=subscriber, two_people=approval.approvals_required > 1, approvers=approvers, signed_in=signed_in,
            ended=ENDED.get(approval.state, "It is closed"), arguments=pretty_arguments(approval.arguments)[0],
            deadline=approval.deadline.strftime("%d %b %Y, %H:%M UTC"),
        )

    def not_found(self) -> HTMLResponse:
        return link_not_valid(self.renderer)


async def decision_pages(request: Request) -> DecisionPages:
    """The approval page's services, taken from the desk in one lookup (one dependency
    solved per request instead of four)."""
    desk = app_desk(request)
    return DecisionPages(desk.approvals, desk.conversations, desk.renderer, desk.clock, desk.config)


DecisionPagesDep = Annotated[DecisionPages, Depends(decision_pages)]


@router.get("/a/{token}", response_class=HTMLResponse)
async def show(token: str, request: Request, pages: DecisionPagesDep) -> HTMLResponse:
    approval = await pages.load(token)
    if approval is None:
        return pages.not_found()
    actor = await pages.signed_in(request)
    return await pages.page(approval, token, signed_in=actor is not None and actor.is_person)


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
    actor = await pages.signed_in(request)
    signed_in = actor is not None and actor.is_person
    by = actor.name if actor is not None and actor.is_person else (f"{name} (decision link)" if name else "decision link holder")
    result = await pages.approvals.decide(
        approval.id, approve=choice == "approve", by=by, via="link", voter=actor.voter if actor else None,
        reason=reason or None, always_allow=form.get("always") == "yes",
    )
    after = await pages.approvals.get(approval.id)
    if result.outcome is DecisionOutcome.DECIDED:
        return await pages.page(after, token, notice="Thank you: your decision is recorded.", signed_in=signed_in)
    status = 410 if result.outcome is DecisionOutcome.CLOSED else 403 if result.outcome in REFUSED else 200
    return await pages.page(after, token, status=status, notice=ANSWERS[result.outcome], signed_in=signed_in)
