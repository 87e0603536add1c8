"""Readable names for Slack users without waiting for Slack: a webhook must be answered
within 3 seconds, so an event is named from a cache (one page of users.list at start, the
profiles events carry) and a newcomer is looked up in the background for the next time."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from channels.base import ChannelError
from channels.slack.protocol import NAME_CACHE_LIMIT
from channels.slack.transport import SlackTransport

log = structlog.get_logger(__name__)


class SlackNames(SlackTransport):
    """The names half of SlackChannel; the adapter sets `_names` (user id -> name, oldest
    first) and `_lookups` (the background users.info calls, by user id)."""

    _names: dict[str, str]
    _lookups: dict[str, asyncio.Task[None]]

    def _author(self, user_id: str, fallback: str | None = None) -> str:
        """A readable name without waiting for Slack: the cache, else what the payload
        says, else the user id, with a lookup started so the next message has the name."""
        name = self._names.get(user_id)
        if name:
            return name
        if self._client is not None and user_id not in self._lookups:
            task = asyncio.create_task(self._look_up(user_id), name=f"slack-user:{user_id}")
            self._lookups[user_id] = task
            task.add_done_callback(lambda _t: self._lookups.pop(user_id, None))
        return fallback or user_id

    async def _look_up(self, user_id: str) -> None:
        try:
            response = await self._call("users.info", self._require_client().users_info(user=user_id))
        except ChannelError as exc:
            log.info("slack_user_lookup_failed", channel_id=self.id, user=user_id, hint=exc.hint)
            return
        self._remember(user_id, _display_name(response.get("user") or {}))

    async def _learn_names(self) -> None:
        """One page of users.list at start, so the first reply already carries a name.
        Optional: without the users:read scope names fall back to user ids."""
        assert self._client is not None
        try:
            response = await self._call("users.list", self._client.users_list(limit=200))
        except ChannelError as exc:
            log.warning("slack_names_unavailable", channel_id=self.id, hint=exc.hint)
            return
        for member in response.get("members") or []:
            if not member.get("is_bot") and not member.get("deleted") and member.get("id"):
                self._remember(member["id"], _display_name(member))

    def _remember(self, user_id: str, name: str | None) -> None:
        if not name:
            return
        if len(self._names) >= NAME_CACHE_LIMIT:
            self._names.pop(next(iter(self._names)))  # oldest first
        self._names[user_id] = " ".join(name.split())[:80]

    async def settle(self) -> None:
        """Wait for background name lookups (tests, and anyone who wants names now)."""
        while self._lookups:
            await asyncio.gather(*list(self._lookups.values()), return_exceptions=True)

    async def _stop_lookups(self) -> None:
        for task in self._lookups.values():
            task.cancel()
        await asyncio.gather(*self._lookups.values(), return_exceptions=True)
        self._lookups.clear()


def _display_name(user: dict[str, Any]) -> str | None:
    profile = user.get("profile") or {}
    return profile.get("display_name") or profile.get("real_name") or user.get("real_name") or user.get("name")
