"""`request_user_action` and `response_user_action`, as the model sees them: the descriptions,
the statuses (`HUMAN_HANDOFF_REQUESTED`, `USER_ACTION_REQUESTED`, `done`, the `HANDOFF_*`
errors) and their hints. The API's answer to a user action is the same result
(`outcome_result`), so a client and the model read one shape."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from bot.domain.user_actions import (
    RequestUserActionInput,
    ResponseUserActionInput,
    UserActionAlreadyPending,
    UserActionOutcome,
    UserActionRequested,
    UserActions,
)
from bot.errors import error_body
from bot.tools import InvalidToolInput, Tool, ToolContext, errors_result, model_schema


class _UserActionTool(Tool):
    """Both tools: the user actions service, and offered only in a subscriber's own
    conversation (a sibling agent serving a handoff has no user to ask)."""

    def __init__(self, user_actions: UserActions) -> None:
        self.user_actions = user_actions

    def available(self, ctx: ToolContext) -> bool:
        return ctx.conversation.serves_handoff_session_id is None


class RequestUserActionTool(_UserActionTool):
    name = "request_user_action"
    input_model = RequestUserActionInput

    def describe(self, ctx: ToolContext) -> str:
        checks = "".join(f"\n- {e.id}: {e.description}" for e in self.user_actions.expectations.values())
        return (
            "Ask the user to do a step only they can do on their own device: log in, enter a one-time code, solve a "
            "captcha, confirm a permission or a redirect, or tell you what they see when you are stuck. Never ask "
            "for a password or code in the chat, and never pretend to do the step yourself. Do not use this as the "
            "first answer to an error you can recover from (retry, another approach, or asking a question first). "
            "The call returns HUMAN_HANDOFF_REQUESTED and ends your turn; the user sees the instruction with Done / "
            "Cancel. The outcome arrives as a system message starting with \"[User action —\": then look at the "
            "current state before acting, and do not repeat the request automatically."
            + (f"\nName an expectation to have it verified after the user says done:{checks}" if checks else "")
        )

    def spec_key(self, ctx: ToolContext) -> Hashable:
        return tuple((e.id, e.description) for e in self.user_actions.expectations.values())

    def input_schema(self, ctx: ToolContext) -> dict[str, Any]:
        schema = model_schema(self.input_model)
        if self.user_actions.expectations:
            schema["properties"]["expectation"]["enum"] = list(self.user_actions.expectations)
        else:
            schema["properties"].pop("expectation", None)
        return schema

    def parse(self, ctx: ToolContext, raw: dict[str, Any]) -> RequestUserActionInput:
        args: RequestUserActionInput = super().parse(ctx, raw)
        if args.expectation is not None and args.expectation not in self.user_actions.expectations:
            known = ", ".join(self.user_actions.expectations) or "none are configured"
            raise InvalidToolInput(errors_result([{"loc": ("expectation",), "type": "enum",
                                                   "msg": f"must be one of the configured expectations ({known})"}]))
        return args

    async def run(self, ctx: ToolContext, args: RequestUserActionInput) -> dict[str, Any]:
        try:
            requested = await self.user_actions.request(ctx.conversation, args, actor=ctx.actor)
        except UserActionAlreadyPending as pending:
            hint = (f"the same request is already pending ({pending.pending_id}); wait for the subscriber" if pending.identical
                    else f"another user action is pending ({pending.pending_id}); wait for it to end before asking for more")
            return error_body(pending.code, hint, user_action_id=pending.pending_id)
        return requested_result(requested)


class ResponseUserActionTool(_UserActionTool):
    name = "response_user_action"
    input_model = ResponseUserActionInput

    def describe(self, ctx: ToolContext) -> str:
        return (
            "Report how a user action you requested ended, when the user tells you (done, or they give up). A "
            "declared expectation is then verified: the result is {\"status\": \"done\"} or an error "
            "HANDOFF_FAILED / HANDOFF_CANCELLED / HANDOFF_TIMEOUT. Look at the current state before acting either way."
        )

    async def run(self, ctx: ToolContext, args: ResponseUserActionInput) -> dict[str, Any]:
        # an id of another conversation is "not found", like an unknown one
        return outcome_result(await self.user_actions.respond(
            args.user_action_id, args.outcome, via="agent", conversation_id=ctx.conversation.id, tell_agent=False,
        ))


def requested_result(requested: UserActionRequested) -> dict[str, Any]:
    """The turn ends; a background conversation's request went to the orchestrator, not to a person in the chat."""
    action = requested.action
    return {
        "status": "USER_ACTION_REQUESTED" if action.background else "HUMAN_HANDOFF_REQUESTED",
        "user_action_id": action.id, "reason": action.reason, "details": action.details,
        "suggested_action": action.suggested_action, "expires_at": action.deadline.isoformat(),
    }


OUTCOME_ERRORS = {"cancelled": "HANDOFF_CANCELLED", "timeout": "HANDOFF_TIMEOUT", "failed": "HANDOFF_FAILED"}


def outcome_result(outcome: UserActionOutcome) -> dict[str, Any]:
    """`{"status": "done", …}`, or the error of how it ended, each telling the model to look
    before it acts; `already` when the answer came after the end."""
    action = outcome.action
    if action.state == "done":
        result: dict[str, Any] = {"status": "done", "user_action_id": action.id, "verified": action.expectation is not None}
    else:
        hint = {
            "cancelled": "the subscriber cancelled; the page or account may still have changed — look before acting",
            "timeout": "no answer in time; the subscriber may still be in the middle of it — look before acting",
            "failed": f"the expected result was not observed ({action.observed or 'no detail'}); look before acting",
        }.get(action.state, f"the user action is {action.state}")
        result = error_body(OUTCOME_ERRORS.get(action.state, "user_action_not_pending"), hint, user_action_id=action.id)
    if outcome.already:
        result["already"] = True
    return result
