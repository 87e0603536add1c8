"""Work that must commit in the same transaction as an effect, or not at all.

An inbound event is marked done, and an idempotency key marked applied, in the very
transaction that stores what the event or request changed (the relayed reply, the release,
the decision). A crash then leaves either both or neither: the event is re-run only when
its effect never committed, and a retried request is refused only when it did. No timer
guesses which.

The caller wraps its work in `committed_with(mark)`; the services it calls flag the
transaction that makes their change with `Database.transaction(effect=True)`. The first
such transaction in the caller's context runs `mark(session)` before it commits; later
ones (an agent's replies after the stored message) do not. Tasks handed to
`Background.spawn` start without the mark (`detached`): follow-up work is never taken
for the effect of the request that started it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

EffectMark = Callable[[Any], Awaitable[None]]  # called with the effect's AsyncSession


@dataclass
class Effect:
    """One caller's mark, and whether the transaction that carried it committed."""

    mark: EffectMark
    applied: bool = False
    carried: bool = False  # a transaction is running the mark now (its commit decides)


_PENDING: contextvars.ContextVar[Effect | None] = contextvars.ContextVar("effect_mark", default=None)


@contextmanager
def committed_with(mark: EffectMark) -> Iterator[Effect]:
    """Run `mark` in the first effect transaction of the work inside; `applied` says
    afterwards whether that transaction committed."""
    effect = Effect(mark)
    token = _PENDING.set(effect)
    try:
        yield effect
    finally:
        _PENDING.reset(token)


def take_pending() -> Effect | None:
    """The mark an effect transaction starting now must carry, claimed for it (None when
    there is none, or another transaction carries it or already did)."""
    effect = _PENDING.get()
    if effect is None or effect.applied or effect.carried:
        return None
    effect.carried = True
    return effect


def settle(effect: Effect, *, committed: bool) -> None:
    """The transaction carrying `effect` ended: applied if it committed, otherwise the
    mark waits for the next effect transaction."""
    effect.carried = False
    effect.applied = committed


def detached() -> contextvars.Context:
    """A copy of the current context without a pending mark, for tasks that outlive the
    work that spawned them."""
    context = contextvars.copy_context()
    context.run(_PENDING.set, None)
    return context
