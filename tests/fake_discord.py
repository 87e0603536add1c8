"""A fake Discord, for tests and the benchmark: the REST API and the gateway on 127.0.0.1.

It stands in for the provider (the far side of the real discord.py client), never for our
code. REST: the routes the adapter uses (users/@me, oauth2/applications/@me, channels,
messages, threads), as strict as Discord about what it accepts: embed limits (256 title,
4096 description, 25 fields, 1024 per value, 6000 in all), 2000 characters of content,
button shapes, 25-character nonces (and `enforce_nonce`: a repeated nonce returns the
message already created), `Authorization: Bot <token>`. Answers carry
`Content-Type: application/json` exactly, as discord.py requires. It records every request
and can be told to fail (429 with retry_after, 5xx, 403, 404 …) or to lose an answer.
Direct messages: POST /users/@me/channels opens one per person (the same channel every
time; 404 Unknown User for a stranger, 50007 for a bot), where posts work as in a channel
but carry no guild_id and no member; a person in `dm_closed` takes none (403, 50007).
Replies (`message_reference`) come back with their `referenced_message`, as Discord sends them.

Gateway: an aiohttp websocket that says HELLO (op 10), acks heartbeats (op 11), answers
IDENTIFY with READY and GUILD_CREATE (the guild, its channels and active threads), closes
with 4014 when the Message Content intent is asked for but not allowed, and then
dispatches what happens: THREAD_CREATE when a thread is started over REST, MESSAGE_CREATE
for every message posted over REST (our bot's own echoes) and for messages people write
(`human_message`).

Discord → the desk's interactions endpoint: `interaction()` builds a payload signed with
Ed25519 the way Discord signs it (timestamp + raw body).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web
from nacl.signing import SigningKey

from tests.fake_server import LocalHttpServer

GUILD_ID = 900_000_000_000_000_001
STAFF_CHANNEL = 900_000_000_000_000_010
GENERAL_CHANNEL = 900_000_000_000_000_011
VOICE_CHANNEL = 900_000_000_000_000_012
APPLICATION_ID = 900_000_000_000_000_100
MESSAGE_CONTENT = 1 << 15
BOT_USER = {"id": "900000000000000200", "username": "handoff-desk", "discriminator": "0", "global_name": "Handoff Desk",
            "avatar": None, "bot": True}
SAM = {"id": "900000000000000301", "username": "sam", "discriminator": "0", "global_name": "Sam", "avatar": None}
KIM = {"id": "900000000000000302", "username": "kim", "discriminator": "0", "global_name": "Kim", "avatar": None}
OTHER_BOT = {"id": "900000000000000303", "username": "helper", "discriminator": "0", "global_name": None,
             "avatar": None, "bot": True}

_snowflakes = itertools.count(1_300_000_000_000_000_000)


def snowflake() -> str:
    return str(next(_snowflakes))


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """Discord's JSON answers: discord.py only parses a body whose Content-Type is exactly this."""
    return web.Response(status=status, body=json.dumps(body).encode(),
                        headers={"Content-Type": "application/json", **(headers or {})})


@dataclass
class Call:
    """One REST request the fake received."""

    method: str
    path: str
    route: str  # "POST /channels/{id}/messages"
    json: Any
    headers: dict[str, str]


@dataclass
class Fault:
    status: int = 500
    body: Any = None  # JSON body (dict) or text (str)
    headers: dict[str, str] = field(default_factory=dict)
    lose_answer: bool = False  # do the work, then never answer (the client times out)


