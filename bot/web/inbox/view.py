"""What the inbox's pages show, read from the services: `InboxView` words the cards of
handoffs and approvals, the return-form link's state, times left and ago, and builds the list
(the page and its live updates alike), whose version a waiting long-poll compares.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Request

from bot.delivery.channel_set import ChannelSet
from bot.domain.approvals import PENDING, Approvals
from bot.domain.conversations import speaker
from bot.domain.handoffs import Handoffs, stored_fields
from bot.domain.queries import ConversationPreview, Queries
from bot.runtime.bus import ConversationBus
from bot.runtime.clock import Clock
from bot.store.models import Approval, HandoffEvent, HandoffRecipient, HandoffSession
from bot.store.vocabulary import ENDED_STATES, OPEN_STATES, HandoffState
from bot.web.deps import app_desk
from bot.web.inbox_routes import NoInboxLine, OfferNames, RouteStatus, inbox_line, route_status, span, target_labels
from channels.base import pretty_arguments
from channels.text import clip
from forms.fields import preview_line
from forms.links import FormLinks, LinkUnavailable

LIST_LIMIT = 100  # the list shows the newest 100 open handoffs (an index range, also at 100k open)
RECHECK_SECONDS = 2.0  # how often a waiting list request re-reads the database
PREVIEW_CHARS = 160


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


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
    targets: Mapping[str, str] = field(default_factory=dict)  # teams' and on-call schedules' labels (`target_labels`)

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

    async def route_of(self, handoff: HandoffSession, events: Sequence[HandoffEvent] = ()) -> RouteStatus | None:
        """The route's state of a handoff on one (its recipients read now); None otherwise.
        `events`, its audit trail when the page has read it, names who was passed over."""
        if handoff.route_id is None:
            return None
        recipients = await self.handoffs.recipients_of(handoff.id)
        names = await self._names(recipients, events)
        return self._route_status(handoff, recipients, names, events)

    async def routes_of(self, handoffs: list[HandoffSession]) -> dict[str, RouteStatus | None]:
        """`route_of` for a listing: the recipients of all its routed handoffs, and the names
        of the people offered them, in one read each."""
        routed = [h.id for h in handoffs if h.route_id is not None]
        found = await self.handoffs.recipients_of_many(routed) if routed else {}
        names = await self._names([r for rows in found.values() for r in rows], ())
        return {h.id: self._route_status(h, found[h.id], names) if h.id in found else None for h in handoffs}

    async def _names(self, recipients: Sequence[HandoffRecipient], events: Sequence[HandoffEvent]) -> OfferNames:
        """The directory's names of the people offered a handoff or passed over."""
        ids = {r.person_id for r in recipients if r.person_id is not None}
        ids |= {e.person_id for e in events if e.kind == "offer_passed_over" and e.person_id is not None}
        return OfferNames(await self.queries.person_names(ids), self.targets)

    def _route_status(self, handoff: HandoffSession, recipients: list[HandoffRecipient], names: OfferNames,
                      events: Sequence[HandoffEvent] = ()) -> RouteStatus | None:
        ladder = self.handoffs.ladders.get(handoff.route_id) if handoff.route_id is not None else None
        return route_status(handoff, recipients, ladder, self.clock.now(), self.ago, names, events)

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
    request instead of six), and the config's labels of its teams and on-call schedules."""
    desk = app_desk(request)
    return InboxView(desk.queries, desk.approvals, desk.channels, desk.forms, desk.clock, desk.bus, desk.handoffs,
                     target_labels(desk.config.teams, desk.config.oncall))


InboxViewDep = Annotated[InboxView, Depends(inbox_view)]
