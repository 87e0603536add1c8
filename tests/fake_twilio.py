"""A fake Twilio REST API on 127.0.0.1, and Twilio's webhook calls to the desk, for the WhatsApp tests and bench.

It stands in for Twilio (the far side of the real `twilio` SDK), never for our code. It answers
the two resources the channel uses, the way Twilio does:

- `POST /2010-04-01/Accounts/{sid}/Messages.json` (form-encoded): 201 with the message
  resource, or Twilio's JSON error `{"code", "message", "more_info", "status"}`;
- `GET /2010-04-01/Accounts/{sid}.json`: the account.

It is strict where Twilio is strict, so tests catch what production would refuse: HTTP basic
auth with the account SID and auth token (401, code 20003), the SID in the path must be the
authenticated one, `To` and `From` must both be `whatsapp:` addresses in E.164 (21211, 21910),
`From` must be the account's WhatsApp sender (63007), a message needs a `Body` or a
`ContentSid` (21619), a body is at most 1600 characters (21617), and `ContentVariables` must
be a JSON object of strings without line breaks (21656, as WhatsApp refuses those in template
parameters). Every request is recorded, accepted or not. With `session_window=True` it also
keeps WhatsApp's 24-hour rule: a free-form body (not a template) to a number that has not
written to the sender (an `inbound(...)` call; `expire(number)` plays the day passing) is
refused with 63016, as a subscriber's chat on a front would be.

Test hooks: `fail(...)` scripts error answers (63016, 429 with Retry-After, 500, 401 …),
optionally only for one recipient; `hold()` keeps Messages.json requests unanswered (after
storing them) until `release()`; `latency` delays every answer; `wait_for` waits on recorded
traffic instead of sleeping; `inbound(...)` builds a webhook call signed the way Twilio signs
(HMAC-SHA1 over the URL and the sorted parameters, written here independently of the SDK's
validator, so the test does not check the SDK against itself).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tests.fake_server import LocalHttpServer

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "f00dfeedf00dfeedf00dfeedf00dfeed"
SENDER = "whatsapp:+14155238886"
ANA_PHONE = "whatsapp:+34600111222"  # a recipient (support staff)
BEN_PHONE = "whatsapp:+447700900123"  # another recipient
CARLA_PHONE = "whatsapp:+15551234567"  # a subscriber, writing to the sender as a front
DAN_PHONE = "whatsapp:+4915112345678"  # another subscriber
BODY_LIMIT = 1600
_E164 = re.compile(r"^whatsapp:\+[1-9]\d{6,14}$")


@dataclass
class Call:
    """One request the fake received."""

    method: str
    path: str
    form: dict[str, str]
    authorized: bool
    status: int = 0
    at: float = field(default_factory=time.monotonic)  # when it arrived (bench latencies)


@dataclass
class Fault:
    status: int
    code: int
    message: str
    to: str | None = None  # only for this recipient
    headers: dict[str, str] = field(default_factory=dict)


class FakeTwilio(LocalHttpServer):
    def __init__(self, *, account_sid: str = ACCOUNT_SID, auth_token: str = AUTH_TOKEN, senders: tuple[str, ...] = (SENDER,),
                 latency: float = 0.0, friendly_name: str = "Acme Support", account_status: str = "active",
                 session_window: bool = False) -> None:
        super().__init__()
        self.account_sid, self.auth_token, self.senders, self.latency = account_sid, auth_token, senders, latency
        self.session_window = session_window
        self.open_sessions: set[str] = set()  # numbers that wrote to the sender "in the last 24 hours"
        self.friendly_name, self.account_status = friendly_name, account_status
        self.calls: list[Call] = []
        self.messages: list[dict[str, Any]] = []  # every message Twilio accepted, as its resource
        self._faults: list[Fault] = []
        self._held = False
        self._release = asyncio.Event()
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ server

    @property
    def base_url(self) -> str:
        """What the channel's `api_base_url` should be."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeTwilio:
        app = web.Application()
        app.router.add_post("/2010-04-01/Accounts/{sid}/Messages.json", self._create_message)
        app.router.add_get("/2010-04-01/Accounts/{sid}.json", self._fetch_account)
        await self._serve(app)
        return self

    async def stop(self) -> None:
        self.release()
        await self._stop_serving()

    # ------------------------------------------------------------------ test hooks

    def fail(self, status: int, code: int, message: str, *, times: int = 1, to: str | None = None,
             retry_after: int | None = None) -> None:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        self._faults.extend(Fault(status, code, message, to, headers) for _ in range(times))

    def hold(self) -> None:
        """Store message requests but answer none until release() (an answer lost in transit)."""
        self._held = True
        self._release.clear()

    def release(self) -> None:
        self._held = False
        self._release.set()

    def expire(self, number: str) -> None:
        """A day passes without `number` writing: free-form messages to it fail (session_window)."""
        self.open_sessions.discard(number)

    def requests(self) -> list[dict[str, str]]:
        """The form of every Messages.json request, accepted or refused."""
        return [c.form for c in self.calls if c.path.endswith("/Messages.json")]

    def sent_to(self, number: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["to"] == number]

    def inbound(self, url: str, *, body: str | None = "Hi", sender: str = ANA_PHONE, profile_name: str | None = "Sam",
                media: list[str] | None = None, auth_token: str | None = None, **extra: str) -> tuple[bytes, dict[str, str]]:
        """A WhatsApp message to our sender, as Twilio POSTs it to the webhook URL:
        (form-encoded body, headers with X-Twilio-Signature)."""
        sid = "SM" + secrets.token_hex(16)
        params: dict[str, str] = {
            "SmsMessageSid": sid, "NumMedia": str(len(media or [])), "SmsSid": sid, "SmsStatus": "received",
            "To": self.senders[0], "NumSegments": "1", "MessageSid": sid, "AccountSid": self.account_sid,
            "From": sender, "ApiVersion": "2010-04-01", "WaId": sender.removeprefix("whatsapp:+"),
            "MessageType": "image" if media else "text", "Body": body or "",
        }
        if profile_name is not None:
            params["ProfileName"] = profile_name
        for i, content_type in enumerate(media or []):
            params[f"MediaContentType{i}"] = content_type
            params[f"MediaUrl{i}"] = f"https://api.twilio.com/2010-04-01/Accounts/{self.account_sid}/Messages/{sid}/Media/ME{i:032d}"
        params.update(extra)
        self.open_sessions.add(sender)
        return self.signed(url, params, auth_token=auth_token)

    def signed(self, url: str, params: dict[str, str], *, auth_token: str | None = None) -> tuple[bytes, dict[str, str]]:
        return urlencode(params).encode(), {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": signature(auth_token or self.auth_token, url, params),
            "I-Twilio-Idempotency-Token": secrets.token_hex(8),
        }

    # ------------------------------------------------------------------ handlers

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return hmac.compare_digest(user, self.account_sid) and hmac.compare_digest(password, self.auth_token)

    @staticmethod
    def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        body = {"code": code, "message": message, "more_info": f"https://www.twilio.com/docs/errors/{code}", "status": status}
        return web.json_response(body, status=status, headers=headers)

    async def _record(self, call: Call) -> None:
        self.calls.append(call)
        await self._notify()

    async def _fetch_account(self, request: web.Request) -> web.Response:
        if self.latency:
            await asyncio.sleep(self.latency)
        call = Call("GET", request.path, {}, self._authorized(request))
        await self._record(call)
        if not call.authorized or request.match_info["sid"] != self.account_sid:
            call.status = 401
            return self._error(401, 20003, "Authenticate")
        call.status = 200
        now = format_datetime(datetime.now(UTC), usegmt=True)
        return web.json_response({
            "sid": self.account_sid, "owner_account_sid": self.account_sid, "friendly_name": self.friendly_name,
            "status": self.account_status, "type": "Full", "date_created": now, "date_updated": now,
            "auth_token": self.auth_token, "uri": f"/2010-04-01/Accounts/{self.account_sid}.json",
        })

    async def _create_message(self, request: web.Request) -> web.Response:
        if self.latency:
            await asyncio.sleep(self.latency)
        if request.content_type != "application/x-www-form-urlencoded":
            return self._error(400, 20001, "Expected a form-encoded body")
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        call = Call("POST", request.path, form, self._authorized(request))
        await self._record(call)
        response = self._answer(call, request.match_info["sid"])
        call.status = response.status
        if self._held and response.status == 201:
            await self._release.wait()  # stored, but the client never hears back in time
        return response

    def _answer(self, call: Call, sid: str) -> web.Response:
        form = call.form
        if not call.authorized or sid != self.account_sid:
            return self._error(401, 20003, "Authenticate")
        to, sender = form.get("To", ""), form.get("From", "")
        fault = next((f for f in self._faults if f.to in (None, to)), None)
        if fault is not None:
            self._faults.remove(fault)
            return self._error(fault.status, fault.code, fault.message, fault.headers)
        if not to:
            return self._error(400, 21604, "A 'To' phone number is required.")
        if not sender:
            return self._error(400, 21603, "A 'From' phone number is required.")
        if to.startswith("whatsapp:") != sender.startswith("whatsapp:"):
            return self._error(400, 21910, "Invalid From and To pair. From and To should be of the same channel")
        if not _E164.match(to):
            return self._error(400, 21211, f"Invalid 'To' Phone Number: {to.removeprefix('whatsapp:')}")
        if sender not in self.senders:
            return self._error(400, 63007, "Twilio could not find a Channel with the specified From address")
        body, content_sid = form.get("Body"), form.get("ContentSid")
        if not body and not content_sid and not form.get("MediaUrl"):
            return self._error(400, 21619, "A text message body or media urls must be specified.")
        if self.session_window and not content_sid and to not in self.open_sessions:
            return self._error(400, 63016, "Failed to send freeform message because you are outside the allowed window. "
                                           "If you want to send messages outside a session window, please use a Template.")
        if body and len(body) > BODY_LIMIT:
            return self._error(400, 21617, "The concatenated message body exceeds the 1600 character limit.")
        if content_sid:
            if not re.fullmatch(r"HX[0-9a-f]{32}", content_sid):
                return self._error(400, 21655, "The ContentSid is Invalid.")
            if body:
                return self._error(400, 21656, "Body and ContentSid cannot both be set")
            try:
                variables = json.loads(form.get("ContentVariables") or "{}")
            except ValueError:
                return self._error(400, 21656, "The ContentVariables Parameter is invalid.")
            if not isinstance(variables, dict) or not all(
                isinstance(v, str) and v.strip() and "\n" not in v and "\t" not in v and "     " not in v for v in variables.values()
            ):
                return self._error(400, 21656, "The ContentVariables Parameter is invalid.")
        message_sid = f"SM{next(self._ids):032x}"
        now = format_datetime(datetime.now(UTC), usegmt=True)
        resource = {
            "sid": message_sid, "account_sid": self.account_sid, "to": to, "from": sender, "body": body or "",
            "status": "queued", "num_segments": "1", "num_media": "0", "direction": "outbound-api",
            "api_version": "2010-04-01", "price": None, "price_unit": "USD", "error_code": None, "error_message": None,
            "date_created": now, "date_updated": now, "date_sent": None, "messaging_service_sid": None,
            "uri": f"/2010-04-01/Accounts/{self.account_sid}/Messages/{message_sid}.json", "subresource_uris": {},
            "content_sid": content_sid, "content_variables": form.get("ContentVariables"),
            "status_callback": form.get("StatusCallback"),
        }
        self.messages.append(resource)
        return web.json_response(resource, status=201)


def signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    """Twilio's X-Twilio-Signature: base64(HMAC-SHA1(auth token, url + each key+value, sorted by key))."""
    data = url + "".join(key + params[key] for key in sorted(params))
    return base64.b64encode(hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()).decode()
