"""Python callables declared as actions in the approval tests (`run: {callable: …}`)."""

from __future__ import annotations

from typing import Any

from channels.base import ApprovalBrief

CALLS: list[dict[str, Any]] = []


async def refund(arguments: dict[str, Any]) -> dict[str, Any]:
    CALLS.append(arguments)
    return {"refund_id": f"rf_{len(CALLS)}", "amount": arguments.get("amount")}


def broken(arguments: dict[str, Any]) -> None:
    CALLS.append(arguments)
    raise RuntimeError("payment provider said no")


REFUND_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number", "minimum": 0},
                                                  "note": {"type": "string"}},
                 "required": ["order_id", "amount"], "additionalProperties": False}


def refund_action(approval_channel: int, **overrides: Any) -> dict[str, Any]:
    """`refund_order` as the tests declare it, asking on `approval_channel` and running `refund` above."""
    return {"id": "refund_order", "description": "Refund an order to the original payment method", "risk": "high",
            "policy": "ask", "approval_channels": [approval_channel], "input_schema": REFUND_SCHEMA,
            "run": {"callable": "tests.approval_actions:refund"}, **overrides}


# What a prompt says when two people must approve, as each provider shows it (escaped per provider).
TWO_PEOPLE = "Needs two people: two different people must approve; one denial denies."


def refund_brief(approval_id: str, **overrides: Any) -> ApprovalBrief:
    """The brief of a `refund_order` prompt, for driving an adapter without a desk."""
    return ApprovalBrief.model_validate({
        "approval_id": approval_id, "action_id": "refund_order", "description": "Refund an order", "risk": "high",
        "arguments": {"order_id": "1234", "amount": 25}, "conversation_id": "c_1", "decision_url": "http://desk.test/a/t",
        "allow_always": False, "expires_at": "2026-03-14T10:05:00", **overrides,
    })
