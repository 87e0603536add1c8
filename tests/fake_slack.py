"""A fake Slack, for tests and the benchmark: the Web API on 127.0.0.1, and what Slack sends back.

It stands in for the provider (the far side of the real slack_sdk client), never for our
code. It answers the methods the adapter uses (auth.test, chat.postMessage, chat.update,
conversations.history, conversations.open, conversations.replies, users.info, users.list)
the way Slack does: HTTP 200 with `{"ok": false, "error": …}` for refusals, 429 with Retry-After when
rate limited. It records every request it receives, takes its arguments from the query,
a form body or a JSON body (the SDK uses all three), and can be told to fail or to lose
the answer to a post that it nevertheless stores.

conversations.open gives each user one stable direct message (D…), where posts and
threads work as in a channel; a bot, a deactivated or an unknown user is refused as Slack
refuses them (cannot_dm_bot, user_disabled, user_not_found). A slash command's response_url
points at this server (`/commands/…`), which records the answers posted to it and refuses
those to an expired URL as Slack does (404 `expired_url`).

The other direction, Slack calling the desk, is built here too: signed Events API
envelopes, form-encoded block_actions payloads and slash commands, signed the way Slack
signs them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tests.fake_server import LocalHttpServer

BOT = {"user_id": "U0BOT", "bot_id": "B0BOT", "user": "handoff-desk", "team": "Acme Support", "team_id": "T0ACME"}


@dataclass
class Call:
    """One request the fake received."""

    method: str
    args: dict[str, Any]
    token: str | None
    headers: dict[str, str]


@dataclass
class Fault:
    status: int = 200
    error: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    text: str | None = None  # a non-JSON body (an HTML 5xx page from a proxy)
    lose_answer: bool = False  # do the work, then never answer (the client times out)


class FakeSlack(LocalHttpServer):
    def __init__(
        self,
        *,
        token: str = "xoxb-test-token",
        channels: tuple[str, ...] = ("C0HANDOFF",),
        users: dict[str, str] | None = None,
        unlisted_users: dict[str, str] | None = None,
        latency: float = 0.0,
    ) -> None:
        super().__init__()
        self.token = token
        self.latency = latency  # seconds added to every answer, like a network round trip
        self.messages: dict[str, list[dict[str, Any]]] = {c: [] for c in channels}
        # users.list returns `users`; users.info also knows `unlisted_users` (joined later)
        self.users = dict(users or {})
        self.unlisted_users = dict(unlisted_users or {})
        self.calls: list[Call] = []
        self.disabled_users: set[str] = set()  # conversations.open answers user_disabled
        self.directs: dict[str, str] = {}  # user id -> the D… id of their direct message with the bot
        # what was posted to each response_url (its path), in order; paths in `expired` take no more
        self.answers: dict[str, list[dict[str, Any]]] = {}
        self.expired: set[str] = set()
        # ts -> when the message was stored (time.monotonic()), so a test can tell how late a delivery came
        self.stored_at: dict[str, float] = {}
        self._faults: dict[str, deque[Fault]] = {}
        self._closing = asyncio.Event()
        self._ts = 0
        self.url = ""

    # ------------------------------------------------------------------ server

    async def start(self) -> FakeSlack:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_post("/commands/{path:.*}", self._response_url)
        port = await self._serve(app)
        self.url = f"http://127.0.0.1:{port}/api/"
        return self

    async def stop(self) -> None:
        self._closing.set()  # answers held back by lose_answer give up now
        await self._stop_serving()

    # ------------------------------------------------------------------ scripting and looking

    def fail_next(self, method: str, *faults: Fault) -> None:
        self._faults.setdefault(method, deque()).extend(faults)

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def posts(self, channel: str = "C0HANDOFF", thread_ts: str | None = None) -> list[dict[str, Any]]:
        """Messages stored in a channel, in order; with thread_ts, the replies in that thread."""
        stored = self.messages.get(channel, [])
        if thread_ts is None:
            return list(stored)
        return [m for m in stored if m.get("thread_ts") == thread_ts and m["ts"] != thread_ts]

    def top_level(self, channel: str = "C0HANDOFF") -> list[dict[str, Any]]:
        return [m for m in self.messages.get(channel, []) if m.get("thread_ts", m["ts"]) == m["ts"]]

    # ------------------------------------------------------------------ the API

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            args.update(await request.json())
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            args.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else args.get("token")
        self.calls.append(Call(method, args, token, dict(request.headers)))
        await self._notify()
        if self.latency:
            await asyncio.sleep(self.latency)

        fault = self._faults.get(method, deque()).popleft() if self._faults.get(method) else None
        if fault is not None and not fault.lose_answer:
            if fault.text is not None:
                return web.Response(status=fault.status, text=fault.text, content_type="text/html", headers=fault.headers)
            return web.json_response({"ok": False, "error": fault.error}, status=fault.status, headers=fault.headers)
        if token != self.token:
            return web.json_response({"ok": False, "error": "invalid_auth" if token else "not_authed"})
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        body = handler(args)
        await self._notify()
        if fault is not None:  # stored, but the answer is lost on the way back
            await self._closing.wait()
        return web.json_response(body)

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": "https://acme.slack.com/", **BOT}

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel")
        if channel not in self.messages:
            return {"ok": False, "error": "channel_not_found"}
        if not args.get("text") and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        self._ts += 1
        ts = f"{1_700_000_000 + self._ts}.{self._ts:06d}"
        message = {
            "type": "message", "ts": ts, "user": BOT["user_id"], "bot_id": BOT["bot_id"], "text": args.get("text", ""),
            "blocks": _decoded(args.get("blocks")) or [], "metadata": _decoded(args.get("metadata")), "args": args,
        }
        if args.get("thread_ts"):
            parent = next((m for m in self.messages[channel] if m["ts"] == args["thread_ts"]), None)
            if parent is None:
                return {"ok": False, "error": "thread_not_found"}
            message["thread_ts"] = args["thread_ts"]
            parent["thread_ts"] = parent["ts"]  # as Slack marks a parent once it has replies
            parent["reply_count"] = parent.get("reply_count", 0) + 1
        self.messages[channel].append(message)
        self.stored_at[ts] = time.monotonic()
        public = {k: v for k, v in message.items() if k not in ("args", "metadata")}
        return {"ok": True, "channel": channel, "ts": ts, "message": public}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = args.get("channel"), args.get("ts")
        if channel not in self.messages:
            return {"ok": False, "error": "channel_not_found"}
        message = next((m for m in self.messages[channel] if m["ts"] == ts), None)
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if message.get("bot_id") != BOT["bot_id"]:
            return {"ok": False, "error": "cant_update_message"}
        if not args.get("text") and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        message["text"] = args.get("text", "")
        message["blocks"] = _decoded(args.get("blocks")) or []
        message["edited"] = {"user": BOT["user_id"], "ts": ts}
        message.setdefault("updates", []).append(args)
        public = {k: v for k, v in message.items() if k not in ("args", "metadata", "updates")}
        return {"ok": True, "channel": channel, "ts": ts, "text": message["text"], "message": public}

    def _conversations_open(self, args: dict[str, Any]) -> dict[str, Any]:
        users = [u for u in str(args.get("users") or "").split(",") if u]
        if not users:
            return {"ok": False, "error": "users_list_not_supplied"}
        if len(users) > 1:
            return {"ok": False, "error": "method_not_supported_for_channel_type"}  # a group DM: not what we test
        [user] = users
        if user == BOT["user_id"]:
            return {"ok": False, "error": "cannot_dm_bot"}
        if user not in self.users and user not in self.unlisted_users:
            return {"ok": False, "error": "user_not_found"}
        if user in self.disabled_users:
            return {"ok": False, "error": "user_disabled"}
        already = user in self.directs
        channel = self.directs.setdefault(user, "D" + user[1:])
        self.messages.setdefault(channel, [])
        return {"ok": True, "no_op": already, "already_open": already, "channel": {"id": channel}}

    async def _response_url(self, request: web.Request) -> web.StreamResponse:
        """A slash command's response_url: JSON with the answer's text (and blocks)."""
        path = request.path
        self.calls.append(Call("response_url", await request.json(), None, dict(request.headers)))
        fault = self._faults.get("response_url", deque()).popleft() if self._faults.get("response_url") else None
        if fault is not None:
            return web.Response(status=fault.status, text=fault.error or "", headers=fault.headers)
        if path in self.expired or len(self.answers.get(path, [])) >= 5:
            return web.Response(status=404, text="expired_url")
        self.answers.setdefault(path, []).append(self.calls[-1].args)
        await self._notify()
        return web.Response(text="ok")

    def slash_command(self, *, text: str, user: str, user_name: str = "sam", channel: str = "C0HANDOFF",
                      command: str = "/handoff", trigger_id: str | None = None) -> tuple[bytes, str]:
        """A slash command as Slack posts it (form-encoded), and the path of its response_url here."""
        n = next(_event_ids)
        path = f"/commands/{BOT['team_id']}/{n}/hook{n:06d}"
        form = {
            "token": "deprecated-verification-token", "team_id": BOT["team_id"], "team_domain": "acme",
            "channel_id": channel, "channel_name": "directmessage" if channel.startswith("D") else "handoffs",
            "user_id": user, "user_name": user_name, "command": command, "text": text, "api_app_id": "A0APP",
            "is_enterprise_install": "false", "response_url": self.url.removesuffix("/api/") + path,
            "trigger_id": trigger_id or f"{n}.{n}.command",
        }
        return urlencode(form).encode(), path

    def _view(self, message: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        view = {k: v for k, v in message.items() if k not in ("args", "updates")}
        if not _truthy(args.get("include_all_metadata")) or not view.get("metadata"):
            view.pop("metadata", None)
        return view

    def _page(self, messages: list[dict[str, Any]], args: dict[str, Any]) -> dict[str, Any]:
        start = int(args.get("cursor") or 0)
        limit = int(args.get("limit") or 100)
        page = messages[start : start + limit]
        more = start + limit < len(messages)
        return {
            "ok": True, "messages": [self._view(m, args) for m in page], "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def _conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel")
        if channel not in self.messages:
            return {"ok": False, "error": "channel_not_found"}
        newest_first = [m for m in reversed(self.messages[channel]) if m.get("thread_ts", m["ts"]) == m["ts"]]
        return self._page(newest_first, args)

    def _conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = args.get("channel"), args.get("ts")
        if channel not in self.messages:
            return {"ok": False, "error": "channel_not_found"}
        thread = [m for m in self.messages[channel] if m["ts"] == ts or m.get("thread_ts") == ts]
        if not thread:
            return {"ok": False, "error": "thread_not_found"}
        return self._page(thread, args)

    @staticmethod
    def _user(user_id: str, name: str) -> dict[str, Any]:
        handle = name.lower().replace(" ", ".")
        return {"id": user_id, "name": handle, "real_name": f"{name} Example", "is_bot": False, "deleted": False,
                "profile": {"display_name": name, "real_name": f"{name} Example"}}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user_id = args.get("user", "")
        name = self.users.get(user_id) or self.unlisted_users.get(user_id)
        if name is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": self._user(user_id, name)}

    def _users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        members = [self._user(uid, name) for uid, name in self.users.items()]
        members.append({"id": BOT["user_id"], "name": BOT["user"], "is_bot": True, "deleted": False, "profile": {}})
        return {"ok": True, "members": members, "response_metadata": {"next_cursor": ""}}


def _decoded(value: Any) -> Any:
    """Form-encoded requests carry blocks and metadata as JSON strings."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _truthy(value: Any) -> bool:
    return value in (True, 1, "1", "true", "True")


