"""A mail server on loopback that keeps what it is sent: where `handoff demo` lets the desk
deliver its e-mail, so the story can show a person's mail without a real mail server.

It is aiosmtpd's own SMTP dialogue in the caller's event loop, listening on 127.0.0.1 only
(a port the system picks), accepting every message and remembering it, parsed. Nothing is
relayed anywhere: it is a mailbox, not a relay. Point an email channel at it with
`smtp: {host: 127.0.0.1, port: <its port>, security: none}`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any


@dataclass(frozen=True)
class Delivered:
    """One message as it arrived: the envelope's recipients and the parsed message."""

    rcpt_tos: tuple[str, ...]
    message: EmailMessage

    @property
    def text(self) -> str:
        """The plain-text part, as a mail client shows it."""
        part = self.message.get_body(preferencelist=("plain",))
        return "" if part is None else str(part.get_content()).replace("\r\n", "\n")


class LoopbackMailbox:
    """Start it, point an email channel at `port`, read `delivered` (or `to(address)`)."""

    def __init__(self) -> None:
        self.delivered: list[Delivered] = []
        self._server: asyncio.base_events.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the mailbox is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> LoopbackMailbox:
        from aiosmtpd.smtp import SMTP

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: SMTP(self, hostname="mailbox.localhost", ident="handoff demo mailbox", loop=loop),
            host="127.0.0.1", port=0)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def to(self, address: str) -> list[Delivered]:
        """The messages sent to `address`, oldest first."""
        wanted = address.lower()
        return [d for d in self.delivered if wanted in (r.lower() for r in d.rcpt_tos)]

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd's handler hook
        message = BytesParser(policy=policy.default).parsebytes(envelope.original_content or envelope.content)
        assert isinstance(message, EmailMessage)  # policy.default parses to EmailMessage
        self.delivered.append(Delivered(tuple(envelope.rcpt_tos), message))
        return "250 OK: kept in the mailbox"
