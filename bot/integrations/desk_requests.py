"""What the framework integrations share: the key of each desk request, the file a paused
run is kept in, and what the model reads of the desk's outcomes.

Why each exists:

- `request_key`: a framework re-runs a paused call after a restart, and the desk must not
  get a second handoff or approval for it. The key is derived from the framework's durable
  id of that call (PydanticAI's `tool_call_id`, the Agents SDK's `call_id`) and the desk
  conversation, so the desk answers the re-run with the first answer (its keys last
  `api.idempotency_ttl`; the integrations also keep the desk's id in the run's own state).
- `RunFiles`: one JSON file per desk conversation, replaced atomically (written beside it,
  flushed, renamed), so a process killed mid-write leaves the previous state, never half of one.
- `outcome_result` / `approval_refusal`: the model reads a typed result. A handoff or user
  action that timed out says `timed_out`; an approval nobody decided in time is refused as
  `timed_out`, never as a person's denial, and a denial carries the person's reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from bot.clients import DeskClient
from bot.clients.models import ApprovalOutcome, HandoffOutcome, UserActionOutcome

# The header's rule (bot/web/idempotency.py): 1–255 printable ASCII characters.
_KEY_LIMIT = 255
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def request_key(framework: str, conversation_id: str, call_id: str) -> str:
    """The `Idempotency-Key` of the desk request made for one framework call: the same call
    (after any restart) always gets the same key, two calls never share one."""
    key = f"{framework}:{conversation_id}:{call_id}"
    if len(key) <= _KEY_LIMIT and key.isascii() and key.isprintable():
        return key
    return f"{framework}:{hashlib.sha256(key.encode()).hexdigest()}"


class RunFiles:
    """A directory holding one file per desk conversation: a paused run's state."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, conversation_id: str) -> Path:
        readable = _SAFE_NAME.sub("_", conversation_id)[:80]
        digest = hashlib.sha256(conversation_id.encode()).hexdigest()[:12]
        return self.directory / f"{readable}-{digest}.json"

    def read(self, conversation_id: str) -> bytes | None:
        try:
            return self.path(conversation_id).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, conversation_id: str, data: bytes) -> None:
        """Replace the conversation's file at once: readers see the old state or the new one."""
        target = self.path(conversation_id)
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


class ApprovalNotPending(Exception):
    """The desk answered a gated call with something other than a pending approval (no
    approval channel, arguments it refused, …): the call is refused, fail closed, with the
    desk's answer for the model."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(json.dumps(answer))
        self.answer = answer


async def ask_approval(desk: DeskClient, conversation_id: str, action: str, arguments: dict[str, Any], *, key: str) -> str:
    """Ask the desk to approve one call of an agent-run action; the approval's id. The desk
    runs nothing: the framework runs its own tool on approval."""
    answer = await desk.call_tool(conversation_id, action, arguments, idempotency_key=key)
    if answer.get("status") == "APPROVAL_PENDING" and answer.get("approval_id"):
        return str(answer["approval_id"])
    raise ApprovalNotPending(answer)


def outcome_result(outcome: HandoffOutcome | UserActionOutcome) -> dict[str, Any]:
    """A handoff's or user action's outcome as the tool result the model reads."""
    return outcome.model_dump(mode="json", exclude_none=True)


def approval_refusal(outcome: ApprovalOutcome) -> str:
    """What the model reads of an approval that was not given: a person's denial with their
    reason, or a timeout that nobody decided (which is not a denial by anyone)."""
    if outcome.status == "timed_out":
        return json.dumps({"status": "timed_out", "detail": "Nobody decided before the approval's deadline, so the action "
                           "did not run. No person refused it: you may tell the user it is still undecided."})
    return json.dumps({"status": "denied", "reason": outcome.reason, "decided_by": outcome.decided_by,
                       "detail": "A person denied this call, so the action did not run; do not try to reach the same "
                                 "result another way."})


def not_pending_refusal(refused: ApprovalNotPending) -> str:
    """What the model reads when the desk would not even ask (fail closed)."""
    return json.dumps({"status": "refused", "desk": refused.answer, "detail": "The desk could not ask anyone to approve "
                       "this call, so the action did not run."})
