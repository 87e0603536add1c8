"""What adapters and the core recognise as a link command (`/link CODE`) or an availability
command (`/away`, `/back`), and the shape of the desk's link codes, which
bot/domain/people/linking.py issues and redeems.

An adapter turns a link command written outside any handoff's thread into a `LinkRequest`
(channels/base.py); inside one it stays a `RecipientText`, which the core recognises with
the same `link_code` before anything else, so the words never reach a subscriber.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The shape of the desk's link codes (bot/domain/people/linking.py issues them): 8
# characters without look-alikes (no I, O, 0, 1). A `link CODE` written without its slash is
# taken for a link command only when CODE has this shape.
LINK_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
LINK_CODE_LENGTH = 8
# On the first line only: a mail's signature or a second line after the code is not part of it.
_LINK = re.compile(r"^\s*(/?)link(?:@\w+)?(?=[\s:]|$)[ \t:]*([^\n]*?)[ \t]*(?:\n|$)", re.I)
_START_LINK = re.compile(r"^\s*/start(?:@\w+)?\s+link-([A-Za-z0-9-]{1,64})\s*$", re.I)


def link_code(text: str, *, deep_link: bool = False) -> str | None:
    """The code of a link command, as typed ("7H3K 9QXW"), or None when `text` is none.
    `/link CODE` is one whatever follows (a wrong code is answered, never relayed; `/link@bot`
    too, as group chats address bots); `link CODE` without the slash, for apps that take a
    leading `/` for their own commands (Slack does), only when CODE is a code's shape, so an
    ordinary sentence starting with "link" is not swallowed. `deep_link`: in a private chat,
    Telegram's `/start link-CODE` (what a t.me link with `?start=link-CODE` sends) is one too."""
    started = _START_LINK.match(text) if deep_link else None
    if started is not None:
        return started.group(1)
    found = _LINK.match(text)
    if found is None:
        return None
    slash, code = found.groups()
    if slash or _code_shaped(code):
        return code
    return None


def _code_shaped(typed: str) -> bool:
    """Whether `typed` is a code as the inbox shows it, or split once by a space or a dash."""
    bare = typed.upper().replace("-", "").replace(" ", "")
    return (len(typed) - len(bare) <= 1 and len(bare) == LINK_CODE_LENGTH
            and all(c in LINK_CODE_ALPHABET for c in bare))


@dataclass(frozen=True)
class AvailabilityCommand:
    """`/away [note]` or `/back` as a person typed it to the bot."""

    away: bool
    note: str | None = None


# `/away`, `/away@bot on holiday`, `/back`; Slack's slash command arrives as its text alone
# ("away on holiday"), which `availability_command(text, slash=False)` reads.
_AVAILABILITY = re.compile(r"^\s*(/?)(away|back|available)(?:@\w+)?(?=\s|$)[ \t]*([^\n]*?)\s*$", re.I)


def availability_command(text: str, *, slash: bool = True) -> AvailabilityCommand | None:
    """What an availability command says, or None when `text` is none. With `slash` (a
    chat's own message) the command must start with `/`; without (the words after Slack's
    `/handoff`), the bare word is the command. `back` and `available` both mean available;
    a note after `away` is kept (at most 200 characters; a longer one is refused by the event)."""
    found = _AVAILABILITY.match(text)
    if found is None or (slash and not found.group(1)):
        return None
    _slash, word, note = found.groups()
    away = word.lower() == "away"
    return AvailabilityCommand(away=away, note=(note or None) if away else None)
