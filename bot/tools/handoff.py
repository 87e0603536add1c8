"""`handoff_request` and `handoff_release`, as the model sees them: the descriptions, and the
words of every result. The handoff service answers in facts (`HandoffStarted`, the
`HandoffRequestRefused` errors); this module says them to the model."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from bot.config import Ladder, Target
from bot.domain.handoffs import (
    ChannelUnavailable,
    DispatchFailed,
    HandoffAlreadyOpen,
    HandoffReleaseInput,
    HandoffRequestInput,
    HandoffRequestRefused,
    HandoffStarted,
    RouteClosed,
)
from bot.domain.hours import Closed
from bot.errors import error_body
from bot.store.vocabulary import ReleaseReason
from bot.tools import Tool, ToolContext, model_schema
from channels.base import ChannelConfig


class HandoffRequestTool(Tool):
    name = "handoff_request"
    input_model = HandoffRequestInput

    def available(self, ctx: ToolContext) -> bool:
        # A sibling agent serving a handoff hands back with handoff_release; it never
        # escalates again (no ping-pong between agents).
        return bool(ctx.handoffs.target_ids()) and ctx.conversation.serves_handoff_session_id is None

    def describe(self, ctx: ToolContext) -> str:
        lines = [f"- channel_id {a.id}: {a.label} ({a.kind}); {_availability(ctx, a.config)}" for a in ctx.channels.available()]
        lines += [f"- channel_id {ladder.id}: {ladder.route.label} (route: {_ladder_line(ctx, ladder)}); "
                  f"{_route_availability(ctx, ladder)}" for ladder in ctx.handoffs.offered()]
        return (
            "Hand this conversation to a person (or a sibling agent) through one of the configured channels. "
            "Use it when the user asks for a human, or when you cannot safely or correctly help.\n"
            "Available channels:\n" + "\n".join(lines) + "\n"
            "After a successful call the user's messages go straight to the recipient until the handoff is "
            "released; you will then read a system message starting with \"[Bot resumed —\" that carries any "
            "returned data. The desk itself tells the user who was asked (and later that you are back); never claim "
            "a person was notified unless the result says human_notified: true. "
            "Use expected_return to ask for structured data back."
        )

    def spec_key(self, ctx: ToolContext) -> Hashable:
        return (
            tuple((a.id, a.label, a.kind, _availability(ctx, a.config)) for a in ctx.channels.available()),
            tuple((ladder.id, _ladder_line(ctx, ladder), _route_availability(ctx, ladder)) for ladder in ctx.handoffs.offered()),
        )

    def input_schema(self, ctx: ToolContext) -> dict[str, Any]:
        schema = model_schema(self.input_model)
        schema["properties"]["channel_id"]["enum"] = ctx.handoffs.target_ids()
        return schema

    def validation_context(self, ctx: ToolContext) -> dict[str, Any]:
        return {"channel_ids": ctx.handoffs.target_ids()}

    async def run(self, ctx: ToolContext, args: HandoffRequestInput) -> dict[str, Any]:
        try:
            started = await ctx.handoffs.request(ctx.conversation, args, actor=ctx.actor)
        except HandoffRequestRefused as refused:
            return await self._refused(ctx, refused)
        return started_result(started)

    async def _refused(self, ctx: ToolContext, refused: HandoffRequestRefused) -> dict[str, Any]:
        """The error result. A refusal that stored nothing is recorded in the audit trail with
        the words the model read, like an invalid call."""
        if isinstance(refused, DispatchFailed):
            return dispatch_failed_result(refused)
        if isinstance(refused, ChannelUnavailable):
            hint = f"channel_id {refused.channel_id} is not an available handoff channel; use one of {refused.available}"
            event_id = await ctx.handoffs.record_rejection(ctx.conversation.id, actor=ctx.actor, error=refused.code, hint=hint)
            return error_body(refused.code, hint, handoff_event_id=str(event_id), field="channel_id")
        if isinstance(refused, RouteClosed):
            hint = (f"nobody on channel_id {refused.route_id} is available now"
                    + (f"; someone is back {refused.back}" if refused.back else "; no office hours ahead"))
            event_id = await ctx.handoffs.record_rejection(ctx.conversation.id, actor=ctx.actor, error=refused.code, hint=hint)
            return error_body(refused.code, hint, handoff_event_id=str(event_id), human_notified=False)
        if isinstance(refused, HandoffAlreadyOpen):
            hint = (
                f"this conversation already has an open handoff ({refused.active_id}); the subscriber's messages "
                "already go to a person until it is released"
            )
            event_id = await ctx.handoffs.record_rejection(
                ctx.conversation.id, actor=ctx.actor, error=refused.code, hint=hint, active_handoff_session_id=refused.active_id,
            )
            return error_body(refused.code, hint, handoff_event_id=str(event_id), active_handoff_session_id=refused.active_id)
        return refused.to_json()

    async def rejected(self, ctx: ToolContext, error: dict[str, Any]) -> dict[str, Any]:
        """Invalid calls start nothing, but are still part of the audit trail."""
        details = error["details"]
        event_id = await ctx.handoffs.record_rejection(
            ctx.conversation.id, actor=ctx.actor, error=error["error"], hint=details["hint"], fields=details.get("fields")
        )
        details["handoff_event_id"] = str(event_id)
        return error


def _availability(ctx: ToolContext, channel: ChannelConfig) -> str:
    """A channel's line in the description: its usual estimate, or, outside its office hours,
    that it is closed and when someone is back."""
    return _responds(channel.estimated_response, ctx.handoffs.hours.closed(channel))


def _ladder_line(ctx: ToolContext, ladder: Ladder) -> str:
    """`Support desk + Chat team, then On-call`: who the route asks, step by step, by the channels' labels."""
    def label(cid: int | Target) -> str:
        if isinstance(cid, Target):  # a person, a team, whoever is on call: as the config names them
            return {"person": "person", "team": "team", "oncall": "on-call"}[cid.kind] + f" {cid.id}"
        adapter = ctx.channels.get(cid)
        return adapter.label if adapter is not None else f"channel {cid}"
    return ", then ".join(" + ".join(label(cid) for cid in step.notify) for step in ladder.steps)


