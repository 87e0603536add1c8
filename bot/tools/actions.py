"""Declared actions (config `actions:`) as tools: the owner's JSON Schema is what the model
sees and what every call is validated against; gated ones go through approvals, whose
answers (`ApprovalPending`, `ActionRan`, `RunByAgent`, `ApprovalUnrouted`, `ActionRunFailed`)
are worded for the model here."""

from __future__ import annotations

import re
from typing import Any

from jsonschema import Draft202012Validator

from bot.config import ActionConfig
from bot.domain.approvals import ActionRan, ActionRunFailed, ApprovalPending, Approvals, ApprovalUnrouted, RunByAgent
from bot.errors import error_body
from bot.tools import InvalidToolInput, Tool, ToolContext, errors_result

_GATE = (
    "\n\nA person must approve each call{always}: the call returns status APPROVAL_PENDING and your turn ends; tell "
    "the user you are waiting for approval. The outcome arrives later as a system message starting with "
    "\"[Approval —\". A denial, no answer in time or no available approver all come back as PERMISSION_DENIED: "
    "then the action did not run; never say it did, and do not reach the same result another way."
)


class ActionTool(Tool):
    """One declared action. The description says whether a gate exists; saying so is not
    a grant: the gate is enforced when the call arrives."""

    def __init__(self, action: ActionConfig, approvals: Approvals) -> None:
        self.action, self.approvals = action, approvals
        self.name = action.id
        self._validator = Draft202012Validator(action.input_schema)

    def available(self, ctx: ToolContext) -> bool:
        # A sibling agent serving someone else's handoff does that job, not the owner's actions.
        return ctx.conversation.serves_handoff_session_id is None

    def describe(self, ctx: ToolContext) -> str:
        text = f"{self.action.description} (risk: {self.action.risk})."
        if self.action.policy == "ask":
            return text + _GATE.format(always=" unless they chose to always allow it in this conversation")
        if self.action.policy == "ask_always":
            return text + _GATE.format(always=", every time")
        return text

    def input_schema(self, ctx: ToolContext) -> dict[str, Any]:
        return self.action.input_schema

    def parse(self, ctx: ToolContext, raw: dict[str, Any]) -> dict[str, Any]:
        problems = sorted(self._validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
        if problems:
            raise InvalidToolInput(errors_result([_as_field_error(e) for e in problems]))
        return raw

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        try:
            outcome = await self.approvals.request(ctx.conversation, self.action, args, actor=ctx.actor)
        except ApprovalUnrouted as unrouted:
            return error_body(
                "PERMISSION_DENIED", "no approval channel is available to ask a person, so the action did not run "
                "(fail closed); tell the user it cannot be done right now", approval_id=unrouted.approval_id,
            )
        except ActionRunFailed as failed:
            return error_body("action_failed", failed.reason)
        if isinstance(outcome, ActionRan):
            return ran_result(outcome)
        if isinstance(outcome, RunByAgent):
            return run_by_agent_result(outcome)
        return pending_result(outcome)


def ran_result(ran: ActionRan) -> dict[str, Any]:
    return {"ok": True, "status": "done", "action": ran.action_id, "result": ran.result}


def run_by_agent_result(allowed: RunByAgent) -> dict[str, Any]:
    """No approval was needed and the run is the agent's own: it runs the action now."""
    return {
        "ok": True, "status": "APPROVED", "action": allowed.action_id, "run_by": "agent", "why": allowed.why,
        "hint": "Allowed without asking anyone: run the action yourself now, once, with these arguments. The desk ran nothing.",
    }


def pending_result(pending: ApprovalPending) -> dict[str, Any]:
    """The model's turn ends: it tells the user it waits, and reads the outcome later."""
    return {
        "status": "APPROVAL_PENDING", "approval_id": pending.approval_id, "action": pending.action_id,
        "expires_at": pending.expires_at.isoformat(),
        "hint": "A person has been asked to approve this exact call. Your turn ends here: tell the user you are "
                "waiting for approval. The outcome arrives as a system message starting with \"[Approval —\".",
    }


def _as_field_error(error: Any) -> dict[str, Any]:
    """A jsonschema error in the shape of pydantic's, so both read the same to the model."""
    path = tuple(error.absolute_path)
    if error.validator == "required":
        missing = re.match(r"'(.+)' is a required property", error.message)
        return {"loc": (*path, missing.group(1) if missing else "?"), "msg": "is required", "type": "missing"}
    if error.validator == "additionalProperties":
        extra = re.findall(r"'([^']+)'", error.message)
        return {"loc": (*path, extra[0] if extra else "?"), "msg": "is not a known field", "type": "extra_forbidden"}
    return {"loc": path, "msg": error.message, "type": str(error.validator)}
