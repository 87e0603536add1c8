"""Reply tokens and Message-IDs: how a reply finds its handoff without a lookup table.

A handoff's thread key is a one-way hash of its id; its reply token is the key plus a MAC
(channels/email/__init__.py tells the whole story). Both the sending and the receiving side
use them, so they live in `ReplyTokens`, a base of the adapter."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Literal

from channels.base import ChannelAdapter
from channels.email.config import EmailConfig

THREAD_KEY_LENGTH, MAC_LENGTH = 16, 10  # base32 characters: 80 and 50 bits
TOKEN_LENGTH = THREAD_KEY_LENGTH + MAC_LENGTH
_TOKEN = re.compile(rf"[a-z2-7]{{{TOKEN_LENGTH}}}")
_MESSAGE_ID_TOKEN = re.compile(rf"<hd\.([a-z2-7]{{{TOKEN_LENGTH}}})\.[a-z0-9]+@", re.IGNORECASE)
_APPROVAL_MESSAGE_ID = re.compile(rf"<ap\.[a-z2-7]{{{THREAD_KEY_LENGTH}}}\.(prompt|closed)@", re.IGNORECASE)
APPROVAL_TAG = "approval"  # the plus-address tag of approval mails: replies to it are refused


def _b32(data: bytes, length: int) -> str:
    return base64.b32encode(data).decode().lower()[:length]


class ReplyTokens(ChannelAdapter):
    """The tokens half of EmailChannel; the adapter sets `_mac_key` (rekeyed at start) and `_domain`."""

    config: EmailConfig
    _mac_key: bytes
    _domain: str

    def _reply_token_key(self, desk_secret: bytes) -> bytes:
        """`reply_token_secret` if set, else the desk's per-channel secret, else (outside a
        desk) the SMTP password or, unkeyed, the sender address."""
        configured = self.config.reply_token_secret or (None if desk_secret else self.config.smtp.password)
        if configured is not None:
            material = configured.get_secret_value().encode()
        else:
            material = desk_secret or self.config.from_address.lower().encode()
        return hmac.new(material, b"handoff-desk email reply token", hashlib.sha256).digest()

    @staticmethod
    def thread_key_of(handoff_session_id: str) -> str:
        """Stable for the handoff, lower-case base32 (mail systems may fold case), one-way."""
        digest = hashlib.sha256(b"handoff-desk email thread\0" + handoff_session_id.encode()).digest()
        return _b32(digest, THREAD_KEY_LENGTH)

    @staticmethod
    def direct_thread_key_of(handoff_session_id: str, person: str) -> str:
        """The thread of a handoff mailed to one person directly (`Dispatch.direct`): its own
        key, so their replies are told apart from the room's (`to`) on the same channel."""
        material = b"handoff-desk email direct thread\0" + handoff_session_id.encode() + b"\0" + person.lower().encode()
        return _b32(hashlib.sha256(material).digest(), THREAD_KEY_LENGTH)

    def _mac(self, key: str, person: str | None) -> str:
        """A token's MAC: over the key alone for the room's mail; with the person's address
        for a direct mail, so only a reply from that address carries a valid one."""
        signed = key if person is None else f"{key}\0{person.lower()}"
        return _b32(hmac.new(self._mac_key, signed.encode(), hashlib.sha256).digest(), MAC_LENGTH)

    def token_of(self, handoff_session_id: str, person: str | None = None) -> str:
        """The reply token of a handoff's mail to the room (`to`), or to `person` directly."""
        key = self.thread_key_of(handoff_session_id) if person is None else self.direct_thread_key_of(handoff_session_id, person)
        return key + self._mac(key, person)

    def thread_key_from_token(self, token: str, sender: str | None = None) -> str | None:
        """The thread key a token carries, or None when its MAC is wrong: a room's token, or
        one of a mail sent directly to `sender` (the address the reply came from)."""
        verified = self.verified_token(token, sender)
        return verified[0] if verified is not None else None

    def verified_token(self, token: str, sender: str | None = None) -> tuple[str, bool] | None:
        """(thread key, whether the token was minted for a direct mail to `sender`), or None
        when its MAC is wrong for the room and for `sender`."""
        token = token.lower()
        if not _TOKEN.fullmatch(token):
            return None
        key, mac = token[:THREAD_KEY_LENGTH], token[THREAD_KEY_LENGTH:]
        if hmac.compare_digest(mac, self._mac(key, None)):
            return key, False
        if sender and hmac.compare_digest(mac, self._mac(key, sender)):
            return key, True
        return None

    def reply_address(self, handoff_session_id: str, person: str | None = None) -> str:
        local, domain = self.config.reply_mailbox.rsplit("@", 1)
        return f"{local}+{self.token_of(handoff_session_id, person)}@{domain}"

    def _new_message_id(self, handoff_session_id: str, person: str | None = None) -> str:
        return f"<hd.{self.token_of(handoff_session_id, person)}.{secrets.token_hex(8)}@{self._domain}>"

    def approval_message_id(self, approval_id: str, part: Literal["prompt", "closed"] = "prompt") -> str:
        """Derived from the approval id alone: the closing mail names the prompt it answers
        without stored state, and a retried send carries the same id (clients collapse it)."""
        return f"<ap.{self.thread_key_of(approval_id)}.{part}@{self._domain}>"

    def approval_reply_address(self) -> str:
        local, domain = self.config.reply_mailbox.rsplit("@", 1)
        return f"{local}+{APPROVAL_TAG}@{domain}"