def _route_availability(ctx: ToolContext, ladder: Ladder) -> str:
    return _responds(ladder.route.estimated_response, ctx.handoffs.steps.closed_now(ladder, ctx.handoffs.clock.now()))


def _responds(usual: str, closed: Closed | None) -> str:
    if closed is None:
        return f"responds {usual}"
    back = closed.back_text
    return f"closed now; back {back}" if back else "closed now; no office hours ahead"


def started_result(started: HandoffStarted) -> dict[str, Any]:
    if started.route_id is not None:
        return {**_started(started), "channels_notified": list(started.notified), "channels_failed": list(started.failed),
                "channels_pending": list(started.pending), "people_offered": list(started.people)}
    return _started(started)


def _started(started: HandoffStarted) -> dict[str, Any]:
    return {
        "ok": True,
        "action": "handoff_session_started",
        "channel_kind": started.channel_kind,
        "channel_id": started.channel_id,
        "channel_label": started.channel_label,
        "channel_message_id": started.channel_message_id,
        "estimated_response": started.estimated_response,
        "handoff_event_id": str(started.handoff_event_id),
        "handoff_session_id": started.handoff_session_id,
        "human_notified": True,
    }


def dispatch_failed_result(failed: DispatchFailed) -> dict[str, Any]:
    """Nobody was notified: `human_notified: false`, so the model never claims otherwise."""
    event_id, sid = str(failed.handoff_event_id), failed.handoff_session_id
    if failed.cancelled:
        return error_body(
            "dispatch_failed", "the handoff was cancelled while it was being dispatched",
            handoff_event_id=event_id, handoff_session_id=sid, human_notified=False,
        )
    routed = {"channels_failed": list(failed.failed)} if failed.failed else {}
    return error_body(
        "dispatch_failed", f"could not notify {failed.channel_label}: {failed.reason}",
        handoff_event_id=event_id, handoff_session_id=sid, channel_id=failed.channel_id, attempts=failed.attempts,
        human_notified=False, **routed,
    )


class HandoffReleaseTool(Tool):
    name = "handoff_release"
    input_model = HandoffReleaseInput

    def available(self, ctx: ToolContext) -> bool:
        return ctx.conversation.serves_handoff_session_id is not None

    def describe(self, ctx: ToolContext) -> str:
        return (
            "Hand the conversation back to the agent that escalated it to you, with the outcome, a short note and "
            "the values for its expected return fields. Call it once you have done what was asked (or cannot)."
        )

    async def run(self, ctx: ToolContext, args: HandoffReleaseInput) -> dict[str, Any]:
        if args.handoff_session_id != ctx.conversation.serves_handoff_session_id:
            return error_body(
                "invalid_input",
                f"you can only release the handoff you serve ({ctx.conversation.serves_handoff_session_id})",
                field="handoff_session_id",
            )
        result = await ctx.handoffs.release(
            args.handoff_session_id, reason=ReleaseReason.AGENT, actor=f"agent:{ctx.conversation.id}",
            outcome=args.outcome, note=args.note, return_values=args.return_values,
        )
        session = result.session
        if not result.released:
            return error_body(
                "handoff_not_active",
                f"the handoff is already {session.state}"
                + (f" (released: {session.release_reason})" if session.release_reason else ""),
                handoff_session_id=session.id, state=session.state,
            )
        return {
            "ok": True,
            "action": "handoff_released",
            "handoff_session_id": session.id,
            "outcome": session.outcome,
            "returned": session.returned,
            "missing_required": session.missing_required,
        }