class FakeDiscord(LocalHttpServer):
    def __init__(self, *, token: str, message_content_allowed: bool = True, latency: float = 0.0) -> None:
        super().__init__()
        self.token = token
        self.message_content_allowed = message_content_allowed
        self.latency = latency
        self.signing_key = SigningKey.generate()
        self.public_key = self.signing_key.verify_key.encode().hex()
        self.calls: list[Call] = []
        self.identifies: list[dict[str, Any]] = []
        self.dispatched: list[dict[str, Any]] = []  # every gateway event sent, in order
        self.channels: dict[int, dict[str, Any]] = {
            STAFF_CHANNEL: self._text_channel(STAFF_CHANNEL, "handoffs", 1),
            GENERAL_CHANNEL: self._text_channel(GENERAL_CHANNEL, "general", 2),
            VOICE_CHANNEL: {**self._text_channel(VOICE_CHANNEL, "Lounge", 3), "type": 2, "bitrate": 64000, "user_limit": 0,
                            "rtc_region": None},
        }
        self.threads: dict[int, dict[str, Any]] = {}
        self.dms: dict[int, dict[str, Any]] = {}  # direct message channels, by id
        self.dm_closed: set[str] = set()  # user ids that take no direct messages from the bot
        self.messages: dict[int, list[dict[str, Any]]] = {STAFF_CHANNEL: [], GENERAL_CHANNEL: []}
        self._nonces: dict[tuple[int, str], dict[str, Any]] = {}
        self._faults: dict[str, deque[Fault]] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._ready_sockets: list[web.WebSocketResponse] = []
        self._seq = 0
        self._query: dict[str, str] = {}
        self._closing = asyncio.Event()
        self.base = ""

    # ------------------------------------------------------------------ server

    async def start(self) -> FakeDiscord:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        port = await self._serve(app)
        self.base = f"127.0.0.1:{port}"
        return self

    @property
    def api_url(self) -> str:
        return f"http://{self.base}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://{self.base}/gateway"

    async def stop(self) -> None:
        self._closing.set()
        for ws in list(self._sockets):
            await ws.close(code=1001)
        await self._stop_serving()

    # ------------------------------------------------------------------ scripting and looking

    def fail_next(self, route: str, *faults: Fault) -> None:
        """route like "POST /channels/{id}/messages" (ids replaced by {id})."""
        self._faults.setdefault(route, deque()).extend(faults)

    def calls_to(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]

    def posts(self, channel_id: int | str) -> list[dict[str, Any]]:
        return list(self.messages.get(int(channel_id), []))

    def edits(self, channel_id: int | str, message_id: int | str) -> list[Any]:
        """The bodies of every edit (PATCH) of one message, in order, as the client sent them."""
        path = f"/channels/{channel_id}/messages/{message_id}"
        return [c.json for c in self.calls if c.method == "PATCH" and c.path == path]

    # ------------------------------------------------------------------ REST

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        route = request.method + " " + re.sub(r"/\d+", "/{id}", path)
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            if request.content_type != "application/json":
                return json_response({"message": "Unsupported content type", "code": 50035}, 400)
            body = json.loads(raw)
        self.calls.append(Call(request.method, path, route, body, dict(request.headers)))
        await self._notify()
        if self.latency:
            await asyncio.sleep(self.latency)
        fault = self._faults.get(route, deque()).popleft() if self._faults.get(route) else None
        if fault is not None and not fault.lose_answer:
            if isinstance(fault.body, str):
                return web.Response(status=fault.status, text=fault.body, content_type="text/html", headers=fault.headers)
            return json_response(fault.body if fault.body is not None else {"message": "error", "code": 0},
                                 fault.status, fault.headers)
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return json_response({"message": "401: Unauthorized", "code": 0}, 401)
        handler = {
            "GET /users/@me": self._me,
            "GET /oauth2/applications/@me": self._application,
            "GET /channels/{id}": self._get_channel,
            "POST /channels/{id}/messages": self._create_message,
            "GET /channels/{id}/messages": self._list_messages,
            "GET /channels/{id}/messages/{id}": self._get_message,
            "PATCH /channels/{id}/messages/{id}": self._edit_message,
            "POST /channels/{id}/messages/{id}/threads": self._start_thread,
            "POST /users/@me/channels": self._open_dm,
        }.get(route)
        if handler is None:
            return json_response({"message": "404: Not Found", "code": 0}, 404)
        ids = [int(x) for x in re.findall(r"/(\d+)", path)]
        self._query = dict(request.query)
        status, answer = await handler(ids, body)
        await self._notify()
        if fault is not None:  # done, but the answer is lost on the way back
            await self._closing.wait()
        return json_response(answer, status)

    async def _me(self, _ids: list[int], _body: Any) -> tuple[int, Any]:
        return 200, {**BOT_USER, "flags": 0, "mfa_enabled": False, "verified": True}

    async def _application(self, _ids: list[int], _body: Any) -> tuple[int, Any]:
        return 200, {
            "id": str(APPLICATION_ID), "name": "Handoff Desk", "description": "", "icon": None, "bot_public": False,
            "bot_require_code_grant": False, "owner": SAM, "verify_key": self.public_key, "flags": 0, "team": None,
            "summary": "", "interactions_endpoint_url": None,
        }

    def _channel(self, channel_id: int) -> dict[str, Any] | None:
        return self.channels.get(channel_id) or self.threads.get(channel_id) or self.dms.get(channel_id)

    def dm_of(self, user: dict[str, Any]) -> int | None:
        """The id of `user`'s direct message with the bot, once it was opened."""
        return next((i for i, c in self.dms.items() if c["recipients"][0]["id"] == user["id"]), None)

    async def _open_dm(self, _ids: list[int], body: Any) -> tuple[int, Any]:
        recipient = str((body or {}).get("recipient_id") or "")
        if not re.fullmatch(r"\d{15,21}", recipient):
            return 400, _invalid("recipient_id: Value is not snowflake.")
        user = next((u for u in (SAM, KIM, OTHER_BOT, BOT_USER) if u["id"] == recipient), None)
        if user is None:
            return 404, {"message": "Unknown User", "code": 10013}
        if user.get("bot"):
            return 400, {"message": "Cannot send messages to this user", "code": 50007}
        known = self.dm_of(user)
        if known is None:
            known = int(snowflake())
            self.dms[known] = {"id": str(known), "type": 1, "last_message_id": None, "flags": 0, "recipients": [user]}
            self.messages[known] = []
        return 200, self.dms[known]

    async def _get_channel(self, ids: list[int], _body: Any) -> tuple[int, Any]:
        channel = self._channel(ids[0])
        if channel is None:
            return 404, {"message": "Unknown Channel", "code": 10003}
        return 200, channel

    async def _get_message(self, ids: list[int], _body: Any) -> tuple[int, Any]:
        message = next((m for m in self.messages.get(ids[0], []) if int(m["id"]) == ids[1]), None)
        return (200, message) if message else (404, {"message": "Unknown Message", "code": 10008})

    async def _list_messages(self, ids: list[int], _body: Any) -> tuple[int, Any]:
        """Newest first, `limit` 1-100 (default 50), as Discord lists a channel's messages."""
        if self._channel(ids[0]) is None:
            return 404, {"message": "Unknown Channel", "code": 10003}
        limit = int(self._query.get("limit") or 50)
        if not 1 <= limit <= 100:
            return 400, _invalid("limit: must be between 1 and 100")
        newest = list(reversed(self.messages.get(ids[0], [])))[:limit]
        return 200, [{k: v for k, v in m.items() if k != "request"} for m in newest]

    async def _edit_message(self, ids: list[int], body: Any) -> tuple[int, Any]:
        status, message = await self._get_message(ids, None)
        if status != 200:
            return status, message
        problem = _check_components(body.get("components", message.get("components")))
        for embed in body.get("embeds") or []:
            problem = problem or _check_embed(embed)[0]
        if problem:
            return 400, _invalid(problem)
        message.update({k: v for k, v in body.items() if k in ("content", "embeds", "components")})
        message["edited_timestamp"] = now_iso()
        return 200, message

    async def _create_message(self, ids: list[int], body: Any) -> tuple[int, Any]:
        channel_id = ids[0]
        channel = self._channel(channel_id)
        if channel is None:
            return 404, {"message": "Unknown Channel", "code": 10003}
        if channel["type"] not in (0, 1, 5, 11):
            return 400, {"message": "Cannot send messages in a non-text channel", "code": 50008}
        if channel["type"] == 1 and channel["recipients"][0]["id"] in self.dm_closed:
            return 403, {"message": "Cannot send messages to this user", "code": 50007}
        problem = _check_message(body)
        if problem:
            return 400, _invalid(problem)
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce") and (channel_id, str(nonce)) in self._nonces:
            return 200, self._nonces[(channel_id, str(nonce))]
        message = self.message_payload(channel_id, BOT_USER, body.get("content", ""), embeds=body.get("embeds") or [],
                                       components=body.get("components") or [], flags=body.get("flags", 0),
                                       **self._reply_to((body.get("message_reference") or {}).get("message_id"), channel_id))
        if nonce is not None:
            message["nonce"] = nonce
            self._nonces[(channel_id, str(nonce))] = message
        message["request"] = body  # what the client sent (allowed_mentions …), for tests
        self.messages.setdefault(channel_id, []).append(message)
        await self._dispatch("MESSAGE_CREATE", {k: v for k, v in message.items() if k != "request"})
        return 200, message

    async def _start_thread(self, ids: list[int], body: Any) -> tuple[int, Any]:
        channel_id, message_id = ids
        channel = self.channels.get(channel_id)
        if channel is None:
            return 404, {"message": "Unknown Channel", "code": 10003}
        message = next((m for m in self.messages.get(channel_id, []) if int(m["id"]) == message_id), None)
        if message is None:
            return 404, {"message": "Unknown Message", "code": 10008}
        if message_id in self.threads:
            return 400, {"message": "A thread has already been created for this message", "code": 160004}
        name = (body or {}).get("name") or ""
        if not 1 <= len(name) <= 100:
            return 400, _invalid("name: must be between 1 and 100 in length")
        if (body or {}).get("auto_archive_duration", 1440) not in (60, 1440, 4320, 10080):
            return 400, _invalid("auto_archive_duration: invalid")
        thread = {
            "id": str(message_id), "type": 11, "guild_id": str(GUILD_ID), "parent_id": str(channel_id),
            "owner_id": BOT_USER["id"], "name": name, "last_message_id": None, "message_count": 0, "member_count": 1,
            "rate_limit_per_user": 0, "flags": 0, "total_message_sent": 0,
            "thread_metadata": {"archived": False, "auto_archive_duration": body.get("auto_archive_duration", 1440),
                                "archive_timestamp": now_iso(), "locked": False},
        }
        self.threads[message_id] = thread
        self.messages[message_id] = []
        message["thread"] = thread
        await self._dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return 201, thread

    @staticmethod
    def _text_channel(channel_id: int, name: str, position: int) -> dict[str, Any]:
        return {"id": str(channel_id), "type": 0, "guild_id": str(GUILD_ID), "name": name, "position": position,
                "permission_overwrites": [], "nsfw": False, "parent_id": None, "topic": None, "rate_limit_per_user": 0,
                "last_message_id": None, "flags": 0}

    def message_payload(self, channel_id: int, author: dict[str, Any], content: str, **extra: Any) -> dict[str, Any]:
        message = {
            "id": snowflake(), "channel_id": str(channel_id), "guild_id": str(GUILD_ID), "author": author,
            "content": content, "timestamp": now_iso(), "edited_timestamp": None, "tts": False,
            "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
            "pinned": False, "type": 0, "flags": 0, "components": [],
        }
        if not author.get("bot"):
            message["member"] = {"roles": [], "joined_at": now_iso(), "deaf": False, "mute": False, "flags": 0,
                                 "nick": None}
        if channel_id in self.dms:  # a direct message belongs to no guild
            message.pop("guild_id")
            message.pop("member", None)
        message.update(extra)
        return message

    def _reply_to(self, message_id: Any, channel_id: int) -> dict[str, Any]:
        """What a reply to `message_id` carries: the reference and the message it replies to."""
        replied = next((m for m in self.messages.get(channel_id, []) if message_id and int(m["id"]) == int(message_id)), None)
        if replied is None:
            return {}
        shown = {k: v for k, v in replied.items() if k not in ("request", "referenced_message")}
        return {"type": 19, "message_reference": {"type": 0, "message_id": replied["id"], "channel_id": str(channel_id)},
                "referenced_message": shown}

    # ------------------------------------------------------------------ people

    async def human_message(self, channel_id: int | str, text: str, *, author: dict[str, Any] = SAM,
                            reply_to: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        """A person (or another bot) writes in a channel, thread or direct message (a reply
        to `reply_to` when given): stored, and dispatched over the gateway as MESSAGE_CREATE."""
        people = {u["id"]: u for u in (SAM, KIM, OTHER_BOT, BOT_USER)}
        mentions = [people[i] for i in dict.fromkeys(re.findall(r"<@!?(\d+)>", text)) if i in people]
        replying = self._reply_to(reply_to["id"], int(channel_id)) if reply_to else {}
        message = self.message_payload(int(channel_id), author, text, mentions=mentions, **replying, **extra)
        self.messages.setdefault(int(channel_id), []).append(message)
        await self._dispatch("MESSAGE_CREATE", message)
        return message

    # ------------------------------------------------------------------ gateway

    async def wait_connected(self, timeout: float = 5.0) -> None:
        await self.wait_for(lambda: self._ready_sockets, timeout)

    async def revoke_token(self) -> None:
        """The token is reset in the Developer Portal: open sessions are closed with 4004 and
        every IDENTIFY after that is refused."""
        self.token = "revoked"
        for ws in list(self._ready_sockets):
            await ws.close(code=4004, message=b"Authentication failed.")

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        try:
            await ws.send_json({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None})
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                op = payload.get("op")
                if op == 1:
                    await ws.send_json({"op": 11, "d": None, "s": None, "t": None})
                elif op == 2:
                    await self._identify(ws, payload.get("d") or {})
                elif op == 6:  # RESUME: we keep no sessions, so it must identify again
                    await ws.send_json({"op": 9, "d": False, "s": None, "t": None})
        finally:
            for sockets in (self._sockets, self._ready_sockets):
                if ws in sockets:
                    sockets.remove(ws)
            await self._notify()
        return ws

    async def _identify(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> None:
        self.identifies.append(data)
        if data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        if data.get("intents", 0) & MESSAGE_CONTENT and not self.message_content_allowed:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        self._seq += 1
        ready = {"v": 10, "user": BOT_USER, "guilds": [{"id": str(GUILD_ID), "unavailable": True}],
                 "session_id": "fake-session", "resume_gateway_url": self.gateway_url, "shard": [0, 1],
                 "application": {"id": str(APPLICATION_ID), "flags": 0}, "private_channels": [], "relationships": []}
        await ws.send_json({"op": 0, "t": "READY", "s": self._seq, "d": ready})
        self._seq += 1
        await ws.send_json({"op": 0, "t": "GUILD_CREATE", "s": self._seq, "d": self._guild()})
        self._ready_sockets.append(ws)
        await self._notify()

    def _guild(self) -> dict[str, Any]:
        return {
            "id": str(GUILD_ID), "name": "Acme Support", "icon": None, "splash": None, "discovery_splash": None,
            "owner_id": SAM["id"], "afk_channel_id": None, "afk_timeout": 300, "verification_level": 0,
            "default_message_notifications": 0, "explicit_content_filter": 0, "features": [], "mfa_level": 0,
            "roles": [{"id": str(GUILD_ID), "name": "@everyone", "permissions": "0", "position": 0, "color": 0,
                       "hoist": False, "managed": False, "mentionable": False, "flags": 0}],
            "emojis": [], "stickers": [], "application_id": None, "system_channel_id": None, "system_channel_flags": 0,
            "rules_channel_id": None, "vanity_url_code": None, "description": None, "banner": None, "premium_tier": 0,
            "preferred_locale": "en-US", "public_updates_channel_id": None, "nsfw_level": 0,
            "premium_progress_bar_enabled": False, "joined_at": now_iso(), "large": False, "unavailable": False,
            "member_count": 3, "members": [], "voice_states": [], "presences": [], "stage_instances": [],
            "guild_scheduled_events": [], "channels": list(self.channels.values()),
            "threads": [t for t in self.threads.values() if not t["thread_metadata"]["archived"]],
        }

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        self.dispatched.append({"t": event, "d": data})
        for ws in list(self._ready_sockets):
            self._seq += 1
            try:
                await ws.send_json({"op": 0, "t": event, "s": self._seq, "d": data})
            except ConnectionError:
                pass
        await self._notify()

    # ------------------------------------------------------------------ interactions (Discord → the desk)

    def signed(self, payload: dict[str, Any], *, timestamp: int | None = None) -> tuple[bytes, dict[str, str]]:
        """The body and headers Discord sends: Ed25519 over timestamp + raw body."""
        body = json.dumps(payload).encode()
        ts = str(int(time.time()) if timestamp is None else timestamp)
        signature = self.signing_key.sign(ts.encode() + body).signature.hex()
        return body, {"content-type": "application/json", "x-signature-ed25519": signature, "x-signature-timestamp": ts}

    def button_click(self, message: dict[str, Any], custom_id: str, *, user: dict[str, Any] = SAM) -> dict[str, Any]:
        """A MESSAGE_COMPONENT interaction: `user` pressed a button on `message`; in a direct
        message Discord sends `user` and the bot-DM context instead of a guild and a member."""
        channel = self._channel(int(message["channel_id"])) or {}
        click = {
            "id": snowflake(), "application_id": str(APPLICATION_ID), "type": 3, "token": "interaction-token",
            "version": 1, "guild_id": str(GUILD_ID), "channel_id": message["channel_id"],
            "channel": {"id": message["channel_id"], "type": channel.get("type", 0), "parent_id": channel.get("parent_id")},
            "member": {"user": user, "nick": None, "roles": [], "permissions": "0"}, "context": 0,
            "message": {k: v for k, v in message.items() if k != "request"},
            "data": {"custom_id": custom_id, "component_type": 2},
        }
        if channel.get("type") == 1:
            del click["guild_id"], click["member"]
            click.update(user=user, context=1)
            click["channel"] = {"id": message["channel_id"], "type": 1, "recipients": channel.get("recipients")}
        return click


# --------------------------------------------------------------------------- validation, as strict as Discord


def _invalid(problem: str) -> dict[str, Any]:
    return {"message": "Invalid Form Body", "code": 50035, "errors": {"_problem": problem}}


def _check_message(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "body must be an object"
    content = body.get("content") or ""
    if len(content) > 2000:
        return "content: must be 2000 or fewer in length"
    embeds = body.get("embeds") or []
    if not content and not embeds:
        return "cannot send an empty message (code 50006)"
    if len(embeds) > 10:
        return "embeds: at most 10"
    total = 0
    for embed in embeds:
        problem, size = _check_embed(embed)
        if problem:
            return problem
        total += size
    if total > 6000:
        return "embeds: total size exceeds 6000"
    nonce = body.get("nonce")
    if nonce is not None and len(str(nonce)) > 25:
        return "nonce: must be 25 or fewer in length"
    return _check_components(body.get("components"))


def _check_embed(embed: dict[str, Any]) -> tuple[str | None, int]:
    title, description = embed.get("title") or "", embed.get("description") or ""
    fields = embed.get("fields") or []
    footer = (embed.get("footer") or {}).get("text") or ""
    author = (embed.get("author") or {}).get("name") or ""
    if len(title) > 256:
        return "embeds.0.title: must be 256 or fewer in length", 0
    if len(description) > 4096:
        return "embeds.0.description: must be 4096 or fewer in length", 0
    if len(fields) > 25:
        return "embeds.0.fields: must be 25 or fewer in length", 0
    for f in fields:
        if not f.get("name") or len(f["name"]) > 256:
            return "embeds.0.fields.name: must be between 1 and 256 in length", 0
        if not f.get("value") or len(f["value"]) > 1024:
            return "embeds.0.fields.value: must be between 1 and 1024 in length", 0
    if len(footer) > 2048:
        return "embeds.0.footer.text: must be 2048 or fewer in length", 0
    url = embed.get("url")
    if url is not None and not re.match(r"^https?://", url):
        return "embeds.0.url: Not a well formed URL", 0
    size = len(title) + len(description) + len(footer) + len(author) + sum(len(f["name"]) + len(f["value"]) for f in fields)
    return None, size


def _check_components(rows: Any) -> str | None:
    for row in rows or []:
        if row.get("type") != 1 or not 1 <= len(row.get("components") or []) <= 5:
            return "components: an action row holds 1 to 5 components"
        for button in row["components"]:
            if button.get("type") != 2:
                return "components: only buttons are supported here"
            if not 1 <= len(button.get("label") or "") <= 80:
                return "components.label: must be between 1 and 80 in length"
            if button.get("style") == 5:
                if not re.match(r"^https?://", button.get("url") or "") or "custom_id" in button:
                    return "components: a link button needs a url and no custom_id"
            elif not 1 <= len(button.get("custom_id") or "") <= 100 or "url" in button:
                return "components: a button needs a custom_id of 1 to 100 characters"
    return None
