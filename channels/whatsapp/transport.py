"""The WhatsApp channel's way to Twilio: the official `twilio` SDK on its async path
(`AsyncTwilioHttpClient` + `create_async`), with an HTTP client of our own sent to the
configured `api_base_url`, and every failure translated into the ChannelError tree.

Twilio's create is not idempotent: a message to several numbers goes to each at once, the
numbers that already got it are remembered by its delivery key, and a retry sends only to
the rest. When some numbers got it and the others refused for good, it counts as sent.

Errors are mapped, never retried here: 429 → transient with Retry-After; 401/20003 → auth;
5xx and a lost answer to a create → UncertainDeliveryError (Twilio's create is not
idempotent: the message may exist); 63016 (the 24-hour window), 21211/21614 (bad number),
63007 (wrong sender) and other 4xx → permanent, with a hint that says what to change.
The SDK's exceptions drop the answer's headers, so the client keeps the last answer of the
current task (a context variable) for Retry-After.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Any

import structlog

from channels.base import (
    ChannelAdapter,
    ChannelAuthError,
    ChannelContext,
    ChannelError,
    Outbound,
    PermanentChannelError,
    TransientChannelError,
    UncertainDeliveryError,
)
from channels.text import SentParts
from channels.whatsapp.config import TWILIO_API, WhatsAppConnection

if TYPE_CHECKING:
    from twilio.http.response import Response
    from twilio.rest import Client

log = structlog.get_logger(__name__)

# The last HTTP answer of the current task: the SDK's exceptions drop the headers (Retry-After).
_last_response: contextvars.ContextVar[Response | None] = contextvars.ContextVar("whatsapp_last_response", default=None)


@dataclass(frozen=True)
class TwilioMessage:
    """One create call's content: a body, or a template with its variables."""

    body: str | None = None
    content_sid: str | None = None
    content_variables: str | None = None


