"""The desk: builds every part from the config, wires them together, starts and stops them.

It only wires. What the API and the pages do goes through the parts it holds (conversations,
queries, handoffs, approvals, the router, …), which web routes get one by one from
bot/web/deps.py, never through methods here.

One `Desk` is one server instance. Several instances may share one PostgreSQL database:
everything that must happen once (a release, an outbox send, an inbound event) is decided
by a conditional update in the database, not by anything held in this object.
"""

from __future__ import annotations

import hashlib
import hmac
from functools import partial

import structlog

from bot.agents import Agent, build_agent
from bot.config import Config
from bot.delivery.callbacks import CallbackSender, CallbackSettled
from bot.delivery.channel_set import ChannelSet
from bot.delivery.outbox import Outbox
from bot.delivery.retention import Retention
from bot.domain.approvals import Approvals, ApprovalSettled
from bot.domain.conversations import Conversations
from bot.domain.handoffs import (
    EscalationDue,
    HandoffActivated,
    HandoffClaimed,
    HandoffReleased,
    Handoffs,
    HeldMessagesOrphaned,
)
from bot.domain.hours import OfficeHours
from bot.domain.idempotency import IdempotencyKeys
from bot.domain.offers import Reach
from bot.domain.oncall_service import OnCall
from bot.domain.people import ApiTokens, Invitations, LinkCodes, PasswordSignIn, People, SecondFactor, Sessions
from bot.domain.people.availability import Availability
from bot.domain.queries import Queries
from bot.domain.rendering import Renderer
from bot.domain.reports import Reports
from bot.domain.revocations import Revocations
from bot.domain.satisfaction import Satisfaction
from bot.domain.timers import IdleTimers
from bot.domain.user_actions import UserActions, UserActionSettled
from bot.flow.availability import ChannelAvailability
from bot.flow.fronts import Fronts
from bot.flow.inbound import Inbound
from bot.flow.linking import ChannelLinking
from bot.flow.router import Router
from bot.flow.shared_lines import SharedLines
from bot.flow.siblings import Siblings
from bot.runtime.background import Background
from bot.runtime.bus import ConversationBus
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.runtime.signals import Signals
from bot.store.db import Database
from bot.store.instances import Instances
from bot.tools import ToolRegistry
from bot.tools.actions import ActionTool
from bot.tools.handoff import HandoffReleaseTool, HandoffRequestTool
from bot.tools.user_actions import RequestUserActionTool, ResponseUserActionTool
from channels.base import ChannelAdapter, ChannelContext
from forms.links import FormLinks

log = structlog.get_logger(__name__)


