"""What the owner does from the inbox, each a CSRF-checked POST decided by the service's
compare-and-set (a late or repeated press changes nothing): reply, release, claim a route's
handoff, issue a new return-form link, approve or deny an approval.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Depends, Form
from fastapi.responses import Response

from bot.config.people import Role
from bot.domain.approval_votes import ANSWERS, REFUSED, DecisionOutcome
from bot.errors import DeskError
from bot.store.vocabulary import Outcome, ReleaseReason
from bot.web.deps import ApprovalsDep, HandoffsDep, InboundDep, RendererDep
from bot.web.inbox.owner import SignedIn, page, posts, redirect
from bot.web.inbox.view import ENDED, InboxViewDep
from bot.web.inbox_routes import NoInboxLine, inbox_line
from channels.base import RecipientText

MAX_REPLY = 10_000  # the reply box's maxlength
MAX_RELEASE_NOTE = 2000  # a release note or decision reason: the same bound as the API and tools

router = APIRouter()


@router.post("/inbox/handoffs/{sid}/reply", include_in_schema=False)
async def reply(
    sid: str, view: InboxViewDep, inbound: InboundDep, renderer: RendererDep,
    text: str = Form(default=""), nonce: str = Form(default=""), owner: SignedIn = Depends(posts(Role.AGENT)),
) -> Response:
    """The owner's reply, as a recipient's reply on the owner inbox channel: straight to the
    handoff's thread, or on a route from the inbox's recipient thread, where the first reply
    claims the handoff as anyone's does."""
    handoff = await view.handoffs.get(sid)
    text = text.strip()
    if not text:
        return redirect(f"/inbox/handoffs/{sid}?notice={quote('Write a message first.')}")
    try:
        line = inbox_line(handoff, await view.route_of(handoff))
    except NoInboxLine as no_line:
        return redirect(f"/inbox/handoffs/{sid}?notice={quote(no_line.message)}")
    if len(text) > MAX_REPLY:
        return page(renderer, "inbox/error.html", owner, status=400, title="Could not send",
                     message=f"text: at most {MAX_REPLY} characters, got {len(text)}; nothing was sent.")
    outcome = await inbound.submit_and_wait(
        line.channel_id,
        RecipientText(thread_key=line.thread_key, text=text, author=owner.name, person_id=owner.actor().person_id,
                      dedupe_key=f"inbox:{nonce[:64]}" if nonce else None),
    )
    notice = "" if outcome in ("relayed", "duplicate") else outcome
    return redirect(f"/inbox/handoffs/{sid}" + (f"?notice={quote(notice)}" if notice else ""))


@router.post("/inbox/handoffs/{sid}/release", include_in_schema=False)
async def release(
    sid: str, handoffs: HandoffsDep, renderer: RendererDep,
    outcome: str = Form(default=Outcome.RESOLVED), note: str = Form(default=""), owner: SignedIn = Depends(posts(Role.AGENT)),
) -> Response:
    # A value is never silently changed: an unknown outcome or an over-long note is refused
    # with the field named, instead of becoming "resolved" or being cut.
    if outcome not in tuple(Outcome):
        return page(renderer, "inbox/error.html", owner, status=400, title="Could not release",
                     message=f"outcome: expected one of {', '.join(Outcome)}, got {outcome[:40]!r}; nothing was released.")
    if len(note) > MAX_RELEASE_NOTE:
        return page(renderer, "inbox/error.html", owner, status=400, title="Could not release",
                     message=f"note: at most {MAX_RELEASE_NOTE} characters, got {len(note)}; nothing was released.")
    chosen = Outcome(outcome)
    try:
        result = await handoffs.release(
            sid, reason=ReleaseReason.OWNER, actor=owner.actor().label, person_id=owner.actor().person_id,
            outcome=chosen, note=note,
        )
    except DeskError as exc:
        return page(renderer, "inbox/error.html", owner, status=exc.status if exc.status >= 400 else 400,
                     title="Could not release", message=exc.message)
    notice = "Released; the assistant has the conversation again." if result.released else (
        f"Already {result.session.state} ({result.session.release_reason or 'no reason'}); nothing changed."
    )
    return redirect(f"/inbox/handoffs/{sid}?notice={quote(notice)}")


