"""A real SMTP server for the email channel's tests: aiosmtpd on 127.0.0.1, recording mail.

It plays the organisation's outgoing mail server. It runs aiosmtpd's own protocol code
(EHLO, STARTTLS, implicit TLS, AUTH, SIZE …) in the test's event loop, so a test can wait
for a message with a condition instead of sleeping, and can script what the server says:
a 4xx or 5xx at MAIL, RCPT or DATA, refused credentials, or no answer at all after DATA.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import warnings
from collections import defaultdict, deque
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any, Literal

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

from tests.fake_server import Watched


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    raw: bytes
    message: EmailMessage

    def part(self, content_type: str) -> str:
        found = next(p for p in self.message.walk() if p.get_content_type() == content_type)
        return str(found.get_content()).replace("\r\n", "\n")


def self_signed_certificate(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for the IP address `host`, made with the openssl CLI: (cert.pem, key.pem)."""
    cert_path, key_path = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key_path), "-out", str(cert_path), "-days", "7", "-subj", "/CN=fake smtp",
         "-addext", f"subjectAltName=IP:{host}"],
        check=True, capture_output=True, timeout=60,
    )
    return cert_path, key_path


class FakeSMTP(Watched):
    """An SMTP server that accepts mail and remembers every message."""

    def __init__(
        self, *, username: str | None = None, password: str | None = None,
        security: Literal["none", "starttls", "tls"] = "none", certificate: tuple[Path, Path] | None = None,
    ) -> None:
        super().__init__()
        self.username, self.password, self.security = username, password, security
        self.certificate = certificate
        self.messages: list[Received] = []
        self.logins: list[tuple[str, bool]] = []
        self.sessions = 0
        self.port = 0
        self._replies: defaultdict[str, deque[str]] = defaultdict(deque)
        self._hold: asyncio.Event | None = None
        self._server: asyncio.base_events.Server | None = None
        self._open: list[SMTP] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FakeSMTP:
        loop = asyncio.get_running_loop()
        context = None
        if self.security != "none":
            assert self.certificate is not None, "TLS needs a certificate"
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*map(str, self.certificate))

        def protocol() -> SMTP:
            self.sessions += 1
            with warnings.catch_warnings():  # "AUTH without TLS": the plain-text case is a test of ours
                warnings.simplefilter("ignore", UserWarning)
                session = SMTP(
                    self, hostname="smtp.test", ident="fake smtp", loop=loop, enable_SMTPUTF8=True,
                    tls_context=context if self.security == "starttls" else None,
                    require_starttls=self.security == "starttls",
                    auth_required=self.username is not None,
                    # aiosmtpd cannot tell an implicit-TLS socket is encrypted; it is, so AUTH may go on it
                    auth_require_tls=self.security == "starttls",
                    authenticator=self._authenticate if self.username is not None else None,
                )
            self._open.append(session)
            return session

        self._server = await loop.create_server(protocol, host="127.0.0.1", port=0,
                                                ssl=context if self.security == "tls" else None)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._hold is not None:
            self._hold.set()
        if self._server is not None:
            self._server.close()
            for session in self._open:
                if session.transport is not None and not session.transport.is_closing():
                    session.transport.close()
            await self._server.wait_closed()

    # ------------------------------------------------------------------ scripting

    def fail(self, stage: Literal["MAIL", "RCPT", "DATA"], reply: str, times: int = 1) -> None:
        """Answer the next `times` commands of `stage` with `reply` ("451 4.3.0 try later")."""
        self._replies[stage].extend([reply] * times)

    def hold(self) -> None:
        """Take the next message but never answer its DATA (until release() or stop())."""
        self._hold = asyncio.Event()

    def release(self) -> None:
        if self._hold is not None:
            self._hold.set()

    # ------------------------------------------------------------------ aiosmtpd hooks

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        if not isinstance(data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login, password = data.login.decode(), data.password.decode()
        ok = (login, password) == (self.username, self.password)
        self.logins.append((login, ok))
        # handled=False lets aiosmtpd answer 535 itself (handled=True without a reply hangs the client)
        return AuthResult(success=ok, handled=False)

    async def handle_MAIL(self, server: Any, session: Any, envelope: Any, address: str, options: list[str]) -> str:
        if self._replies["MAIL"]:
            return self._replies["MAIL"].popleft()
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 OK"

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: list[str]) -> str:
        if self._replies["RCPT"]:
            return self._replies["RCPT"].popleft()
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self._replies["DATA"]:
            return self._replies["DATA"].popleft()
        raw = bytes(envelope.original_content or envelope.content)
        message = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(message, EmailMessage)
        self.messages.append(Received(envelope.mail_from, list(envelope.rcpt_tos), raw, message))
        await self._notify()
        if self._hold is not None:
            hold, self._hold = self._hold, None
            await hold.wait()
        return "250 2.0.0 queued"
