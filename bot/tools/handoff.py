"""`handoff_request` and `handoff_release`, as the model sees them."""

from __future__ import annotations

from typing import Any

from bot.domain.handoffs import HandoffReleaseInput, HandoffRequestInput
from bot.errors import error_body
from bot.store.vocabulary import ReleaseReason
from bot.tools import Tool, ToolContext, model_schema


class HandoffRequestTool(Tool):
    name = "handoff_request"
    input_model = HandoffRequestInput

    def available(self, ctx: ToolContext) -> bool:
        # A sibling agent serving a handoff hands back with handoff_release; it never
        # escalates again (no ping-pong between agents).
        return bool(ctx.channels.available()) and ctx.conversation.serves_handoff_session_id is None

    def describe(self, ctx: ToolContext) -> str:
        lines = [
            f"- channel_id {a.id}: {a.label} ({a.kind}); responds {a.config.estimated_response}"
            for a in ctx.channels.available()
        ]
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

    def input_schema(self, ctx: ToolContext) -> dict[str, Any]:
        schema = model_schema(self.input_model)
        schema["properties"]["channel_id"]["enum"] = [a.id for a in ctx.channels.available()]
        return schema

    def validation_context(self, ctx: ToolContext) -> dict[str, Any]:
        return {"channel_ids": [a.id for a in ctx.channels.available()]}

    async def run(self, ctx: ToolContext, args: HandoffRequestInput) -> dict[str, Any]:
        return await ctx.handoffs.request(ctx.conversation.id, args, actor=ctx.actor)

    async def rejected(self, ctx: ToolContext, error: dict[str, Any]) -> dict[str, Any]:
        """Invalid calls start nothing, but are still part of the audit trail."""
        details = error["details"]
        event_id = await ctx.handoffs.record_rejection(
            ctx.conversation.id, actor=ctx.actor, error=error["error"], hint=details["hint"], fields=details.get("fields")
        )
        details["handoff_event_id"] = str(event_id)
        return error


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