class WhatsAppTransport(ChannelAdapter):
    """The Twilio half of WhatsAppChannel: the client, a message sent to every number it is
    for, and the error mapping; the adapter sets `_client` (at start), `_ctx` and `_sent`
    ((delivery key, number, part) → MessageSid, so a retry skips the numbers already reached)."""

    config: WhatsAppConnection
    _client: Client | None
    _ctx: ChannelContext | None
    _sent: SentParts

    def _connect(self) -> Client:
        from twilio.rest import Client

        return Client(self.config.account_sid, self.config.auth_token.get_secret_value(),
                      http_client=_http_client_class()(self.config.api_base_url, self.config.request_timeout))

    async def _fetch_account(self, client: Client) -> Any:
        account = await self._call(client.api.v2010.accounts(self.config.account_sid).fetch_async(), "fetch the account")
        if account.status != "active":
            raise ChannelAuthError(f"the Twilio account is {account.status}", hint=(
                f"the Twilio account {self.config.account_sid} is {account.status}; reactivate it in the Twilio console"))
        return account

    def _require_client(self) -> Client:
        if self._client is None:
            raise TransientChannelError("the WhatsApp channel is not started", hint="the WhatsApp channel is not running")
        return self._client

    async def _to_everyone(self, client: Client, outbound: Outbound, numbers: tuple[str, ...],
                           messages: list[TwilioMessage]) -> dict[str, str]:
        """Send to every recipient at once (each in order). Succeeds when everyone got it, or
        when some did and the rest refused for good; a retryable failure is raised so the core
        retries, and the retry skips the numbers already reached."""
        results = await asyncio.gather(*(self._to_one(client, outbound, n, messages) for n in numbers), return_exceptions=True)
        sent = {n: r for n, r in zip(numbers, results, strict=True) if isinstance(r, str)}
        failed = {n: r for n, r in zip(numbers, results, strict=True) if not isinstance(r, str)}
        for error in failed.values():
            if not isinstance(error, ChannelError):
                raise error
        errors = {n: e for n, e in failed.items() if isinstance(e, ChannelError)}  # all of them, after the loop above
        if not errors:
            return sent
        hint = "; ".join(e.hint for e in errors.values()) if len(errors) > 1 else next(iter(errors.values())).hint
        retryable = [e for e in errors.values() if isinstance(e, TransientChannelError)]
        if retryable:
            waits = [e.retry_after for e in retryable if e.retry_after is not None]
            cls = UncertainDeliveryError if any(isinstance(e, UncertainDeliveryError) for e in retryable) else TransientChannelError
            reached = f" (already delivered to {', '.join(sent)})" if sent else ""
            raise cls(f"WhatsApp {outbound.purpose}: {hint}{reached}", retry_after=max(waits) if waits else None, hint=hint)
        if sent:  # the others refused for good: the handoff still reached someone
            log.warning("whatsapp_partly_delivered", channel_id=self.id, purpose=outbound.purpose, delivered=list(sent),
                        failed={n: e.hint for n, e in errors.items()})
            return sent
        if len(errors) == 1:
            raise next(iter(errors.values()))
        auth = next((e for e in errors.values() if isinstance(e, ChannelAuthError)), None)
        if auth is not None:
            raise auth
        raise PermanentChannelError(f"WhatsApp {outbound.purpose}: {hint}", hint=hint)

    async def _to_one(self, client: Client, outbound: Outbound, number: str, messages: list[TwilioMessage], *,
                      subscriber: bool = False) -> str:
        sids = [await self._sent.send((outbound.delivery_key, number, index) if outbound.delivery_key else None,
                                      partial(self._create, client, number, message, subscriber=subscriber))
                for index, message in enumerate(messages)]
        return sids[0]

    async def _create(self, client: Client, number: str, message: TwilioMessage, *, subscriber: bool = False) -> str:
        callback = None
        if self.config.status_callback and self._ctx is not None:
            callback = f"{self._ctx.public_url.rstrip('/')}/webhooks/{self.id}"
        kwargs = {k: v for k, v in (("body", message.body), ("content_sid", message.content_sid),
                                    ("content_variables", message.content_variables), ("status_callback", callback)) if v}
        created = await self._call(
            client.messages.create_async(from_=self.config.from_number, to=number, **kwargs),
            "send a message", may_have_landed=True, number=number, template=message.content_sid is not None,
            subscriber=subscriber,
        )
        return str(created.sid)

    async def _call(self, call: Any, what: str, *, may_have_landed: bool = False, number: str | None = None,
                    template: bool = False, subscriber: bool = False) -> Any:
        """Await one SDK call and turn every failure into a typed channel error.
        `may_have_landed`: the call creates something, so a lost answer is uncertain."""
        import aiohttp
        from twilio.base.exceptions import TwilioException, TwilioRestException, TwilioServiceException

        _last_response.set(None)
        try:
            return await call
        except TwilioRestException as exc:
            raise self._api_error(what, exc.status, exc.code, exc.msg, may_have_landed, number, template, subscriber) from None
        except TwilioServiceException as exc:
            raise self._api_error(what, exc.status, exc.code, exc.detail or exc.title, may_have_landed, number, template,
                                  subscriber) from None
        except (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError) as exc:
            raise TransientChannelError(f"Twilio: could not connect to {self.config.api_base_url} ({type(exc).__name__})",
                                        hint=f"could not reach the Twilio API at {self.config.api_base_url}") from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            text = f"Twilio: no complete answer to '{what}' ({type(exc).__name__})"
            if may_have_landed:
                raise UncertainDeliveryError(text, hint="Twilio did not answer in time; the message may have been sent") from exc
            raise TransientChannelError(text, hint="Twilio did not answer in time") from exc
        except (TwilioException, ValueError) as exc:  # an answer the SDK could not read (a proxy's HTML page)
            cls = UncertainDeliveryError if may_have_landed else TransientChannelError
            raise cls(f"Twilio: unreadable answer to '{what}' ({type(exc).__name__})",
                      hint="Twilio's answer could not be read" + ("; the message may have been sent" if may_have_landed else "")) from exc

    def _api_error(self, what: str, status: int, code: Any, detail: Any, may_have_landed: bool, number: str | None,
                   template: bool, subscriber: bool = False) -> ChannelError:
        try:
            code = int(code)
        except (TypeError, ValueError):
            code = status
        detail = str(detail or f"HTTP {status}").removeprefix("Unable to create record: ").removeprefix("Unable to fetch record: ")
        message = f"Twilio refused to {what} ({code}): {detail}"
        if status == 429 or code in (20429, 63018):
            wait = _retry_after(_last_response.get())
            return TransientChannelError(message, retry_after=wait, hint=f"Twilio rate-limited us ({code}); retrying after a pause")
        if status == 401 or code == 20003:
            return ChannelAuthError(message, hint=(
                f"Twilio refused account_sid/auth_token of channel {self.id} (20003): copy both from the Twilio console again"))
        if status >= 500:
            if may_have_landed:
                return UncertainDeliveryError(message, hint=f"Twilio failed ({status}); the message may have been sent")
            return TransientChannelError(message, hint=f"Twilio is having trouble ({status})")
        hint = hint_for_code(str(code), number or "", self.config, template=template, subscriber=subscriber)
        return PermanentChannelError(message, hint=hint or f"Twilio refused to {what}: {detail} ({code})")


