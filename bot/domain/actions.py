"""Running a declared action (config `actions:`) with the arguments a person approved.

Two ways, both declared by the owner: POST to their endpoint, signed exactly like the
webhook agent's turns (`X-Handoff-Signature: v1=HMAC(secret, "<timestamp>." + body)`, with
the approval id as `X-Handoff-Delivery` so a repeat can be recognised), or a Python callable
(sync or async) imported by path.

`run_action` runs one inline, for a caller that needs the answer now: an action that needs no
approval (inside the agent's tool call), an expectation check (it decides how a user action
ended), and a callable after an approval. Nothing here retries: an action may not be
idempotent, so a timeout is reported as "may or may not have run" and the agent is told to
check. An approved HTTP action does not run here: its call (`run_body`) goes through the
outbox, stored with the decision and retried with the same delivery id (bot/domain/approvals.py).
"""

from __future__ import annotations

import importlib
import inspect
import json
from typing import Any

import httpx

from bot.config import CallableActionRun, HttpActionRun
from bot.runtime.signed_http import answer_of, as_object, post_signed


class ActionFailed(Exception):
    """The action did not complete. The message is what the agent may read; `detail` (the
    exception text, the endpoint's answer) may carry anything the owner's code printed, so
    it goes to the audit trail for the owner, never into the model's context."""

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


async def run_action(run: HttpActionRun | CallableActionRun, *, action_id: str, approval_id: str | None,
                     conversation_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run it once; its result as a JSON object (other JSON values come as {"value": …}).
    `approval_id` (or a user action id) is sent so the endpoint can recognise a repeat."""
    if isinstance(run, CallableActionRun):
        return await _call(run, arguments)
    return await _post(run, action_id, approval_id, conversation_id, arguments)


async def _call(run: CallableActionRun, arguments: dict[str, Any]) -> dict[str, Any]:
    module_name, _, attribute = run.callable.partition(":")
    function = getattr(importlib.import_module(module_name), attribute)
    try:
        result = function(dict(arguments))
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:
        raise ActionFailed(f"{run.callable} raised {type(exc).__name__}", detail=str(exc)[:2000]) from exc
    return as_object(result)


def run_body(action_id: str, approval_id: str | None, conversation_id: str, arguments: dict[str, Any]) -> str:
    """The JSON an HTTP action is POSTed, inline or through the outbox."""
    return json.dumps({
        "action": action_id, "approval_id": approval_id, "conversation_id": conversation_id, "arguments": arguments,
    }, separators=(",", ":"))


async def _post(run: HttpActionRun, action_id: str, approval_id: str | None, conversation_id: str,
                arguments: dict[str, Any]) -> dict[str, Any]:
    body = run_body(action_id, approval_id, conversation_id, arguments).encode()
    try:
        async with httpx.AsyncClient(timeout=run.timeout.total_seconds()) as client:
            response = await post_signed(client, run.url, body, secret=run.secret.get_secret_value(), delivery=approval_id)
    except httpx.TimeoutException:
        raise ActionFailed(f"{run.url} did not answer within {run.timeout.total_seconds():g}s; "
                           "the action may or may not have run") from None
    except httpx.HTTPError as exc:
        raise ActionFailed(f"could not reach {run.url} ({type(exc).__name__}); the action did not run") from None
    if response.status_code >= 300:
        raise ActionFailed(f"{run.url} answered {response.status_code}", detail=response.text[:2000])
    return answer_of(response)
