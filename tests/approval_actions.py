"""Python callables declared as actions in the approval tests (`run: {callable: …}`)."""

from __future__ import annotations

from typing import Any

CALLS: list[dict[str, Any]] = []


async def refund(arguments: dict[str, Any]) -> dict[str, Any]:
    CALLS.append(arguments)
    return {"refund_id": f"rf_{len(CALLS)}", "amount": arguments.get("amount")}


def broken(arguments: dict[str, Any]) -> None:
    CALLS.append(arguments)
    raise RuntimeError("payment provider said no")
