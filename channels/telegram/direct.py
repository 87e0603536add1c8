"""People's own private chats with the bot, where handoffs reach them directly
(`Dispatch.direct`), and where a plain message of theirs goes.

A direct dispatch lands in the person's private chat (their Telegram user id is the chat's
id) and its thread is the dispatch itself, as in a group without topics: the thread_key is
`"{chat}:{dispatch message id}"` (a private chat's id is positive, a group's negative, so it
never meets a group's key). A reply to one of the handoff's messages, or a press on its
buttons, names the dispatch by the buttons, so it is routed from the message alone, after a
restart as before.

A plain message (no reply) in that chat says no handoff. While the chat has open direct
handoffs it is the person's line: `#CODE text` goes to handoff CODE (and focuses it, `#CODE`
alone only focuses), anything else to the one focused last (the newest, unless they
addressed or answered another since). Which chats are a person's, and their open handoffs,
this process learns from what it sends there: every dispatch, relay and notice carries its
thread (a "released" or "taken" notice ends it). On start the desk hands the adapter the
direct handoffs still open (`ChannelContext.open_lines`), so after a restart a plain message
goes where it went before, from the first one.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

from bot.runtime.bounded import BoundedDict

PERSON_CHATS = 10_000  # private chats remembered as people's lines
_ADDRESS = re.compile(r"^\s*#([A-Za-z0-9]{4})(?=[\s:,]|$)[:,]?\s*", re.S)  # as on a shared line (bot/flow/shared_lines.py)
_USER_ID = re.compile(r"\d{1,20}")


def direct_chat(address: str) -> int:
    """The private chat of the person `Dispatch.direct` names: their Telegram user id (a
    positive number), or ValueError saying what was expected."""
    value = address.strip()
    if not _USER_ID.fullmatch(value) or int(value) == 0:
        raise ValueError(f"{address!r} is not a Telegram user id (a positive number, as /link stored it)")
    return int(value)


@dataclass(frozen=True)
class LineMessage:
    """Where a plain message in a person's chat goes: the thread `suffix` (the dispatch's
    message id) with `text` (the `#CODE` taken off); `text` empty when it only focused."""

    suffix: str
    text: str


class PersonChats:
    """Chat id → its open direct handoffs (thread suffix → short code), the focused last."""

    def __init__(self, limit: int = PERSON_CHATS) -> None:
        self._chats: BoundedDict[int, OrderedDict[str, str]] = BoundedDict(limit)

    def opened(self, chat: int, suffix: str, code: str) -> None:
        """The desk sent a handoff's message into `chat`: the handoff is open there (and,
        when it is the dispatch, focused)."""
        line = self._chats.get(chat)
        if line is None:
            line = self._chats[chat] = OrderedDict()
        line.setdefault(suffix, code)  # a new one goes last: the focused one

    def ended(self, chat: int, suffix: str) -> None:
        line = self._chats.get(chat)
        if line is not None:
            line.pop(suffix, None)
            if not line:
                self._chats.pop(chat, None)

    def focus(self, chat: int, suffix: str) -> None:
        """The person answered or addressed this handoff: their plain messages go there now."""
        line = self._chats.get(chat)
        if line is not None and suffix in line:
            line.move_to_end(suffix)

    def is_line(self, chat: int) -> bool:
        return bool(self._chats.get(chat))

    def route(self, chat: int, text: str) -> LineMessage | None:
        """Where a plain message in `chat` goes, or None when the chat has no open direct handoff."""
        line = self._chats.get(chat)
        if not line:
            return None
        address = _ADDRESS.match(text)
        if address is not None:
            code = address.group(1).upper()
            hits = [suffix for suffix, known in line.items() if known == code]
            if len(hits) == 1:
                line.move_to_end(hits[0])
                return LineMessage(hits[0], text[address.end():])
        return LineMessage(next(reversed(line)), text)
