"""Every call of the desk's public API, once: each function yields the request(s) it needs
and returns the typed answer (bot/clients/protocol.py drives them). `DeskClient` and
`SyncDeskClient` expose each as a method of the same name and signature.

Tool results stay JSON objects (`call_tool`): they go to the model as the desk wrote them,
and a tool-level error is such a result (`{"error", "details": {"hint"}}`), not an exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel

from bot.clients.errors import DeskApiError, WaitTimedOut
from bot.clients.models import (
    Approval,
    ApprovalOutcome,
    Handoff,
    HandoffEvent,
    HandoffOutcome,
    Message,
    Person,
    PostedMessage,
    Released,
    UserAction,
    UserActionAnswer,
    UserActionOutcome,
)
from bot.clients.protocol import Call, Operation, Pause, change, desk_unreachable, get, seg

M = TypeVar("M", bound=BaseModel)
ToolFormat = Literal["plain", "openai", "anthropic"]
# The longest the desk holds a long-poll (GET …?wait=); a longer wait is several polls.
LONGEST_POLL = 25.0


# --------------------------------------------------------------------------- conversations

def create_conversation(
    *, name: str | None = None, email: str | None = None, external_id: str | None = None,
    serves_handoff_session_id: str | None = None, background: bool = False, idempotency_key: str | None = None,
) -> Operation[str]:
    """A new conversation (its id). `background`: run as a background task, whose user
    actions go to the orchestrator's webhook; `serves_handoff_session_id`: a sibling agent's
    conversation, bound to the handoff it serves."""
    subscriber = {k: v for k, v in {"name": name, "email": email, "external_id": external_id}.items() if v}
    body: dict[str, Any] = {"subscriber": subscriber} if subscriber else {}
    if serves_handoff_session_id:
        body["serves_handoff_session_id"] = serves_handoff_session_id
    if background:
        body["background"] = True
    created = yield change("/api/conversations", body, idempotency_key)
    return str(created["conversation_id"])


def say(conversation_id: str, text: str, *, idempotency_key: str | None = None) -> Operation[PostedMessage]:
    """A subscriber message: routed to the desk's agent, or to the person during a handoff."""
    said = yield change(f"/api/conversations/{seg(conversation_id)}/messages", {"text": text}, idempotency_key)
    return PostedMessage.model_validate(said)


def messages(conversation_id: str, *, after: int = 0, wait: float | None = None,
             limit: int | None = None) -> Operation[list[Message]]:
    """Messages after id `after`, oldest first; `wait`: long-poll up to that many seconds
    (at most 30) for one to arrive."""
    answer = yield get(f"/api/conversations/{seg(conversation_id)}/messages",
                       {"after": after, "wait": wait, "limit": limit}, hold=wait or 0.0)
    return [Message.model_validate(m) for m in answer["messages"]]


# --------------------------------------------------------------------------- tools

def tools(conversation_id: str, *, format: ToolFormat = "plain") -> Operation[list[dict[str, Any]]]:
    """The tools as the model should see them now, in the framework's format."""
    answer = yield get(f"/api/conversations/{seg(conversation_id)}/tools", {"format": format})
    return list(answer["tools"])


def call_tool(conversation_id: str, name: str, arguments: dict[str, Any], *,
              idempotency_key: str | None = None) -> Operation[dict[str, Any]]:
    """Invoke a tool as the agent; its result as the desk wrote it (for the model)."""
    result = yield change(f"/api/conversations/{seg(conversation_id)}/tools/{seg(name)}", arguments, idempotency_key)
    return result


# --------------------------------------------------------------------------- handoffs

def handoff(handoff_session_id: str, *, wait: float | None = None) -> Operation[Handoff]:
    """A handoff as it stands; `wait`: long-poll up to that many seconds (at most 30) for it to end."""
    answer = yield _read_handoff(handoff_session_id, wait)
    return Handoff.model_validate(answer)


