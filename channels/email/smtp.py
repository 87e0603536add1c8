"""The SMTP client: one session per message (aiosmtplib), the credentials check, and every
failure mapped onto the ChannelError tree (never retried here: the outbox owns retries)."""

from __future__ import annotations

import ssl
from email import policy
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any

import structlog

from channels.base import (
    ChannelAdapter,
    ChannelAuthError,
    ChannelError,
    PermanentChannelError,
    TransientChannelError,
    UncertainDeliveryError,
)
from channels.email.config import EmailConfig
from channels.email.text import one_line

if TYPE_CHECKING:
    import aiosmtplib

log = structlog.get_logger(__name__)

# The SMTP 7bit policy: headers with non-ASCII text become encoded words, bodies
# quoted-printable or base64, lines end in CRLF; any server takes it without SMTPUTF8/8BITMIME.
_WIRE = policy.SMTP.clone(cte_type="7bit")


class SmtpSending(ChannelAdapter):
    """The sending half of EmailChannel; the adapter sets `_domain` (our EHLO name by default)."""

    config: EmailConfig
    _domain: str

    async def probe(self) -> str:
        """Connect, EHLO (STARTTLS / implicit TLS), log in when configured, QUIT."""
        smtp = self._client()
        await self._run("connect", smtp.connect())
        try:
            await smtp.quit()
        except Exception:  # the check passed; a clumsy goodbye is not a failure
            smtp.close()
        settings = self.config.smtp
        login = f" as {settings.username}" if settings.username else " without login"
        secure = {"starttls": "STARTTLS", "tls": "TLS", "none": "no encryption"}[settings.security]
        return f"{settings.host}:{settings.effective_port} ({secure}){login}, sending as {self.config.from_address}"

    def _client(self) -> aiosmtplib.SMTP:
        import aiosmtplib

        settings = self.config.smtp
        context = None
        if settings.security != "none":
            context = ssl.create_default_context()
            if settings.ca_file:
                try:
                    context.load_verify_locations(cafile=settings.ca_file)
                except (OSError, ssl.SSLError) as exc:
                    raise PermanentChannelError(f"cannot read smtp.ca_file: {exc}",
                                                hint=f"smtp.ca_file ({settings.ca_file}) is not a readable PEM file: {exc}") from exc
        return aiosmtplib.SMTP(
            hostname=settings.host, port=settings.effective_port, timeout=settings.timeout,
            use_tls=settings.security == "tls", start_tls=True if settings.security == "starttls" else False,
            tls_context=context, username=settings.username,
            password=settings.password.get_secret_value() if settings.password else None,
            local_hostname=settings.helo_name or self._domain,
        )

    async def _deliver(self, message: EmailMessage, recipients: list[str] | None = None) -> None:
        """One SMTP session for one message: connect, MAIL, RCPT per recipient (`to`, or the
        one person a direct mail is for), DATA, QUIT."""
        import aiosmtplib

        to = recipients if recipients is not None else self.config.to
        smtp = self._client()
        await self._run("connect", smtp.connect())
        try:
            await self._run("MAIL FROM", smtp.mail(self.config.from_address))
            refused: dict[str, aiosmtplib.SMTPRecipientRefused] = {}
            for recipient in to:
                try:
                    await self._run("RCPT TO", smtp.rcpt(recipient), passthrough=(aiosmtplib.SMTPRecipientRefused,))
                except aiosmtplib.SMTPRecipientRefused as exc:
                    refused[recipient] = exc
            if len(refused) == len(to):
                raise self._refused(refused)
            await self._run("DATA", smtp.data(message.as_bytes(policy=_WIRE)), body_sent=True)
            if refused:  # delivered to the others; a retry would repeat it for them
                log.warning("email_some_recipients_refused", channel_id=self.id,
                            refused={r: f"{e.code} {e.message}" for r, e in refused.items()})
        finally:
            if smtp.is_connected:
                try:
                    await smtp.quit()
                except Exception:  # the message is handed over; the goodbye does not matter
                    smtp.close()

    def _refused(self, refused: dict[str, Any]) -> ChannelError:
        words = "; ".join(f"{r}: {e.code} {e.message}" for r, e in refused.items())
        if all(400 <= e.code < 500 for e in refused.values()):
            return TransientChannelError(f"SMTP RCPT TO: {words}", hint=f"the SMTP server deferred every recipient ({words})")
        return PermanentChannelError(f"SMTP RCPT TO: {words}", hint=f"the SMTP server refused the recipients: {words}")

    # ------------------------------------------------------------------ errors

    async def _run(self, stage: str, call: Any, *, body_sent: bool = False, passthrough: tuple[type[BaseException], ...] = ()) -> Any:
        """Await one SMTP step and turn every failure into a typed channel error."""
        try:
            return await call
        except passthrough:
            raise
        except Exception as exc:
            error = self._error(stage, exc, body_sent=body_sent)
            if error is None:
                raise
            raise error from exc

    def _error(self, stage: str, exc: Exception, *, body_sent: bool) -> ChannelError | None:
        import aiosmtplib

        settings = self.config.smtp
        where = f"{settings.host}:{settings.effective_port}"
        if isinstance(exc, ChannelError):
            return exc
        if isinstance(exc, aiosmtplib.SMTPAuthenticationError) and not 400 <= exc.code < 500:
            return ChannelAuthError(f"SMTP login refused: {exc.code} {exc.message}", hint=(
                f"the SMTP server refused smtp.username / smtp.password ({exc.code} {one_line(exc.message, 300)})"))
        if isinstance(exc, aiosmtplib.SMTPResponseException):
            words = f"{exc.code} {one_line(exc.message, 500)}"
            if 400 <= exc.code < 500:
                return TransientChannelError(f"SMTP {stage}: {words}", hint=f"the SMTP server said to try later ({words})")
            if stage == "DATA" or exc.code >= 500:
                return PermanentChannelError(f"SMTP {stage}: {words}", hint=f"the SMTP server refused the message at {stage}: {words}")
        if isinstance(exc, aiosmtplib.SMTPTimeoutError | aiosmtplib.SMTPServerDisconnected) and body_sent:
            return UncertainDeliveryError(f"SMTP {stage}: {type(exc).__name__}: {exc}", hint=(
                f"the connection to {where} ended while the message was being handed over; it may have been sent"))
        if isinstance(exc, aiosmtplib.SMTPConnectTimeoutError | aiosmtplib.SMTPReadTimeoutError | TimeoutError):
            return TransientChannelError(f"SMTP {stage}: timed out", hint=f"the SMTP server {where} did not answer in time")
        cause = exc.__cause__ or exc.__context__
        if isinstance(exc, ssl.SSLCertVerificationError) or isinstance(cause, ssl.SSLCertVerificationError):
            detail = getattr(exc if isinstance(exc, ssl.SSLCertVerificationError) else cause, "verify_message", "") or str(exc)
            return PermanentChannelError(f"SMTP {stage}: certificate not trusted: {detail}", hint=(
                f"the certificate of {where} is not trusted ({detail}); fix the server's certificate, or set smtp.ca_file "
                "to the CA that signed it"))
        if isinstance(exc, ssl.SSLError) or isinstance(cause, ssl.SSLError):
            return PermanentChannelError(f"SMTP {stage}: TLS failed: {exc}", hint=(
                f"TLS with {where} failed ({exc}); check smtp.security: tls for port 465, starttls for 587"))
        if isinstance(exc, aiosmtplib.SMTPNotSupported) or (
            isinstance(exc, aiosmtplib.SMTPException) and not isinstance(exc, aiosmtplib.SMTPServerDisconnected | aiosmtplib.SMTPConnectError)
        ):
            return PermanentChannelError(f"SMTP {stage}: {exc}", hint=(
                f"the SMTP server {where} cannot do what the config asks ({exc}); check smtp.security and smtp.username"))
        if isinstance(exc, aiosmtplib.SMTPConnectError | aiosmtplib.SMTPServerDisconnected | ConnectionError | OSError):
            return TransientChannelError(f"SMTP {stage}: {exc}", hint=f"could not talk to the SMTP server {where} ({exc})")
        return None
