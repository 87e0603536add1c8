"""The interactions endpoint: button presses Discord POSTs to `/webhooks/{channel id}`,
verified (Ed25519 over timestamp + raw body) before anything is parsed, then turned into a
release or an approval decision and answered privately at once."""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from bot.runtime.bounded import BoundedDict
from channels.base import ChannelAdapter, ClaimPress, Decision, ReleasePress, WebhookReply, WebhookRequest, json_object
from channels.discord.config import DiscordConfig
from channels.discord.protocol import (
    _APPROVAL_CUSTOM_ID,
    APPROVAL_CHOICES,
    APPROVAL_ID,
    BOT_DM_CONTEXT,
    CLAIM_ID,
    COMPONENT,
    DM_CHANNEL,
    EPHEMERAL,
    MESSAGE_REPLY,
    PING,
    PONG,
    RELEASE_ID,
    SIGNATURE_MAX_AGE,
)

log = structlog.get_logger(__name__)


class DiscordInteractions(ChannelAdapter):
    """The interactions half of DiscordChannel; the adapter sets `_prompts` (approval id ->
    the prompt's message id)."""

    config: DiscordConfig
    _prompts: BoundedDict[str, str]

    async def handle_webhook(self, request: WebhookRequest) -> WebhookReply:
        if not self.config.application_public_key:
            return WebhookReply(status=404, body=b"this Discord channel has no interactions endpoint (application_public_key)")
        if not self._signed_by_discord(request.body, request.headers):
            log.warning("discord_interaction_rejected", channel_id=self.id, reason="bad, missing or stale signature")
            return WebhookReply(status=401, body=b"invalid request signature")
        data = json_object(request.body)
        if data.get("type") == PING:
            return _json_reply({"type": PONG})
        if data.get("type") == COMPONENT:
            custom_id = str((data.get("data") or {}).get("custom_id") or "")
            if custom_id.startswith(APPROVAL_ID + ":"):
                return self._approval_press(data, custom_id)
            for button, (press, answer) in HANDOFF_BUTTONS.items():
                if custom_id == button or custom_id.startswith(button + ":"):
                    message = self._handoff_click(data, press)
                    if message is None:
                        return _ephemeral("This button does not belong to a handoff of this desk.")
                    return WebhookReply(status=200, body=json.dumps(_ephemeral_body(answer)).encode(),
                                        content_type="application/json", messages=[message])
        return _ephemeral("Nothing to do here: reply in the handoff's thread, or type /release there when you are done.")

    def _signed_by_discord(self, body: bytes, headers: Any) -> bool:
        from nacl.exceptions import BadSignatureError
        from nacl.signing import VerifyKey

        signature = headers.get("x-signature-ed25519", "")
        timestamp = headers.get("x-signature-timestamp", "")
        if not signature or not timestamp.isdigit() or not timestamp.isascii():
            return False
        if abs(time.time() - int(timestamp)) > SIGNATURE_MAX_AGE:
            return False  # a replay of an old, validly signed request
        try:
            key = VerifyKey(bytes.fromhex(self.config.application_public_key or ""))
            key.verify(timestamp.encode() + body, bytes.fromhex(signature))
        except (BadSignatureError, ValueError, TypeError):
            return False
        return True

    def _approval_press(self, data: dict[str, Any], custom_id: str) -> WebhookReply:
        """Approve / Deny / Always allow on a prompt in our channel; answered privately at
        once, decided by the core (pending, asked in this channel, the first answer)."""
        match = _APPROVAL_CUSTOM_ID.match(custom_id)
        channel_id = str(data.get("channel_id") or (data.get("channel") or {}).get("id") or "")
        member = data.get("member") or {}
        user = member.get("user") or data.get("user") or {}
        if match is None or channel_id != str(self.config.channel_id) or not user.get("id") or user.get("bot"):
            return _ephemeral("This button does not belong to an approval prompt of this desk.")
        approval_id, choice = match.group(1), match.group(2)
        approve, always = APPROVAL_CHOICES[choice]
        message_id = (data.get("message") or {}).get("id")
        if message_id:
            self._remember_prompt(approval_id, str(message_id))  # so the closing notice finds it
        decision = Decision(
            approval_id=approval_id, approve=approve, always_allow=always, author=_display_name(member, user),
            user_id=str(user["id"]), dedupe_key=f"interaction:{data.get('id')}",
        )
        word = {"approve": "approve", "deny": "deny", "always": "always allow"}[choice]
        return WebhookReply(status=200, content_type="application/json", messages=[decision], body=json.dumps(_ephemeral_body(
            f"Your answer ({word}) is recorded; the prompt changes once it is decided.")).encode())

    def _handoff_click(self, data: dict[str, Any], press: type[ReleasePress | ClaimPress]) -> ReleasePress | ClaimPress | None:
        """A Release or Claim click on a dispatch (in our channel or a person's direct
        message, where Discord names the presser in `user`, not `member`) or inside a
        handoff thread."""
        channel = data.get("channel") or {}
        channel_id = str(data.get("channel_id") or channel.get("id") or "")
        message = data.get("message") or {}
        if channel_id == str(self.config.channel_id):
            # On the dispatch: its thread has the message's id.
            thread_id = str((message.get("thread") or {}).get("id") or message.get("id") or "")
        elif str(channel.get("parent_id") or "") == str(self.config.channel_id):
            thread_id = channel_id
        elif not data.get("guild_id") and (channel.get("type") == DM_CHANNEL or data.get("context") == BOT_DM_CONTEXT):
            # On a dispatch in a person's direct message (channels/discord/direct.py): its line is that message.
            thread_id = f"{channel_id}:{message['id']}" if channel_id and message.get("id") else ""
        else:
            return None
        member = data.get("member") or {}
        user = member.get("user") or data.get("user") or {}
        if not thread_id or not user.get("id") or user.get("bot"):
            return None
        return press(thread_key=thread_id, author=_display_name(member, user), user_id=str(user["id"]),
                     dedupe_key=f"interaction:{data.get('id')}")

    def _remember_prompt(self, approval_id: str, message_id: str) -> None:
        self._prompts[approval_id] = message_id  # the newest; the oldest past the limit is forgotten


# The buttons of a dispatch: what a click on each is, and the private answer to it.
HANDOFF_BUTTONS: dict[str, tuple[type[ReleasePress | ClaimPress], str]] = {
    RELEASE_ID: (ReleasePress, "Releasing the handoff… the assistant takes the conversation back."),
    CLAIM_ID: (ClaimPress, "Claiming the handoff… the first claim takes it."),
}


def _display_name(member: dict[str, Any], user: dict[str, Any]) -> str:
    name = member.get("nick") or user.get("global_name") or user.get("username") or f"Discord user {user['id']}"
    return " ".join(str(name).split())[:80]


def _json_reply(body: dict[str, Any]) -> WebhookReply:
    return WebhookReply(status=200, body=json.dumps(body).encode(), content_type="application/json")


def _ephemeral_body(text: str) -> dict[str, Any]:
    return {"type": MESSAGE_REPLY, "data": {"content": text, "flags": EPHEMERAL, "allowed_mentions": {"parse": []}}}


def _ephemeral(text: str) -> WebhookReply:
    return _json_reply(_ephemeral_body(text))