def handoffs(*, state: Literal["open", "active", "dispatching", "released", "failed"] = "open",
             limit: int | None = None) -> Operation[list[Handoff]]:
    answer = yield get("/api/handoffs", {"state": state, "limit": limit})
    return [Handoff.model_validate(h) for h in answer["handoffs"]]


def handoff_events(handoff_session_id: str) -> Operation[list[HandoffEvent]]:
    """The handoff's audit trail, oldest first."""
    answer = yield get(f"/api/handoffs/{seg(handoff_session_id)}/events")
    return [HandoffEvent.model_validate(e) for e in answer["events"]]


def release(handoff_session_id: str, *, outcome: Literal["resolved", "unresolved", "needs_followup"] | None = None,
            note: str | None = None, return_values: dict[str, Any] | None = None,
            idempotency_key: str | None = None) -> Operation[Released]:
    """End an active handoff as the owner (or a person, with their token as the client's key)."""
    body = {k: v for k, v in {"outcome": outcome, "note": note, "return_values": return_values}.items() if v is not None}
    answer = yield change(f"/api/handoffs/{seg(handoff_session_id)}/release", body, idempotency_key)
    return Released.model_validate(answer)


def wait_handoff(handoff_session_id: str, *, timeout: float | None = None) -> Operation[HandoffOutcome]:
    """Return once the handoff ended (released, failed, timed out); `timeout` (seconds,
    None: as long as it takes) raises `WaitTimedOut` while it is still open."""
    ended = yield from _await(lambda wait: _read_handoff(handoff_session_id, wait), Handoff, lambda h: h.ended,
                              ("handoff", handoff_session_id), timeout)
    return HandoffOutcome.of(ended)


def _read_handoff(handoff_session_id: str, wait: float | None) -> Call:
    return get(f"/api/handoffs/{seg(handoff_session_id)}", {"wait": wait}, hold=wait or 0.0)


# --------------------------------------------------------------------------- approvals

def approval(approval_id: str, *, wait: float | None = None) -> Operation[Approval]:
    """An approval as it stands; `wait`: long-poll up to that many seconds for it to settle."""
    answer = yield _read_approval(approval_id, wait)
    return Approval.model_validate(answer)


def approvals(*, state: Literal["pending", "approved", "denied", "expired", "unrouted", "cleared"] | None = None,
              limit: int | None = None) -> Operation[list[Approval]]:
    answer = yield get("/api/approvals", {"state": state, "limit": limit})
    return [Approval.model_validate(a) for a in answer["approvals"]]


def decide_approval(
    approval_id: str, decision: Literal["approve", "deny"], *, reason: str | None = None, always_allow: bool = False,
    decided_by: str | None = None, token: str | None = None, idempotency_key: str | None = None,
) -> Operation[Approval]:
    """A person's decision. The desk takes it only from a person (`token`: their personal API
    token, `hdp_…`, or the owner token with `decided_by`), never from the agent's key on a
    desk that has people or an owner token."""
    body: dict[str, Any] = {"decision": decision, **({"reason": reason} if reason else {}),
                            **({"always_allow": True} if always_allow else {}),
                            **({"decided_by": decided_by} if decided_by else {})}
    answer = yield change(f"/api/approvals/{seg(approval_id)}/decision", body, idempotency_key, token=token)
    return Approval.model_validate(answer)


def wait_approval(approval_id: str, *, timeout: float | None = None) -> Operation[ApprovalOutcome]:
    """Return once the approval is settled: approved (and run, or handed to the agent to
    run), denied, or timed out; `timeout` raises `WaitTimedOut` while it is still pending."""
    settled = yield from _await(lambda wait: _read_approval(approval_id, wait), Approval, lambda a: a.settled,
                                ("approval", approval_id), timeout)
    return ApprovalOutcome.of(settled)


def _read_approval(approval_id: str, wait: float | None) -> Call:
    return get(f"/api/approvals/{seg(approval_id)}", {"wait": wait}, hold=wait or 0.0)


