"""Idempotency keys: a request retried with the same key is answered once, and runs once.

A client whose answer was lost (a timeout, a dropped connection, a server killed midway)
cannot tell whether its request took effect. Sent with an `Idempotency-Key`, it may send the
request again: this service decides, from one row per key, whether the retry runs, gets the
first answer again, or is told why neither is possible. The HTTP side (the header, the
fingerprint, the replayed answer) is `bot/web/idempotency.py`; this module holds the rows.

A key's row goes through three states (`IdempotencyState`):

- `started`, inserted in its own transaction before the request runs. The unique index on
  (scope, key) is what decides between two copies of one request arriving at once: exactly
  one insert wins, the other is told the key is in progress.
- `applied`, set by the mark (`bot/runtime/effects.py`) inside the very transaction that
  makes the request's change (the stored message, the release, the decision). After a
  crash a `started` key therefore proves that nothing was changed, so a retry may take the
  key over and run; an `applied` key proves the change happened, so a retry must not run
  again. Its answer was lost with the process, so it is told so, with the ids the mark
  recorded. No timer guesses which.
- `answered`, once the answer is known: kept for `api.idempotency_ttl` and replayed.

Every change of a row is guarded by its `owner` (the instance running it), so an instance
that was taken for dead and taken over can neither apply nor answer a key it no longer
holds: its mark fails, and with it the transaction of its change. The takeover itself is a
compare-and-set on the owner it found.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, insert, literal, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.errors import Conflict
from bot.runtime.clock import Clock
from bot.runtime.effects import EffectMark
from bot.runtime.signals import Changed, recorded
from bot.store import prepared
from bot.store.db import Database
from bot.store.instances import alive
from bot.store.models import IdempotencyKey
from bot.store.prepared import Prepared
from bot.store.rows import Rows
from bot.store.vocabulary import IdempotencyState

NOBODY = ""  # the owner of an applied key whose answer nobody will give any more
# How many times a key that vanished or changed hands between two statements is looked at
# again; each turn needs another request to have finished (or been pruned) meanwhile.
_ATTEMPTS = 3

_KEYS = Rows(IdempotencyKey).table
_INSERT = Prepared(insert(_KEYS).returning(_KEYS.c.id))
_FIND = Prepared(
    select(_KEYS.c.id, _KEYS.c.fingerprint, _KEYS.c.state, _KEYS.c.owner, _KEYS.c.applied, _KEYS.c.status, _KEYS.c.response)
    .where(_KEYS.c.scope == bindparam("scope"), _KEYS.c.key == bindparam("key")))
_MINE = (_KEYS.c.id == bindparam("key_id"), _KEYS.c.owner == bindparam("me"))
_TAKE_OVER = Prepared(
    update(_KEYS).where(_KEYS.c.id == bindparam("key_id"), _KEYS.c.owner == bindparam("was"),
                        _KEYS.c.state == IdempotencyState.STARTED).values(owner=bindparam("me")))
_APPLY = Prepared(
    update(_KEYS).where(*_MINE, _KEYS.c.state == IdempotencyState.STARTED)
    .values(state=IdempotencyState.APPLIED, applied=bindparam("ids")))
_ANSWER = Prepared(
    update(_KEYS).where(*_MINE)
    .values(state=IdempotencyState.ANSWERED, status=bindparam("status"), response=bindparam("response")))
_ALIVE = Prepared(select(literal(1)).where(bindparam("owner").in_(alive())))
_FORGET = Prepared(delete(_KEYS).where(*_MINE, _KEYS.c.state == IdempotencyState.STARTED))
_ABANDON = Prepared(update(_KEYS).where(*_MINE).values(owner=NOBODY))


@dataclass(frozen=True, slots=True)
class KeyedRequest:
    """One request as its key sees it: where it goes and who sent it (`scope`), the key the
    client chose, and a digest of exactly what it sent (`fingerprint`)."""

    scope: str
    key: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Claimed:
    """This request holds the key: run it, then `answer`, `forget` or `abandon` it."""

    key_id: int


@dataclass(frozen=True, slots=True)
class Answered:
    """The key was used by this very request before, which was answered: send that again."""

    status: int
    response: str


@dataclass(frozen=True, slots=True)
class Reused:
    """The key was used before for a different request (another path or body)."""


@dataclass(frozen=True, slots=True)
class InProgress:
    """The first request with this key is still running on a live instance."""


@dataclass(frozen=True, slots=True)
class AnswerLost:
    """The request took effect, but the instance that ran it stopped before answering (or
    failed after the change), so there is no answer to replay. `ids` are what the change
    named (its route's ids, the conversations it wrote to)."""

    ids: dict[str, Any]


Begun = Claimed | Answered | Reused | InProgress | AnswerLost


class KeyTakenOver(Conflict):
    """Raised inside the transaction of a request's change when its key has passed to another
    instance (this one was taken for dead): the change is rolled back, never made twice."""

    code = "idempotency_key_in_progress"

    def __init__(self) -> None:
        super().__init__("another instance took this Idempotency-Key over; its answer is the one that counts")


class IdempotencyKeys:
    """The rows of the keys, for one instance (`instance_id`, this process's `Instances.id`).
    Another owner is alive while it beats (bot/store/instances.py): one silent for
    `dead_after()` seconds by the database's clock, or a previous run of this process
    (forgotten at start), is dead."""

    def __init__(self, db: Database, clock: Clock, *, instance_id: str, dead_after: Callable[[], float]) -> None:
        self.db, self.clock, self.instance_id, self.dead_after = db, clock, instance_id, dead_after

    async def _alive(self, owner: str) -> bool:
        if owner == self.instance_id:
            return True
        return await self.db.fetch_one(_ALIVE, {"owner": owner, "dead_after": self.dead_after()}) is not None

    async def begin(self, request: KeyedRequest) -> Begun:
        """Take the key for `request`, or say why it can not run."""
        for _ in range(_ATTEMPTS):
            try:
                async with self.db.transaction() as session:
                    ((key_id,),) = await prepared.fetch_all(session, _INSERT, {
                        "scope": request.scope, "key": request.key, "fingerprint": request.fingerprint,
                        "state": IdempotencyState.STARTED, "owner": self.instance_id, "created_at": self.clock.now(),
                    })
                return Claimed(int(key_id))
            except IntegrityError:  # the unique index on (scope, key): the key was seen
                pass
            found = await self.db.fetch_one(_FIND, {"scope": request.scope, "key": request.key})
            if found is None:
                continue  # forgotten (or pruned) since the insert failed: try again
            key_id, fingerprint, state, owner, applied, status, response = found
            if fingerprint != request.fingerprint:
                return Reused()
            if state == IdempotencyState.ANSWERED:
                return Answered(int(status), str(response))
            if owner != NOBODY and await self._alive(owner):
                return InProgress()
            if state == IdempotencyState.APPLIED:
                return AnswerLost(dict(applied or {}))
            # started by an instance that died: its change never committed, so run it here
            async with self.db.transaction() as session:
                if await prepared.execute(session, _TAKE_OVER, {"key_id": key_id, "was": owner, "me": self.instance_id}):
                    return Claimed(int(key_id))
        return InProgress()

    def mark(self, claim: Claimed, ids: Mapping[str, str]) -> EffectMark:
        """The mark for `committed_with`: sets the key `applied` in the transaction of the
        request's change, with `ids` and the conversations that transaction wrote to."""

        async def applied(session: AsyncSession) -> None:
            named = dict(ids)
            conversations = {s.conversation_id for s in recorded(session.info) if isinstance(s, Changed)}
            if len(conversations) == 1:
                named.setdefault("conversation_id", conversations.pop())
            if not await prepared.execute(session, _APPLY, {"key_id": claim.key_id, "me": self.instance_id, "ids": named}):
                raise KeyTakenOver()

        return applied

    async def answer(self, claim: Claimed, status: int, response: str) -> None:
        """Keep the answer, for the retries of this request to get again."""
        await self._own(claim, _ANSWER, status=status, response=response)

    async def forget(self, claim: Claimed) -> None:
        """The request failed before changing anything: drop the key, so a retry runs again."""
        await self._own(claim, _FORGET)

    async def abandon(self, claim: Claimed) -> None:
        """The request changed something and then failed without an answer worth keeping:
        its retries are told the change happened (`AnswerLost`) instead of waiting."""
        await self._own(claim, _ABANDON)

    async def let_go(self, claim: Claimed, *, applied: bool) -> None:
        """The request ended without an answer worth keeping (a 5xx, an exception): a retry
        runs again when nothing was changed (`forget`), and is told so when it was (`abandon`)."""
        await (self.abandon if applied else self.forget)(claim)

    async def _own(self, claim: Claimed, statement: Prepared, **values: Any) -> None:
        async with self.db.transaction() as session:
            await prepared.execute(session, statement, {"key_id": claim.key_id, "me": self.instance_id, **values})
