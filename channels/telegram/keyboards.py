"""Our inline buttons, written and read in one place. Each button's callback_data says what
it is about, so a press (or a reply to the message it hangs under) maps back without a
lookup table, and a restart or another instance reads it the same way:

- a handoff's `release` / `claim` (on the dispatch itself) or `release:<dispatch id>` /
  `release:topic:<topic id>` (on a relay, naming the thread it belongs to);
- an approval's `ap:<approval id>:y|n|a` (approve, deny, always allow);
- a user action's `ua:<user action id>:d|c|n|p` (done, cancel, next step, previous step);
- the satisfaction question's `cs:<handoff id>:y|n` (👍 / 👎).

Telegram allows 64 bytes of callback_data; an id ("ap_", "ua_" or "hs_" + 16 characters)
leaves plenty, and a prompt whose id would not fit goes without buttons (its text and the
decision page still work) instead of being refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from channels.base import ApprovalBrief, ClaimPress, ReleasePress, SatisfactionPrompt, UserActionPrompt
from channels.telegram.protocol import CALLBACK_DATA_LIMIT

HANDOFF_DATA = re.compile(r"^(release|claim)(?::(topic:\d+|\d+))?$")
HANDOFF_PRESSES: dict[str, tuple[type[ReleasePress | ClaimPress], str]] = {
    "release": (ReleasePress, "Releasing the handoff…"), "claim": (ClaimPress, "Claiming the handoff… the first claim takes it.")}
APPROVAL_DATA = re.compile(r"^ap:(ap_[A-Za-z0-9_-]{1,56}):([yna])$")
APPROVAL_CHOICES = {"y": (True, False, "approve"), "n": (False, False, "deny"), "a": (True, True, "always allow")}
USER_ACTION_DATA = re.compile(r"^ua:(ua_[A-Za-z0-9_-]{1,56}):([dcnp])$")
USER_ACTION_MOVES: dict[str, Literal["done", "cancelled", "next", "previous"]] = {
    "d": "done", "c": "cancelled", "n": "next", "p": "previous"}
USER_ACTION_ANSWERS = {"done": "Got it: done.", "cancelled": "Got it: cancelled.", "next": "One moment…", "previous": "One moment…"}
SATISFACTION_DATA = re.compile(r"^cs:(hs_[A-Za-z0-9_-]{1,56}):([yn])$")


@dataclass(frozen=True)
class Posted:
    """A dispatch as sent: its HTML and its keyboard's rows (the Claim row first, when it has one)."""

    text: str
    rows: list[list[Any]]

    def without_claim(self) -> list[list[Any]]:
        """Its rows once the Claim button is gone (a row left empty goes too)."""
        return [kept for row in self.rows if (kept := [b for b in row if not is_claim(b)])]


def suffix_from_data(data: Any, message_id: int) -> str | None:
    """`release` / `claim` (on a dispatch: its own id) or `release:<dispatch id>` / `release:topic:<id>`."""
    match = HANDOFF_DATA.match(data) if isinstance(data, str) else None
    if match is None:
        return None
    return match.group(2) or str(message_id)


def is_claim(button: Any) -> bool:
    data = getattr(button, "callback_data", None)
    return isinstance(data, str) and data.split(":", 1)[0] == "claim"


def inline(rows: list[list[Any]]) -> Any:
    from telegram import InlineKeyboardMarkup

    return InlineKeyboardMarkup(rows)


def url_button(label: str, url: str) -> Any:
    from telegram import InlineKeyboardButton

    return InlineKeyboardButton(label, url=url)


def release_button(suffix: str | None) -> Any:
    from telegram import InlineKeyboardButton

    return InlineKeyboardButton("Release", callback_data=f"release:{suffix}" if suffix else "release")


def claim_button(suffix: str | None) -> Any:
    from telegram import InlineKeyboardButton

    return InlineKeyboardButton("I'm on it", callback_data=f"claim:{suffix}" if suffix else "claim")


def approval_keyboard(approval: ApprovalBrief) -> Any:
    """Approve / Deny (and Always allow in a row of its own); None when the id would not fit
    callback_data (the prompt then offers the decision link alone)."""
    from telegram import InlineKeyboardButton

    choices = [("Approve", "y"), ("Deny", "n")] + ([("Always allow", "a")] if approval.allow_always else [])
    if not all(len(f"ap:{approval.approval_id}:{code}".encode()) <= CALLBACK_DATA_LIMIT for _label, code in choices):
        return None
    rows = [[InlineKeyboardButton(label, callback_data=f"ap:{approval.approval_id}:{code}") for label, code in choices[:2]]]
    if len(choices) > 2:
        rows.append([InlineKeyboardButton(choices[2][0], callback_data=f"ap:{approval.approval_id}:a")])
    return inline(rows)


def user_action_keyboard(prompt: UserActionPrompt) -> Any:
    """Done / Cancel, and the step buttons that lead somewhere (no Previous on the first
    step); None when the id would not fit callback_data (the text names the keywords)."""
    from telegram import InlineKeyboardButton

    def button(label: str, move: str) -> Any:
        return InlineKeyboardButton(label, callback_data=f"ua:{prompt.user_action_id}:{move}")

    if not USER_ACTION_DATA.match(f"ua:{prompt.user_action_id}:d"):
        return None
    rows = [[button("Done", "d"), button("Cancel", "c")]]
    if prompt.steps > 1:
        steps = ([button("← Previous step", "p")] if prompt.step > 0 else []) + (
            [button("Next step →", "n")] if prompt.step < prompt.steps - 1 else [])
        rows.insert(0, steps)
    return inline([row for row in rows if row])


def satisfaction_keyboard(prompt: SatisfactionPrompt) -> Any:
    """👍 / 👎 under the satisfaction question; None when the id would not fit callback_data."""
    from telegram import InlineKeyboardButton

    if not SATISFACTION_DATA.match(f"cs:{prompt.handoff_id}:y"):
        return None
    return inline([[InlineKeyboardButton(label, callback_data=f"cs:{prompt.handoff_id}:{code}")
                    for label, code in (("👍", "y"), ("👎", "n"))]])