# --------------------------------------------------------------------------- user actions

def user_action(user_action_id: str, *, wait: float | None = None) -> Operation[UserAction]:
    """A user action as it stands; `wait`: long-poll up to that many seconds for it to end."""
    answer = yield _read_user_action(user_action_id, wait)
    return UserAction.model_validate(answer)


def user_action_step(user_action_id: str, move: Literal["next", "previous"], *,
                     idempotency_key: str | None = None) -> Operation[UserAction]:
    """Show the subscriber the next (or previous) of the guided steps."""
    answer = yield change(f"/api/user_actions/{seg(user_action_id)}/step", {"move": move}, idempotency_key)
    return UserAction.model_validate(answer)


def respond_user_action(user_action_id: str, outcome: Literal["done", "cancelled"], *,
                        idempotency_key: str | None = None) -> Operation[UserActionAnswer]:
    """The subscriber's Done / Cancel, reported by the app the subscriber uses."""
    answer = yield change(f"/api/user_actions/{seg(user_action_id)}/response", {"outcome": outcome}, idempotency_key)
    return UserActionAnswer.model_validate(answer)


def wait_user_action(user_action_id: str, *, timeout: float | None = None) -> Operation[UserActionOutcome]:
    """Return once the user action ended (done, cancelled, timed out, failed); `timeout`
    raises `WaitTimedOut` while it is still pending."""
    ended = yield from _await(lambda wait: _read_user_action(user_action_id, wait), UserAction,
                              lambda a: a.state != "pending", ("user action", user_action_id), timeout)
    return UserActionOutcome.of(ended)


def _read_user_action(user_action_id: str, wait: float | None) -> Call:
    return get(f"/api/user_actions/{seg(user_action_id)}", {"wait": wait}, hold=wait or 0.0)


# --------------------------------------------------------------------------- people

def people() -> Operation[list[Person]]:
    """Everyone in the directory (admins: a personal token of an admin, or the owner token)."""
    answer = yield get("/api/people")
    return [Person.model_validate(p) for p in answer["people"]]


def person(person_id: str) -> Operation[Person]:
    answer = yield get(f"/api/people/{seg(person_id)}")
    return Person.model_validate(answer)


def set_availability(person_id: str, *, away: bool, note: str | None = None, until: datetime | None = None,
                     idempotency_key: str | None = None) -> Operation[Person]:
    """Away (with a note, until a moment ahead: timezone-aware) or available again."""
    body: dict[str, Any] = {"away": away, **({"note": note} if note is not None else {}),
                            **({"until": until.isoformat()} if until is not None else {})}
    answer = yield change(f"/api/people/{seg(person_id)}/availability", body, idempotency_key)
    return Person.model_validate(answer)


# --------------------------------------------------------------------------- waiting

def _await(read: Callable[[float], Call], model: type[M], done: Callable[[M], bool], what: tuple[str, str],
           timeout: float | None) -> Operation[M]:
    """Long-poll `read(wait)` until `done`, at most `timeout` seconds (None: no limit). Each
    poll is held by the desk up to LONGEST_POLL seconds and ends early when the thing ends, so
    an outcome arrives at once and a wait of hours costs one request every 25 s. While the
    desk is down or restarting (its state is in its database, so nothing is lost), the wait
    goes on, trying again after the pauses of the client's retry policy (growing to
    `max_backoff`)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    failures = 0
    while True:
        left = LONGEST_POLL if deadline is None else max(0.0, min(LONGEST_POLL, deadline - time.monotonic()))
        try:
            current = model.model_validate((yield read(left)))
        except (httpx.TransportError, DeskApiError) as error:
            if not desk_unreachable(error) or (deadline is not None and time.monotonic() >= deadline):
                raise
            yield Pause(failures)
            failures += 1
            continue
        failures = 0
        if done(current):
            return current
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimedOut(what[0], what[1], timeout or 0.0)
