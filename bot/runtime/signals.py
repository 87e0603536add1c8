"""After-commit signals: the one way a change tells the rest of the desk that it happened.

A service records a signal while it writes (`record(session.info, signal)`), inside its
transaction; `bot/store/db.py` hands the recorded signals to `Signals.publish` once that
transaction has committed, and drops them when it rolls back. So a page is never woken,
a timer never armed and an agent turn never started for a write that did not happen.

Two kinds of signal travel this way:
- `Changed(conversation_id)`: the conversation has something new to read. It wakes the
  long-polls parked on the `ConversationBus`, once per conversation however many writes
  of one transaction recorded it.
- any other frozen dataclass (a handoff was activated or released, an approval settled):
  the handlers subscribed to its type with `Signals.on` run, in subscription order.

Handlers run right after the commit, before the writer's call returns, and must not block:
they arm a timer or spawn background work. One that raises is logged and skipped, so it can
neither undo the committed change nor keep the other handlers from running.

A savepoint (`begin_nested`) that rolls back inside a transaction that then commits keeps
what it recorded: record a signal outside savepoints, beside the change it reports.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from bot.runtime.bus import ConversationBus

log = structlog.get_logger(__name__)

PENDING_SIGNALS = "handoff_desk_pending_signals"  # the key in a session's `info`
S = TypeVar("S")


@dataclass(frozen=True)
class Changed:
    """The conversation has something new to read (a message, a state its pages show)."""

    conversation_id: str


def record(info: MutableMapping[Any, Any], signal: object) -> None:
    """Keep `signal` with the transaction whose session `info` this is, to be published
    once it commits."""
    info.setdefault(PENDING_SIGNALS, []).append(signal)


def recorded(info: MutableMapping[Any, Any]) -> list[object]:
    """The signals recorded in this transaction so far, left in place (for work that runs
    in the transaction and names what it changed)."""
    pending: list[object] = info.get(PENDING_SIGNALS, [])
    return pending


def take(info: MutableMapping[Any, Any]) -> list[object]:
    """The signals recorded in this transaction, removed from it."""
    pending: list[object] = info.pop(PENDING_SIGNALS, [])
    return pending


class Signals:
    """Who hears what after a commit: the bus for `Changed`, subscribed handlers for the rest."""

    def __init__(self, bus: ConversationBus) -> None:
        self.bus = bus
        self._handlers: dict[type, list[Callable[[Any], object]]] = defaultdict(list)

    def on(self, kind: type[S], handler: Callable[[S], object]) -> None:
        """Call `handler(signal)` after every commit that recorded a signal of `kind`."""
        self._handlers[kind].append(handler)

    def publish(self, signals: Iterable[object]) -> None:
        """Deliver the signals of one committed transaction: each conversation is notified
        once, after every handler has run (a woken page then sees what they armed)."""
        changed: dict[str, None] = {}
        for signal in signals:
            if isinstance(signal, Changed):
                changed.setdefault(signal.conversation_id)
                continue
            for handler in self._handlers.get(type(signal), ()):
                try:
                    handler(signal)
                except Exception:
                    log.exception("signal_handler_failed", signal=type(signal).__name__)
        for conversation_id in changed:
            self.bus.notify(conversation_id)
