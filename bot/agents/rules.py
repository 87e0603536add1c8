"""The built-in rules agent: the offline default, and an honest stand-in for an LLM.

It answers politely, escalates with `handoff_request` when the subscriber asks for a
person (with a real summary of what they said), tells the truth when the escalation
fails, and after a handoff reads the `[Bot resumed — …]` message and passes the returned
data on. No network, no model: `handoff demo` and the default config run anywhere.
"""

from __future__ import annotations

import re

from bot.agents.base import Agent, Trigger, Turn, TurnMessage
from bot.store.vocabulary import Role

_WANTS_PERSON = re.compile(
    r"\b(human|person|someone|somebody|agent|operator|representative|staff|manager)\b"
    r"|\b(talk|speak|chat)\s+(to|with)\b",
    re.IGNORECASE,
)
_GREETING = re.compile(r"^\s*(hi|hello|hey|good (morning|afternoon|evening)|hallo|hola)\b", re.IGNORECASE)
_THANKS = re.compile(r"\b(thanks|thank you|cheers)\b", re.IGNORECASE)


class RulesAgent(Agent):
    def __init__(self, name: str = "Assistant") -> None:
        self.name = name

    async def respond(self, turn: Turn) -> list[str]:
        if turn.trigger == "resumed":
            return [self._welcome_back(turn)]
        if turn.trigger in _OUTCOME_REPLIES:
            return [_outcome_reply(turn)]
        last = next((m for m in reversed(turn.history) if m.role == Role.SUBSCRIBER), None)
        if last is None:
            return []
        if _WANTS_PERSON.search(last.text):
            failed = await self._escalate(turn)
            return [failed] if failed else []  # on success the desk tells the subscriber who was asked
        who = turn.subscriber_name or "there"
        if _GREETING.match(last.text):
            return [f"Hi {who}! I'm {self.name}. Ask me anything, or say \"talk to a person\" and I'll bring in our team."]
        if _THANKS.search(last.text):
            return ["You're welcome! Anything else I can do?"]
        return [
            "Thanks, I've noted that. I'm a simple assistant, so for anything beyond the basics just say "
            "\"talk to a person\" and I'll hand you to our team."
        ]

    async def _escalate(self, turn: Turn) -> str | None:
        """Hand off to the first channel; what to say when that failed (None when it worked)."""
        tool = turn.tool("handoff_request")
        if tool is None:
            return "I'm sorry, there is no one I can bring in right now. Please try again later."
        channel_id = tool.input_schema["properties"]["channel_id"]["enum"][0]
        result = await turn.call_tool("handoff_request", {
            "channel_id": channel_id,
            "summary": _summary(turn),
            "expected_action": "Reply to the subscriber in this conversation, help with their request, "
                               "then release the conversation.",
            "urgency": "normal",
            "include_transcript": True,
            "expected_return": [
                {"name": "resolution", "type": "multiline", "label": "What was done", "required": True,
                 "description": "A sentence or two the assistant can pass on."},
                {"name": "follow_up_needed", "type": "boolean", "label": "Follow-up needed?"},
            ],
        })
        if result.get("ok"):
            return None
        return ("I'm sorry, I couldn't reach a person just now. "
                "I'm still here, and you can ask me to try again in a little while.")

    def _welcome_back(self, turn: Turn) -> str:
        resumed = next((m for m in reversed(turn.history) if m.role == Role.SYSTEM and m.text.startswith("[Bot resumed")), None)
        # The desk has already told the subscriber that the assistant is back.
        if resumed is None:
            return "How can I help?"
        if "without activity" in resumed.text.splitlines()[0]:
            return "I'm sorry nobody could finish this with you. Ask me to try reaching a person again whenever you like."
        returned = _returned_data(resumed.text)
        reply = "Thanks for waiting."
        if "resolution" in returned:
            resolution = returned.pop("resolution").rstrip()
            reply += f" Our team noted: {resolution}" + ("" if resolution.endswith((".", "!", "?")) else ".")
        readable = {"true": "yes", "false": "no"}
        extras = ", ".join(f"{k.replace('_', ' ')}: {readable.get(v, v)}" for k, v in returned.items())
        if extras:
            reply += f" ({extras})"
        if "Outcome: resolved" not in resumed.text:
            reply += " It looks like this isn't fully settled yet; say \"talk to a person\" to reach the team again."
        return reply + " Anything else I can help with?"


def _last_note(turn: Turn, prefix: str) -> str:
    """The newest system note of one kind (`[Approval …`, `[User action …`), or "" if none came."""
    return next((m.text for m in reversed(turn.history) if m.role == Role.SYSTEM and m.text.startswith(prefix)), "")


# After an approval or a user action, the newest system note of its kind says how it ended:
# the reply is that of the first marker the note holds ("" holds in every note: the last word).
_OUTCOME_REPLIES: dict[Trigger, tuple[str, tuple[tuple[str, str], ...]]] = {
    "approval": ("[Approval", (
        ("PERMISSION_DENIED", "I'm sorry: that wasn't approved, so I haven't done it."),
        ("approved and ran", "Good news: that was approved and it's done."),
        ("", "That was approved, but it didn't go through. Someone from the team will look into it."),
    )),
    "user_action": ("[User action", (
        ("HANDOFF_CANCELLED", "No problem, we'll leave that for now. Is there anything else I can help with?"),
        ("HANDOFF_TIMEOUT", "I didn't hear back, so I stopped waiting. Tell me when you're ready to try again."),
        ("HANDOFF_FAILED",
         "Thanks! It doesn't look like that went through yet, though. Could you check and tell me what you see?"),
        ("", "Thanks, that's done. Let's carry on."),
    )),
}


def _outcome_reply(turn: Turn) -> str:
    """What to tell the subscriber once their approval or user action ended (`_OUTCOME_REPLIES`)."""
    prefix, replies = _OUTCOME_REPLIES[turn.trigger]
    note = _last_note(turn, prefix)
    return next(reply for marker, reply in replies if marker in note)


def _summary(turn: Turn) -> str:
    said = [m.text.strip() for m in turn.history if m.role == Role.SUBSCRIBER][-3:]
    who = turn.subscriber_name or "A subscriber"
    if turn.subscriber_email:
        who += f" ({turn.subscriber_email})"
    quoted = " / ".join(f'"{" ".join(text.split())[:400]}"' for text in said)
    return f"{who} asked to talk to a person. Their recent messages: {quoted}"[:2000]


def _returned_data(text: str) -> dict[str, str]:
    """Parse the `Returned data:` block of a resume message (the same text an LLM reads)."""
    values: dict[str, str] = {}
    in_block = False
    for line in text.splitlines():
        if line.startswith("Returned data:"):
            in_block = True
        elif in_block and line.startswith("  • ") and ": " in line:
            key, value = line[4:].split(": ", 1)
            values[key] = value
        elif in_block and line.startswith("    ") and values:
            last = next(reversed(values))
            values[last] += " " + line.strip()
        else:
            in_block = False
    return values


__all__ = ["RulesAgent", "TurnMessage"]