@router.post("/inbox/handoffs/{sid}/claim", include_in_schema=False)
async def claim(sid: str, view: InboxViewDep, owner: SignedIn = Depends(posts(Role.AGENT))) -> Response:
    """Take a route's handoff from the inbox under the owner's name. The handoff service's
    compare-and-set decides: the first claim anywhere wins, a later one changes nothing. On
    a route that notified the owner inbox the claim names that thread, so the subscriber's
    messages come here and the inbox answers them."""
    handoff = await view.handoffs.get(sid)
    route = await view.route_of(handoff)
    if route is None:
        return redirect(f"/inbox/handoffs/{sid}?notice={quote('This handoff went to one channel; there is nothing to claim.')}")
    inbox = route.inbox_recipient
    result = await view.handoffs.claim(sid, by=owner.name, via="inbox", recipient_id=inbox.id if inbox else None, effect=False,
                                       person_id=owner.actor().person_id)
    taken = result.handoff
    if result.claimed:
        notice = "You have it now; everyone else asked was told."
    elif taken.claimed_by is not None:
        notice = f"Already taken by {taken.claimed_by}; nothing changed."
    else:
        notice = f"Already {taken.state}; nothing changed."
    return redirect(f"/inbox/handoffs/{sid}?notice={quote(notice)}")


@router.post("/inbox/handoffs/{sid}/form-link", include_in_schema=False)
async def new_form_link(sid: str, handoffs: HandoffsDep, owner: SignedIn = Depends(posts(Role.AGENT))) -> Response:
    try:
        await handoffs.reissue_form_link(sid, actor=owner.actor().label)
    except DeskError as exc:
        return redirect(f"/inbox/handoffs/{sid}?notice={quote(exc.message)}")
    notice = "A new return-form link was issued and sent to the recipient; older links no longer work."
    return redirect(f"/inbox/handoffs/{sid}?notice={quote(notice)}")


@router.post("/inbox/approvals/{aid}/decision", include_in_schema=False)
async def decide_approval(
    aid: str, approvals: ApprovalsDep, renderer: RendererDep,
    decision: str = Form(default=""), reason: str = Form(default=""), always: str = Form(default=""),
    owner: SignedIn = Depends(posts(Role.AGENT)),
) -> Response:
    """Approve or deny from the inbox: the approvals' compare-and-set decides, so only the
    first answer on a pending, unexpired approval counts; the action runs before we answer."""
    if decision not in ("approve", "deny"):
        return redirect(f"/inbox?notice={quote('Choose Approve or Deny.')}")
    if len(reason.strip()) > MAX_RELEASE_NOTE:
        return page(renderer, "inbox/error.html", owner, status=400, title="Could not decide",
                     message=f"reason: at most {MAX_RELEASE_NOTE} characters, got {len(reason.strip())}; nothing was decided.")
    try:
        result = await approvals.decide(
            aid, approve=decision == "approve", by=owner.actor().label, via="inbox", voter=owner.actor().voter,
            reason=reason.strip() or None, always_allow=always == "yes",
        )
    except DeskError as exc:
        return page(renderer, "inbox/error.html", owner, status=exc.status if exc.status >= 400 else 400,
                     title="Could not decide", message=exc.message)
    approval = await approvals.get(aid)
    if result.outcome in (DecisionOutcome.FIRST_APPROVAL, DecisionOutcome.SAME_PERSON, *REFUSED):
        notice = f"{approval.action_id}: {ANSWERS[result.outcome]}"
    elif not result.changed:
        notice = f"{approval.action_id} was already {ENDED.get(approval.state, approval.state)}; your answer changed nothing."
    elif approval.state == "denied":
        notice = f"Denied: {approval.action_id} did not run."
    elif approval.run_state == "succeeded":
        notice = f"Approved: {approval.action_id} ran."
    elif approval.run_state == "failed":
        notice = f"Approved, but {approval.action_id} failed: {approval.error or 'no detail'}"
    elif approval.run_state == "agent":
        notice = f"Approved: the agent runs {approval.action_id} itself."
    else:
        notice = f"Approved: {approval.action_id} is running."
    return redirect(f"/inbox?notice={quote(notice[:300])}#approvals")