class Desk:
    """One server instance's parts, built in layers: each step uses only what the steps before
    it built, so the wiring reads top to bottom (and a part's place says what it may call)."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Clock | None = None,
        agent: Agent | None = None,
        channel_overrides: dict[int, ChannelAdapter] | None = None,
        run_timers: bool = True,
    ) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.run_timers = run_timers
        self._build_runtime()
        self._build_delivery(channel_overrides)
        self._build_domain()
        self._build_flow(agent)
        self._build_schedule()
        self.started = False

    # ------------------------------------------------------------------ wiring, in order

    def _build_runtime(self) -> None:
        """The process's plumbing: the bus pages wait on, the signals committed transactions
        raise (their handlers are wired last, in `_build_schedule`), the database, metrics,
        the background tasks, the message renderer."""
        self.bus = ConversationBus()
        self.signals = Signals(self.bus)
        self.db = Database(self.config.database_url, signals=self.signals)
        self.metrics = Metrics()
        self.metrics.waiting_polls.set_function(self.bus.waiting)
        self.background = Background()
        self.renderer = Renderer()

    def _build_delivery(self, channel_overrides: dict[int, ChannelAdapter] | None) -> None:
        """The channels, this process's heartbeat, and the outbox that sends through them."""
        config, delivery = self.config, self.config.delivery
        self.channels = ChannelSet(
            config.channels, channel_overrides,
            on_change=lambda adapter, up: self.metrics.channel_up.labels(str(adapter.id), adapter.kind).set(1 if up else 0),
            fronts=config.provider_fronts,
        )
        # This process, beating in the database; what a dead one held is taken over
        self.instances = Instances(self.db, self.clock, heartbeat=delivery.heartbeat)
        self.outbox = Outbox(
            self.db, self.channels, self.clock, self.metrics, max_attempts=delivery.max_attempts,
            base_backoff=delivery.base_backoff.total_seconds(), max_backoff=delivery.max_backoff.total_seconds(),
            lease=delivery.lease, owner=self.instances.id, callbacks=CallbackSender.from_config(config),
            claims_held=self.instances.holds_claims,
        )
        self.retention = Retention(self.db, self.clock, config.retention, idempotency_ttl=config.api.idempotency_ttl)

    def _build_domain(self) -> None:
        """The services over the stored state: conversations, handoffs, approvals, user
        actions, the reads behind the pages and reports, the API's idempotency keys."""
        config = self.config
        self.conversations = Conversations(self.db, self.clock, self.bus)
        self.queries = Queries(self.db)
        self.reports = Reports(self.db, route_labels={route.id: route.label for route in config.routes})
        self.revocations = Revocations(self.db, self.clock)
        # The people of the desk, their sessions, tokens and link codes (bot/domain/people/)
        self.people = People(self.db, self.clock)
        self.availability = Availability(self.db, self.clock, self.people, config.hours)  # away, back, presence
        self.sessions = Sessions(self.db, self.clock, config.sign_in)
        self.api_tokens = ApiTokens(self.db, self.clock)
        self.link_codes = LinkCodes(self.db, self.clock, self.people)
        self.password_sign_in = PasswordSignIn(self.db, self.clock, self.people)
        self.second_factor = SecondFactor(self.db, self.clock, self.people)
        self.invitations = Invitations(self.people, self.sessions, secret_keys=config.signing_keys,
                                       public_url=config.public_url, ttl=config.sign_in.invitation_ttl, clock=self.clock)
        self.forms = FormLinks(secret_keys=config.signing_keys, public_url=config.public_url, ttl=config.handoff.form_link_ttl)
        self.hours = OfficeHours(config.hours, self.clock)  # the handoffs' ladders and the approvals' alike
        self.oncall = OnCall(self.db, self.clock, config.oncall, config.hours, self.metrics)  # who is on call, overrides
        self.reach = Reach(channels=self.channels, teams=config.teams, schedules=config.hours, oncall=self.oncall)
        self.handoffs = Handoffs(
            db=self.db, clock=self.clock, settings=config.handoff, channels=self.channels, outbox=self.outbox,
            renderer=self.renderer, metrics=self.metrics, forms=self.forms,
            hours=self.hours, ladders=config.ladders, background=self.background, reach=self.reach,
        )
        self.approvals = Approvals(
            db=self.db, clock=self.clock, actions=config.actions, channels=self.channels, outbox=self.outbox,
            renderer=self.renderer, secret_keys=config.signing_keys, public_url=config.public_url,
            metrics=self.metrics, background=self.background, ladders=config.ladders, hours=self.hours,
            unlinked=config.sign_in.approvals_from_unlinked,
        )
        self.user_actions = UserActions(
            db=self.db, clock=self.clock, config=config, renderer=self.renderer, outbox=self.outbox,
            metrics=self.metrics,
        )
        self.idempotency = IdempotencyKeys(
            self.db, self.clock, instance_id=self.instances.id, dead_after=lambda: self.instances.dead_after,
        )

    def _build_flow(self, agent: Agent | None) -> None:
        """Where messages go: the agent and its tools, the router between agent and people,
        the fronts (provider chats), and the inbound path from the people's channels."""
        config = self.config
        self.tools = ToolRegistry([
            HandoffRequestTool(), HandoffReleaseTool(),
            RequestUserActionTool(self.user_actions), ResponseUserActionTool(self.user_actions),
            *(ActionTool(action, self.approvals) for action in config.actions),
        ])
        self.agent = agent or build_agent(config.agent)
        self.router = Router(
            db=self.db, clock=self.clock, handoffs=self.handoffs, channels=self.channels, outbox=self.outbox,
            tools=self.tools, agent=self.agent, background=self.background, metrics=self.metrics,
            user_actions=self.user_actions,
        )
        self.siblings = Siblings(
            db=self.db, clock=self.clock, handoffs=self.handoffs, router=self.router, background=self.background,
            renderer=self.renderer,
        )
        self.siblings.bind(self.channels.adapters())
        self.satisfaction = Satisfaction(
            db=self.db, clock=self.clock, settings=config.csat, renderer=self.renderer, metrics=self.metrics,
            background=self.background, has_buttons=self._front_has_buttons,
        )
        self.fronts = Fronts(
            db=self.db, clock=self.clock, fronts=config.provider_fronts, outbox=self.outbox, renderer=self.renderer,
            router=self.router, user_actions=self.user_actions, satisfaction=self.satisfaction,
        )
        lines = SharedLines(db=self.db, clock=self.clock, outbox=self.outbox, renderer=self.renderer)
        self.inbound = Inbound(
            db=self.db, clock=self.clock, handoffs=self.handoffs, metrics=self.metrics, background=self.background,
            kind_of=lambda cid: getattr(self.channels.get(cid), "kind", "unknown"),
            lines=lines,
            approvals=self.approvals,
            shared_line=self._shared_line,
            subscriber=self.fronts.handle,
            late_failure=self.outbox.record_late_failure,
            owner=self.instances.id, dead_after=lambda: self.instances.dead_after,
            people=self.people, identity_kind=self._identity_kind,
            availability=ChannelAvailability(
                db=self.db, clock=self.clock, people=self.people, availability=self.availability, outbox=self.outbox,
                renderer=self.renderer, kind_of=self._identity_kind, public_url=config.public_url,
            ),
            linking=ChannelLinking(
                db=self.db, clock=self.clock, codes=self.link_codes, handoffs=self.handoffs, lines=lines,
                outbox=self.outbox, renderer=self.renderer, kind_of=self._identity_kind, shared_line=self._shared_line,
            ),
        )

    def _build_schedule(self) -> None:
        """What runs by itself: the idle timers, what each committed signal wakes, what every
        sweep also runs, and what a heartbeat takes over from a dead instance."""
        self.timers = IdleTimers(self.handoffs, self.clock, sweep_interval=self.config.handoff.sweep_interval)
        on = self.signals.on  # handlers of one kind run in the order given here
        on(HandoffActivated, self.timers.on_activated)
        on(HandoffActivated, lambda activated: self.siblings.on_activated(activated.handoff))
        on(HandoffReleased, self.timers.on_released)
        on(HandoffReleased, self.router.after_release)
        on(HandoffReleased, self.satisfaction.on_released)
        on(HandoffClaimed, self.timers.on_claimed)
        on(EscalationDue, self.timers.on_escalation_due)
        on(HeldMessagesOrphaned, self.router.after_failed_dispatch)
        on(ApprovalSettled, self.router.after_approval)
        on(CallbackSettled, self.approvals.on_call_settled)
        on(UserActionSettled, self.router.after_user_action)
        self.timers.also_on_sweep += [
            self.user_actions.expire_due, self.approvals.expire_due, self.approvals.escalate_due,
            self.approvals.recover_interrupted, self.channels.retry_unavailable, self.retention.sweep,
        ]
        self.instances.take_overs += [
            lambda: self.outbox.take_over(self.instances.dead_after), self.inbound.process_pending,
        ]

    def _front_has_buttons(self, front: str) -> bool:
        """Whether a front can offer buttons (the web chat's quick replies, a provider's
        inline keyboard), or is answered in words."""
        provider = next((f for f in self.config.provider_fronts if f.name == front), None)
        if provider is None:
            return True  # the web chat
        adapter = self.channels.get(provider.channel_id)
        return adapter is not None and adapter.capabilities.buttons

    def _identity_kind(self, channel_id: int) -> str:
        """The kind of the identities a channel's people write with: the config's kind of the
        channel (its configured `kind`), what `person_identities.kind` holds."""
        channel = self.config.channel(channel_id)
        return channel.kind if channel is not None else getattr(self.channels.get(channel_id), "kind", "unknown")

    def _shared_line(self, channel_id: int) -> bool:
        """A channel without threads puts all its handoffs on one line (bot/flow/shared_lines.py)."""
        adapter = self.channels.get(channel_id)
        return adapter is not None and not adapter.capabilities.threads

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, upgrade: bool = True) -> None:
        if upgrade:
            await self.db.upgrade()
        if self.config.people:
            applied = await self.people.apply_config(self.config.people)
            log.info("people_applied", added=list(applied.added), updated=list(applied.updated))
        await self.channels.start(self._channel_context)
        await self.approvals.clear_unanswerable()
        await self.approvals.recover_interrupted()
        self.outbox.start()
        if self.run_timers:
            self.timers.start()
        self.started = True
        # Joins the desks beating in the database and takes over at once what a previous run
        # of this process left in flight (its outbox items, its inbound events)
        await self.instances.start()
        log.info("desk_started", channels=[s for s in self.channels.health()], public_url=self.config.public_url)

    def _channel_context(self, channel_id: int) -> ChannelContext:
        return ChannelContext(
            public_url=self.config.public_url,
            deliver_inbound=partial(self.inbound.submit, channel_id),
            render=self.renderer.render,
            lost=partial(self.channels.lost, channel_id),
            subscribers=self.channels.serves_subscribers(channel_id),
            open_lines=partial(self.handoffs.direct_lines, channel_id),
            secret=hmac.new(
                self.config.secret_key.get_secret_value().encode(), f"channel:{channel_id}".encode(), hashlib.sha256,
            ).digest(),
        )

    async def settle(self) -> None:
        """Wait for follow-up work (relays, resume turns) to finish: for tests and the demo."""
        for _ in range(10):
            await self.background.settle()
            await self.outbox.drain()
            if not self.background.pending:
                return

    async def stop(self) -> None:
        await self.timers.stop()
        await self.outbox.stop()
        await self.background.close()
        await self.instances.stop()  # after the outbox: what it still holds is taken over at once
        await self.channels.stop()
        await self.agent.aclose()
        await self.db.dispose()
        self.started = False
