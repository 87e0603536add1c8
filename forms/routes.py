"""The return-form pages: `GET /f/{token}` shows, `POST /f/{token}` hands back.

GET never changes anything (scanners and link previews fetch it). POST is accepted only
from the form's own page (Sec-Fetch-Site / Origin, and the token repeated in the body),
validates every typed field, and either re-shows the form with the problems or consumes
the link and releases the handoff with reason `form` in one transaction. Every other state
— expired, used, replaced, ended another way, not ours — gets its own page and status,
without details a stranger could use.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from starlette.datastructures import FormData

from bot.delivery.channel_set import ChannelSet
from bot.domain.handoffs import Handoffs, stored_fields
from bot.domain.queries import LinkedHandoff, Queries
from bot.domain.rendering import Renderer
from bot.runtime.clock import Clock
from bot.store.models import HandoffSession
from bot.store.vocabulary import OUTCOMES_SPOKEN, HandoffState, Outcome, ReleaseReason
from bot.web.deps import ConfigDep, app_desk
from bot.web.pages import link_not_valid, render_page, same_origin, status_page
from forms.fields import ReturnField, ReturnValuesInvalid, coerce_returned
from forms.links import FormLinks, LinkUnavailable

NOTE_LIMIT = 2000  # the page's maxlength for the note
NAME_LIMIT = 100  # and for the name

router = APIRouter(include_in_schema=False)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%d %b %Y, %H:%M UTC") if moment else "earlier"


@dataclass
class FieldView:
    field: ReturnField
    value: str = ""
    error: str | None = None


@dataclass(frozen=True)
class FormPages:
    """The services the return form reads and releases through."""

    links: FormLinks
    queries: Queries
    handoffs: Handoffs
    channels: ChannelSet
    renderer: Renderer
    clock: Clock

    async def load(self, token: str) -> LinkedHandoff | None:
        link_id = self.links.link_id(token)
        return await self.queries.linked_handoff(link_id) if link_id is not None else None

    def status(self, status: int, title: str, *lines: str, tone: str = "info", **context: Any) -> HTMLResponse:
        return status_page(self.renderer, status, title, *lines, tone=tone, **context)

    def not_found(self) -> HTMLResponse:
        return link_not_valid(self.renderer)

    def unavailable_page(self, found: LinkedHandoff) -> HTMLResponse | None:
        """The page for a link that cannot be used now, or None when the form may be shown."""
        link, handoff = found.link, found.handoff
        now = self.clock.now()
        if link.consumed_at is not None:
            return self.status(410, "This form was already submitted",
                               f"It was submitted on {_when(link.consumed_at)}"
                               + (f" by {link.consumed_by}" if link.consumed_by and link.consumed_by != "return form" else "") + ".",
                               "The assistant has resumed the conversation with the returned data.")
        if handoff.state != HandoffState.ACTIVE:
            if handoff.state == HandoffState.RELEASED:
                how = ReleaseReason(handoff.release_reason).page_phrase if handoff.release_reason in tuple(ReleaseReason) else "released"
                return self.status(410, "This handoff has already ended",
                                   f"It was {how} on {_when(handoff.released_at)}.",
                                   "The assistant has the conversation again, so there is nothing left to hand back.")
            return self.status(410, "This handoff is not active", "There is nothing to hand back here.")
        if link.superseded_at is not None:
            return self.status(410, "This link was replaced",
                               "A newer link was issued for this handoff. Please use the most recent link you received.")
        if link.expires_at <= now:
            channel = self.channels.get(handoff.channel_id)
            lines = [f"It expired on {_when(link.expires_at)}. The handoff is still open."]
            if channel is not None and channel.capabilities.inbound:
                lines.append(
                    f"To hand back without the form, reply to the handoff message in {handoff.channel_label} with /release"
                    f" (you may add {OUTCOMES_SPOKEN}, and a note)"
                    + (", or press its Release button." if channel.capabilities.buttons else "."))
            lines.append("Or ask the owner for a fresh link: it comes to you the same way this one did.")
            return self.status(410, "This link has expired", *lines, inbox_url=_inbox_url(handoff),
                               inbox_words="Are you the owner? Make a fresh link on this handoff's page in the inbox")
        return None

    def form_page(
        self, token: str, found: LinkedHandoff, *, status: int = 200,
        views: list[FieldView] | None = None, errors: dict[str, str] | None = None,
        outcome: str = Outcome.RESOLVED, note: str = "", filled_by: str = "",
    ) -> HTMLResponse:
        handoff = found.handoff
        fields = stored_fields(handoff)
        return render_page(
            self.renderer, "forms/form.html", status=status, token=token, h=handoff,
            fields=views or [FieldView(f) for f in fields], errors=errors or {},
            labels={f.name: f.display_label for f in fields} | {"outcome": "Outcome", "note": "Note", "filled-by": "Your name"},
            outcomes=list(Outcome),
            outcome=outcome, note=note, filled_by=filled_by, expires=_when(found.link.expires_at),
        )


async def form_pages(request: Request) -> FormPages:
    """The return form's services, taken from the desk in one lookup: FastAPI solves each
    dependency of a route on every request, so six service dependencies cost six solves."""
    desk = app_desk(request)
    return FormPages(desk.forms, desk.queries, desk.handoffs, desk.channels, desk.renderer, desk.clock)


FormPagesDep = Annotated[FormPages, Depends(form_pages)]


def _inbox_url(handoff: HandoffSession) -> str:
    """The owner's page for this handoff; it asks for the owner's login, so it tells a
    recipient nothing they could use."""
    return f"/inbox/handoffs/{handoff.id}"


@router.get("/f/{token}", response_class=HTMLResponse)
async def show_form(token: str, pages: FormPagesDep) -> HTMLResponse:
    found = await pages.load(token)
    if found is None:
        return pages.not_found()
    return pages.unavailable_page(found) or pages.form_page(token, found)


def _read_fields(fields: list[ReturnField], form: FormData) -> tuple[list[FieldView], dict[str, str], dict[str, str]]:
    """What was typed (kept as typed, for the page and for the release, which types it) and
    the problems of each field, checked by the same rules as every other release."""
    typed = {f.name: text if isinstance(text := form.get(f"f_{f.name}"), str) else "" for f in fields}
    try:
        coerce_returned(fields, typed)
        problems: dict[str, str] = {}
    except ReturnValuesInvalid as exc:
        problems = exc.problems
    views = [
        FieldView(f, value=typed[f.name], error=f"{f.display_label} {problems[f.name]}." if f.name in problems else None)
        for f in fields
    ]
    return views, typed, problems


@router.post("/f/{token}", response_class=HTMLResponse)
async def submit_form(token: str, request: Request, pages: FormPagesDep, config: ConfigDep) -> HTMLResponse:
    form = await request.form()
    if not same_origin(request, config.public_url) or form.get("token") != token:
        return pages.status(403, "Refused", "Please submit the form from its own page.")
    found = await pages.load(token)
    if found is None:
        return pages.not_found()
    link, handoff = found.link, found.handoff
    unavailable = pages.unavailable_page(found)
    if unavailable is not None:
        return unavailable

    fields = stored_fields(handoff)
    views, typed, errors = _read_fields(fields, form)
    outcome = str(form.get("outcome") or Outcome.RESOLVED)
    if outcome not in tuple(Outcome):
        errors["outcome"] = "must be one of: resolved, unresolved, needs follow-up"
        outcome = Outcome.RESOLVED
    note = str(form.get("note") or "").strip()
    filled_by = " ".join(str(form.get("filled_by") or "").split())
    # The page's maxlength stops a browser; a longer value posted some other way is refused,
    # never cut short behind the recipient's back.
    if len(note) > NOTE_LIMIT:
        errors["note"] = f"is longer than {NOTE_LIMIT} characters ({len(note)})"
    if len(filled_by) > NAME_LIMIT:
        errors["filled-by"] = f"is longer than {NAME_LIMIT} characters ({len(filled_by)})"
    if errors:  # wrong-typed answers come back for correction; nothing is consumed
        return pages.form_page(token, found, status=422, views=views, errors=errors,
                          outcome=outcome, note=note, filled_by=filled_by)

    actor = filled_by or "return form"

    async def consume(session: Any, now: datetime) -> None:
        await FormLinks.consume(session, link.id, now, actor)

    try:
        result = await pages.handoffs.release(
            handoff.id, reason=ReleaseReason.FORM, actor=actor, outcome=Outcome(outcome), note=note or None,
            return_values=typed, guard=consume,
        )
    except LinkUnavailable:
        result = None
    if result is None or not result.released:
        again = await pages.load(token)
        assert again is not None
        return pages.unavailable_page(again) or pages.status(409, "Nothing changed", "Please reload the form.")
    released = result.session
    labels = {f.name: f.display_label for f in fields}
    return pages.status(
        200, "Thank you, handed back",
        "The assistant has the conversation again and will continue with your answers.",
        tone="ok", returned={k: _display(v) for k, v in released.returned.items()},
        missing=[labels.get(name, name) for name in released.missing_required], labels=labels,
        outcome=Outcome(released.outcome).label if released.outcome in tuple(Outcome) else released.outcome, note=released.note,
        inbox_url=_inbox_url(released),
    )


def _display(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