# --------------------------------------------------------------------------- Slack → the desk


def signed_headers(secret: str, body: bytes, *, timestamp: int | None = None, content_type: str = "application/json",
                   retry_num: int | None = None) -> dict[str, str]:
    """Headers Slack sends: `v0=` + HMAC-SHA256(secret, b"v0:" + ts + b":" + raw body)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    headers = {"content-type": content_type, "x-slack-request-timestamp": ts, "x-slack-signature": f"v0={digest}"}
    if retry_num is not None:
        headers.update({"x-slack-retry-num": str(retry_num), "x-slack-retry-reason": "http_timeout"})
    return headers


_event_ids = iter(range(1, 1_000_000))


def message_event(
    *, channel: str, text: str, user: str, thread_ts: str | None, ts: str | None = None, event_id: str | None = None,
    **extra: Any,
) -> bytes:
    """An Events API envelope with one `message` event (a reply in a thread when thread_ts is set)."""
    n = next(_event_ids)
    event: dict[str, Any] = {
        "type": "message", "channel": channel, "user": user, "text": text, "ts": ts or f"{1_800_000_000 + n}.000100",
        "channel_type": "im" if channel.startswith("D") else "channel", "event_ts": ts or f"{1_800_000_000 + n}.000100", **extra,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    envelope = {
        "token": "deprecated-verification-token", "team_id": BOT["team_id"], "api_app_id": "A0APP", "event": event,
        "type": "event_callback", "event_id": event_id or f"Ev{n:08d}", "event_time": int(time.time()),
    }
    return json.dumps(envelope).encode()


def block_actions(*, channel: str, user: str, user_name: str, message_ts: str, value: str,
                  action_id: str = "handoff_release", thread_ts: str | None = None, trigger_id: str | None = None,
                  block_id: str = "handoff_actions") -> bytes:
    """A button click as Slack posts it: form-encoded `payload=<json>`."""
    n = next(_event_ids)
    message: dict[str, Any] = {"type": "message", "ts": message_ts, "bot_id": BOT["bot_id"], "user": BOT["user_id"]}
    if thread_ts:
        message["thread_ts"] = thread_ts
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user_name, "name": user_name, "team_id": BOT["team_id"]},
        "api_app_id": "A0APP", "token": "deprecated-verification-token",
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": False},
        "trigger_id": trigger_id or f"{n}.{n}.abcdef", "team": {"id": BOT["team_id"], "domain": "acme"},
        "channel": {"id": channel, "name": "directmessage" if channel.startswith("D") else "handoffs"}, "message": message,
        "response_url": "https://hooks.slack.com/actions/T0ACME/1/xyz",
        "actions": [{"action_id": action_id, "block_id": block_id, "value": value, "type": "button",
                     "text": {"type": "plain_text", "text": "Release"}, "action_ts": f"{1_800_000_000 + n}.5"}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()
