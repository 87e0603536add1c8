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
- `DeskCalls`: one paused call's way through the desk, the same for every framework: the
  request made once (`ask_for_a_person` for a handoff or user action, the action's own tool
  for an approval), its id noted and saved before the wait, the outcome waited for.
- `once_per_call`: an approved tool of the agent's own runs at most once per call, restarts
  included (its start is saved before it runs; `started_before` is what the model reads).
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import TypeAdapter

from bot.clients import DeskClient
from bot.clients.models import ApprovalOutcome, HandoffOutcome, UserActionOutcome

DeskRequestKind = Literal["handoff", "user_action", "approval"]
# The desk tools a person answers later, and the field of their answer naming the desk's request.
DEFERRED_TOOLS: dict[str, tuple[DeskRequestKind, str]] = {
    "handoff_request": ("handoff", "handoff_session_id"),
    "request_user_action": ("user_action", "user_action_id"),
}

Stored = TypeVar("Stored")

# The header's rule (bot/web/idempotency.py): 1–255 printable ASCII characters.
_KEY_LIMIT = 255
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")  # no dots: never a hidden file or ".."


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

    def load(self, conversation_id: str, kind: type[Stored]) -> Stored | None:
        """The conversation's stored run (a dataclass of the integration), None when it has none."""
        data = self.read(conversation_id)
        return None if data is None else _adapter(kind).validate_json(data)

    def save(self, conversation_id: str, kind: type[Stored], run: Stored) -> None:
        self.write(conversation_id, _adapter(kind).dump_json(run))

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


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(kind: type[Stored]) -> TypeAdapter[Stored]:
    """One validator per stored kind, built on first use (building one costs milliseconds)."""
    adapter: TypeAdapter[Stored] | None = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    return adapter


@dataclass
class DeskRequest:
    """The desk's request made for one framework call: what kind, and its id at the desk."""

    kind: DeskRequestKind
    desk_id: str


class NothingToResume(Exception):
    """`resume()` on a conversation with no run waiting for the desk."""


class RunWaiting(Exception):
    """`run()` on a conversation whose last run still waits for the desk: `resume()` it (or
    call `run_or_resume()`), or its pending requests would be forgotten."""


async def ask_for_a_person(
    desk: DeskClient, conversation_id: str, tool: str, arguments: dict[str, Any], *, key: str,
) -> DeskRequest | dict[str, Any]:
    """Ask for a handoff or a user action (`tool`, one of DEFERRED_TOOLS) under the call's
    key: the desk's request, or its tool-level error for the model to read and correct (a
    summary too short, a channel that cannot deliver)."""
    kind, id_field = DEFERRED_TOOLS[tool]
    answer = await desk.call_tool(conversation_id, tool, arguments, idempotency_key=key)
    if not answer.get(id_field) or "error" in answer:
        return answer
    return DeskRequest(kind, str(answer[id_field]))


class DeskCalls:
    """The desk's side of one conversation's paused run: makes each call's request once
    (keyed by the call's id), notes the desk's id in `requests` and saves it before waiting,
    waits for the outcome and notes its status in `outcomes`."""

    def __init__(
        self, desk: DeskClient, framework: str, conversation_id: str, requests: dict[str, DeskRequest],
        outcomes: dict[str, str], save: Callable[[], None], wait_timeout: float | None = None,
    ) -> None:
        self.desk, self.framework, self.conversation_id = desk, framework, conversation_id
        self.requests, self.outcomes, self.save, self.wait_timeout = requests, outcomes, save, wait_timeout

    def key(self, call_id: str) -> str:
        return request_key(self.framework, self.conversation_id, call_id)

    async def result(self, call_id: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A handoff's or user action's outcome for the model, the request made first if it was not."""
        request = self.requests.get(call_id)
        if request is None:
            made = await ask_for_a_person(self.desk, self.conversation_id, tool, arguments, key=self.key(call_id))
            if not isinstance(made, DeskRequest):
                self.outcomes[call_id] = "refused"
                return made
            request = self.requests[call_id] = made
            self.save()
        if request.kind == "handoff":
            outcome: HandoffOutcome | UserActionOutcome = await self.desk.wait_handoff(request.desk_id, timeout=self.wait_timeout)
        else:
            outcome = await self.desk.wait_user_action(request.desk_id, timeout=self.wait_timeout)
        self.outcomes[call_id] = outcome.status
        return outcome_result(outcome)

    async def refusal(self, call_id: str, action: str, arguments: dict[str, Any]) -> str | None:
        """Ask the desk to approve one call of an agent-run action (`run: {by: agent}`) and wait
        for the decision: None when the framework may run it (approved, or the desk needs no
        approval for it: policy none, "always allow"), else what the model reads instead (a
        person's denial and reason, a timeout, or the desk's refusal to ask: fail closed)."""
        request = self.requests.get(call_id)
        if request is None:
            answer = await self.desk.call_tool(self.conversation_id, action, arguments, idempotency_key=self.key(call_id))
            if answer.get("status") == "APPROVED" and "error" not in answer:
                self.outcomes[call_id] = "approved"
                return None
            if answer.get("status") != "APPROVAL_PENDING" or not answer.get("approval_id"):
                self.outcomes[call_id] = "refused"
                return json.dumps({"status": "refused", "desk": answer, "detail": "The desk could not ask anyone to "
                                   "approve this call, so the action did not run."})
            request = self.requests[call_id] = DeskRequest("approval", str(answer["approval_id"]))
            self.save()
        outcome = await self.desk.wait_approval(request.desk_id, timeout=self.wait_timeout)
        self.outcomes[call_id] = outcome.status
        return None if outcome.status == "approved" else approval_refusal(outcome)


def once_per_call(started: list[str], save: Callable[[], None]) -> Callable[[str], bool]:
    """`first_start(call_id)` for a paused run's `started` list: True the first time a call's
    tool is about to run (noted and saved before it runs), False ever after, restarts included."""
    def first_start(call_id: str) -> bool:
        if call_id in started:
            return False
        started.append(call_id)
        save()
        return True

    return first_start


def started_before(tool: str) -> dict[str, str]:
    """What the model reads instead of a second run of a tool that started before a restart."""
    return {"status": "unknown", "detail": f"{tool} started before a restart and may or may not have finished; "
            "check its effect before trying again"}


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
