"""What Slack POSTs to `/webhooks/{channel id}`, turned into typed events: human replies in
a handoff's thread (Events API, JSON) and button presses (interactivity, a form with
`payload=<json>`). The signature over the raw body is checked before anything is parsed;
nothing here calls Slack, since Slack wants its answer within 3 seconds.

Outside a handoff's thread only a link command counts (`link CODE`: Slack's client takes a
message starting with `/` for a slash command of its own, so the slash is optional): a
top-level message in the channel, or a direct message to the app (the `message.im` event,
with the `im:history` scope), becomes a `LinkRequest` answered in that message's thread or
in the direct message.

A person reached directly (channels/slack/direct.py) answers in the thread of the dispatch
in their direct message with the app: those replies and the buttons pressed there come
back like a room's, under `"{D… channel}:{thread_ts}"`; a top-level message in the direct
message belongs to no handoff (only a link command counts there).

The slash command (`/handoff away [note]`, `/handoff back`, `/handoff link CODE`) arrives as
a signed form with `command`, `text`, `user_id` and `response_url`: it becomes an
`AvailabilityRequest` (or a `LinkRequest`) answered through that response_url, and Slack
is acknowledged at once with an empty 200; anything else gets its usage, seen only by the
person who typed it."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

import structlog

from channels.base import (
    AvailabilityRequest,
    Decision,
    InboundMessage,
    LinkRequest,
    MalformedWebhook,
    RecipientText,
    WebhookReply,
    WebhookRequest,
    json_object,
)
from channels.linking import availability_command, link_code
from channels.slack.mrkdwn import plain_from_mrkdwn
from channels.slack.names import SlackNames
from channels.slack.protocol import APPROVAL_ACTIONS, DIRECT_CHANNEL_PREFIX, HANDOFF_ACTIONS, NOTE_LIMIT, RELAYED_SUBTYPES

log = structlog.get_logger(__name__)


class SlackWebhooks(SlackNames):
    """The inbound half of SlackChannel; the adapter sets `_verifier` (slack-sdk's
    SignatureVerifier with the signing secret) on start."""

    _verifier: Any

    async def handle_webhook(self, request: WebhookRequest) -> WebhookReply:
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not self._signed_by_slack(request.body, headers):
            log.warning("slack_webhook_rejected", channel_id=self.id, reason="bad or stale signature")
            return WebhookReply(status=401, body=b"invalid signature")
        if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            # Interactivity (button clicks): form-encoded `payload=<json>`; a slash command:
            # its fields themselves.
            try:
                form = parse_qs(request.body.decode(), keep_blank_values=True)
            except UnicodeDecodeError:
                raise MalformedWebhook("the form is not UTF-8") from None
            if "command" in form:
                return self._from_command({k: v[0] for k, v in form.items()})
            data = json_object((form.get("payload") or ["{}"])[0], "the payload field")
        else:
            data = json_object(request.body or b"{}")

        kind = data.get("type")
        if kind == "url_verification":
            body = json.dumps({"challenge": str(data.get("challenge", ""))}).encode()
            return WebhookReply(body=body, content_type="application/json")
        message = None
        if kind == "event_callback":
            message = self._from_event(data)
        elif kind == "block_actions":
            message = self._from_action(data)
        # Everything else is acknowledged and ignored; a retry (X-Slack-Retry-Num) is parsed
        # like the original and dropped by the core's dedup on the same key.
        return WebhookReply(messages=[message] if message else [])

    def _signed_by_slack(self, body: bytes, headers: dict[str, str]) -> bool:
        timestamp = headers.get("x-slack-request-timestamp", "")
        signature = headers.get("x-slack-signature", "")
        if self._verifier is None or not timestamp.isdigit() or not signature or not signature.isascii():
            return False  # (a non-ASCII signature would make compare_digest raise, not refuse)
        # slack_sdk's verifier: "v0=" + HMAC-SHA256(secret, "v0:{ts}:" + raw body), compared
        # with hmac.compare_digest; a timestamp more than 5 minutes off is refused (replays).
        return bool(self._verifier.is_valid(body=body, timestamp=timestamp, signature=signature))

    def _from_event(self, envelope: dict[str, Any]) -> InboundMessage | None:
        event = envelope.get("event") or {}
        channel = event.get("channel")
        direct = event.get("channel_type") == "im"  # a direct message to the app (a person reached directly)
        if event.get("type") != "message" or (channel != self.config.channel and not direct):
            return None
        thread_ts, ts = event.get("thread_ts"), event.get("ts")
        if not thread_ts or thread_ts == ts:  # not a reply in a thread: no handoff to map it to
            return self._link_request(envelope, event)
        if direct and link_code(plain_from_mrkdwn(event.get("text") or "", self._names.get)) is not None:
            return self._link_request(envelope, event)  # answered in the direct message, as it always was
        if event.get("subtype") not in RELAYED_SUBTYPES:
            return None  # edits, deletions, joins, bot_message …
        user = event.get("user")
        if event.get("bot_id") or not user or user == self.bot_user_id:
            return None  # bots, our own posts included, are never relayed
        profile = event.get("user_profile") or {}
        if profile.get("display_name") or profile.get("real_name"):
            self._remember(user, profile.get("display_name") or profile.get("real_name"))
        text = plain_from_mrkdwn(event.get("text") or "", self._names.get).strip()
        files = [f.get("name") or f.get("title") or "file" for f in event.get("files") or []]
        if files:  # files are not forwarded; say so rather than drop the message silently
            text = (text + "\n" if text else "") + f"[sent {len(files)} file(s) in Slack: {', '.join(files)}]"
        if not text:
            return None
        event_id = envelope.get("event_id")
        return RecipientText(
            thread_key=f"{channel}:{thread_ts}", text=text, author=self._author(user), user_id=user,
            dedupe_key=f"event:{event_id}" if event_id else f"message:{channel}:{ts}",
        )

    def _link_request(self, envelope: dict[str, Any], event: dict[str, Any]) -> InboundMessage | None:
        """A link command written by a person outside any handoff's thread, answered in its
        thread (a direct message: in the conversation); anything else there is not ours."""
        user, ts = event.get("user"), event.get("ts")
        if event.get("subtype") is not None or event.get("bot_id") or not user or user == self.bot_user_id or not ts:
            return None
        code = link_code(plain_from_mrkdwn(event.get("text") or "", self._names.get))
        if code is None:
            return None
        direct = event.get("channel_type") == "im"
        event_id = envelope.get("event_id")
        return LinkRequest(
            code=code, reply_to={"channel": event.get("channel"), "thread_ts": None if direct else event.get("thread_ts") or ts},
            author=self._author(user), user_id=user,
            dedupe_key=f"event:{event_id}" if event_id else f"message:{event.get('channel')}:{ts}",
        )

    def _from_action(self, payload: dict[str, Any]) -> InboundMessage | None:
        pressed = next((a for a in payload.get("actions") or [] if a.get("action_id") in APPROVAL_ACTIONS), None)
        if pressed is not None:
            return self._from_approval_press(payload, pressed)
        action = next((a for a in payload.get("actions") or [] if a.get("action_id") in HANDOFF_ACTIONS), None)
        if action is None:
            return None  # the form button only opens a link; nothing to do here
        channel = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get("channel_id")
        message = payload.get("message") or {}
        thread_ts = message.get("thread_ts") or message.get("ts") or (payload.get("container") or {}).get("message_ts")
        user = payload.get("user") or {}
        direct = str(channel or "").startswith(DIRECT_CHANNEL_PREFIX)  # on a dispatch in a person's direct message
        if (channel != self.config.channel and not direct) or not thread_ts or not user.get("id"):
            return None
        key = payload.get("trigger_id") or action.get("action_ts") or f"{thread_ts}:{user['id']}"
        # Release or Claim: either names the handoff by the thread the button is in.
        return HANDOFF_ACTIONS[action["action_id"]](
            thread_key=f"{channel}:{thread_ts}",
            author=self._author(user["id"], fallback=user.get("name") or user.get("username")),
            user_id=user["id"], dedupe_key=f"action:{key}",
        )

    def _from_approval_press(self, payload: dict[str, Any], action: dict[str, Any]) -> InboundMessage | None:
        """Approve / Deny / Always allow on a prompt in our channel; the core decides whether
        it counts (pending, this channel was asked, first answer)."""
        container = payload.get("container") or {}
        channel = (payload.get("channel") or {}).get("id") or container.get("channel_id")
        user = payload.get("user") or {}
        approval_id = str(action.get("value") or "")
        if channel != self.config.channel or not user.get("id") or not approval_id:
            return None
        approve, always = APPROVAL_ACTIONS[action["action_id"]]
        # One press is one interaction: its trigger_id (else the action's own timestamp on
        # that message) is the dedupe key, so a redelivered callback decides nothing twice.
        key = payload.get("trigger_id") or f"{container.get('message_ts')}:{action.get('action_ts')}:{user['id']}"
        return Decision(
            approval_id=approval_id, approve=approve, always_allow=always,
            author=self._author(user["id"], fallback=user.get("name") or user.get("username")),
            user_id=user["id"], dedupe_key=f"action:{key}",
        )

    def _from_command(self, form: dict[str, str]) -> WebhookReply:
        """A slash command (`/handoff away on holiday`): an empty 200 at once, with the event
        it asks for; a usage line, seen only by the person, for anything else."""
        command, words = form.get("command") or "/handoff", (form.get("text") or "").strip()
        user, response_url = form.get("user_id") or "", form.get("response_url") or ""
        if not user or not response_url:
            raise MalformedWebhook("a slash command without user_id or response_url")
        reply_to = {"response_url": response_url, "user": user, "channel": form.get("channel_id")}
        who = {"author": self._author(user, fallback=form.get("user_name")), "user_id": user,
               "dedupe_key": f"command:{form['trigger_id']}" if form.get("trigger_id") else None}
        availability = availability_command(words, slash=False)
        if availability is not None and len(availability.note or "") > NOTE_LIMIT:
            return _usage(f"The note after `{command} away` is at most {NOTE_LIMIT} characters; "
                          f"yours has {len(availability.note or '')}.")
        if availability is not None:
            return WebhookReply(messages=[AvailabilityRequest(away=availability.away, note=availability.note,
                                                              reply_to=reply_to, **who)])
        code = link_code(words)
        if code is not None:
            return WebhookReply(messages=[LinkRequest(code=code, reply_to=reply_to, **who)])
        return _usage(f"`{command} away [note]`: you are away, and handoffs go to others (the note says why or until "
                      f"when). `{command} back`: you take handoffs again. `{command} link CODE`: link your Slack account "
                      "with the code from the desk's \"Link a channel\" page.")


def _usage(text: str) -> WebhookReply:
    """An immediate answer to a slash command, seen only by the person who typed it."""
    body = {"response_type": "ephemeral", "text": text}
    return WebhookReply(body=json.dumps(body).encode(), content_type="application/json")
