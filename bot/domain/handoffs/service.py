"""`Handoffs`, the face of the handoff service: the one object the desk builds and the flow,
the pages, the tools and the timers call.

It holds no logic of its own. It builds the shared context and one room per concern, wires
the rooms to each other where one concern uses another (a reply that is a `/release`, a
release that is a claim, a ladder that releases past its last step), and exposes each room's
methods under the names callers have always used, each bound to the room that does it. The
outbox's settle hook goes to the ladder (`escalation.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncSession

from bot.config import HandoffSettings, Ladder
from bot.delivery.channel_set import ChannelSet
from bot.delivery.outbox import Outbox
from bot.domain import handoff_rows as rows
from bot.domain.handoffs.activation import Activation
from bot.domain.handoffs.claims import Claims
from bot.domain.handoffs.context import HandoffContext
from bot.domain.handoffs.dispatch import Dispatches
from bot.domain.handoffs.escalation import Escalation
from bot.domain.handoffs.notices import Notices
from bot.domain.handoffs.reads import Reads
from bot.domain.handoffs.relay import Relaying
from bot.domain.handoffs.release import Releases
from bot.domain.handoffs.requesting import Requests
from bot.domain.hours import OfficeHours
from bot.domain.offers import Reach
from bot.domain.rendering import Renderer
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.store.db import Database
from bot.store.models import HandoffSession
from forms.links import FormLinks


class Handoffs:
    """The handoff lifecycle, request → dispatch → active → released (or failed), as one service."""

    def __init__(
        self,
        *,
        db: Database,
        clock: Clock,
        settings: HandoffSettings,
        channels: ChannelSet,
        outbox: Outbox,
        renderer: Renderer,
        metrics: Metrics,
        forms: FormLinks,
        hours: OfficeHours,
        ladders: Mapping[int, Ladder] | None = None,
        background: Background | None = None,
        reach: Reach | None = None,
    ) -> None:
        ctx = HandoffContext(
            db=db, clock=clock, settings=settings, channels=channels, outbox=outbox, renderer=renderer,
            metrics=metrics, forms=forms, hours=hours, ladders=ladders or {}, background=background or Background(),
            reach=reach,
        )
        # What callers read of the service's configuration: the routes and their hours (the
        # tools' description and enum, the inbox's route labels)
        self.clock, self.hours, self.ladders, self.steps = ctx.clock, ctx.hours, ctx.ladders, ctx.steps

        notices, dispatch = Notices(ctx), Dispatches(ctx)
        activation, claims = Activation(ctx, notices), Claims(ctx, notices)
        releases = Releases(ctx, notices, claims)
        relaying = Relaying(ctx, notices, releases)
        escalation = Escalation(ctx, notices, dispatch, releases)
        requests, reads = Requests(ctx, dispatch, activation), Reads(ctx)
        outbox.on_dispatch_settled = escalation.dispatch_settled

        # Reads (reads.py, context.py)
        self.get, self.public_name = ctx.get, ctx.public_name
        self.offered, self.target_ids = ctx.offered, ctx.target_ids
        self.on_the_line, self.by_thread, self.in_thread = reads.on_the_line, reads.by_thread, reads.in_thread
        self.recipient_on, self.recipients_of = reads.recipient_on, reads.recipients_of
        self.direct_lines = reads.direct_lines
        self.recipients_of_many = reads.recipients_of_many
        # Requesting (requesting.py) and settling what a stop left dispatching (activation.py)
        self.record_rejection, self.request = requests.record_rejection, requests.request
        self.recover_dispatches = activation.recover_dispatches
        self.activate_sent_dispatches = activation.activate_sent_dispatches
        self.fail_stale_dispatches = activation.fail_stale_dispatches
        # Relaying (relay.py)
        self.bump, self.route_subscriber_message = relaying.bump, relaying.route_subscriber_message
        self.recipient_message = relaying.recipient_message
        # Claims (claims.py) and the ladder (escalation.py)
        self.claim, self.speaking = claims.claim, claims.speaking
        self.escalate_if_due, self.escalations_due = escalation.escalate_if_due, escalation.escalations_due
        # Release and the idle timer's questions (release.py)
        self.release, self.release_if_idle = releases.release, releases.release_if_idle
        self.reissue_form_link = releases.reissue_form_link
        self.overdue, self.due_before = releases.overdue, releases.due_before

    @staticmethod
    async def open_session(session: AsyncSession, conversation_id: str) -> HandoffSession | None:
        """The conversation's open handoff as stored now (a re-read in the same session sees
        a new state: each read builds its object afresh from the row)."""
        return await rows.open_handoff(session, conversation_id)