def hint_for_code(code: str | None, number: str, config: WhatsAppConnection, *, template: bool = False,
                  subscriber: bool = False) -> str | None:
    """What to change when Twilio refuses a message for good (by its error code), or None
    for a code with nothing to say beyond Twilio's own words."""
    who = number.removeprefix("whatsapp:") or "the recipient"
    if code == "63016" and subscriber:
        return (f"WhatsApp refused a free-form message to the subscriber {who}: they have not written to "
                f"{config.from_number} in the last 24 hours (63016). The subscriber must write first; only an approved "
                "WhatsApp template can reach them before that")
    if code == "63016":
        if getattr(config, "content_sid", None) and not template:
            return (f"WhatsApp refused a free-form message to {who}: they have not written to {config.from_number} in the last "
                    "24 hours (63016). The dispatch template opens the conversation; messages follow once they answer it")
        return (f"WhatsApp refused a free-form message to {who}: they have not written to {config.from_number} in the last "
                "24 hours (63016). Configure content_sid with an approved WhatsApp template so dispatches can start the "
                "conversation, or ask them to message the sender first")
    if code in ("21211", "21614", "63024"):
        return f"{who} is not a valid WhatsApp number ({code})" + ("" if subscriber else ": check `to`")
    if code in ("21606", "21212", "63007", "21910"):
        return f"{config.from_number} is not a WhatsApp sender of this Twilio account ({code}): check `from_number`"
    if code == "21610":
        return f"{who} has opted out of messages from {config.from_number} (21610); they must opt in again"
    if code in ("21655", "21656", "63027", "63028"):
        return f"WhatsApp refused the template ({code}): check content_sid and content_variables against the approved template"
    if code == "21617":
        return "the message is longer than Twilio accepts (21617)"
    return None


def _retry_after(response: Response | None) -> float | None:
    if response is None:
        return None
    for key, value in (response.headers or {}).items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                return None
    return None


@cache
def _http_client_class() -> type:
    """Built on first use, so validating a config does not import the SDK."""
    import aiohttp
    from twilio.http.async_http_client import AsyncTwilioHttpClient
    from twilio.http.response import Response as TwilioResponse

    class HttpClient(AsyncTwilioHttpClient):  # type: ignore[misc]  # twilio ships no type information: the base is Any
        """The SDK's aiohttp client interface, sent to `api_base_url` instead of api.twilio.com,
        with a real timeout on every call (the SDK passes none unless asked), one connection
        pool made inside the event loop, basic auth as a header (aiohttp deprecates its
        BasicAuth), and the last answer kept for the error mapping (Retry-After)."""

        session: aiohttp.ClientSession | None  # set by the SDK's __init__ (None), which mypy cannot see: no stubs

        def __init__(self, base_url: str, timeout: float) -> None:
            super().__init__(pool_connections=False, timeout=timeout)
            self._base_url = base_url

        async def request(self, method: str, url: str, params: Any = None, data: Any = None, headers: Any = None,
                          auth: Any = None, timeout: float | None = None, allow_redirects: bool = False) -> Response:
            if self.session is None:  # made here, inside the event loop; one pool for every call
                self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
            if url.startswith(TWILIO_API):
                url = self._base_url + url[len(TWILIO_API):]
            headers = dict(headers or {})
            if auth is not None:
                credentials = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
                headers["Authorization"] = f"Basic {credentials}"
            async with self.session.request(
                method.upper(), url, params=params, data=data, headers=headers, allow_redirects=allow_redirects,
                timeout=aiohttp.ClientTimeout(total=timeout or self.timeout),
            ) as answer:
                response = TwilioResponse(answer.status, await answer.text(), answer.headers)
            _last_response.set(response)
            return response

        async def close(self) -> None:
            if self.session is not None:
                await self.session.close()
                self.session = None

    return HttpClient
