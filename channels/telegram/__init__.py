"""The Telegram channel: handoffs land in a staff group, and the group's replies come back.

A dispatch is one HTML message in the staff group (`chat_id`) with a "Return form" URL
button and a "Release" callback button; the subscriber's messages are relayed as replies to
it; a person answers by replying to any of those messages (or, in a forum group, by writing
in the handoff's own topic), types `/release`, or presses Release. Replies arrive through
the core's webhook route (`mode: webhook`) or a getUpdates long poll (`mode: polling`, for
a laptop without a public URL), built with python-telegram-bot against `api_base_url`.

What it guards against:
- **Broken markup.** Telegram refuses a whole HTML message over one stray `<` or `&`
  ("can't parse entities"), so a hostile or merely unlucky summary would fail the dispatch.
  Message bodies come from autoescaped templates (templates/messages/telegram/*.html), so
  every user-derived string is escaped by construction, not by remembering to.
- **The 4096-character limit.** The dispatch keeps the newest transcript lines that fit and
  says how many were left out; when even the bare brief is too long its longest parts are
  shortened step by step. Relays longer than a message are sent in parts.
- **Replies reaching the wrong handoff.** Routing is stateless, so it survives restarts and
  works across instances: a handoff's thread_key is `"{chat}:{dispatch message id}"` (or
  `"{chat}:topic:{topic id}"` in a forum group, where every message of the topic belongs to
  it). Telegram tells us which message a reply answers, one level deep, including that
  message's buttons; every bot message of a handoff carries a Release button whose
  callback_data names the dispatch (`release:<id>`, or just `release` on the dispatch
  itself), so a reply to a relay maps back to its handoff without a lookup table. Only
  replies to *our bot's* messages count, so staff talking among themselves are not relayed.
- **Forged webhook calls.** The `X-Telegram-Bot-Api-Secret-Token` header is compared in
  constant time (403 and nothing stored otherwise). Without `webhook_secret` the secret is
  an HMAC of the bot token, so every restart and instance registers and expects the same.
- **Echo loops.** Messages from bots (ours included) are never relayed.
- **Leaking the token.** python-telegram-bot puts the token into some error texts
  (InvalidToken); every hint and message is scrubbed of it.

Approval prompts are messages of their own in the staff chat (no handoff's reply
chain, no topic): the question, the risk, the exact arguments in a <pre> block (cut with a
note when they would not fit, never silently), the deadline and the decision page link,
with Approve / Deny / Always allow callback buttons (`ap:<approval id>:y|n|a`, well within
Telegram's 64 bytes). A press is answered with a short confirmation and becomes a
`Decision` (deduplicated on the update id); the core decides whether it counts. When the
approval ends, the prompt's keyboard is removed when this process knows the prompt (it sent
it, or someone pressed on it) and the closing text is posted, replying to the prompt then.

As a front (`ctx.subscribers`), the same bot also talks to subscribers: each private
chat is one conversation (thread_key = the chat id, author = the profile name), `/start`
opens it (the core greets), a photo or sticker arrives as "[photo] caption" so nobody is left
wondering, and the desk's messages come back as HTML in that chat, a person's name in bold.
A user-action prompt gets Done / Cancel (and step) buttons, `ua:<id>:d|c|n|p`, reported as a
`UserActionAnswer`; a pressed prompt loses its buttons (what follows is a new message).
One token is one connection (`same_connection`): a front and a channel with the same
bot_token are one adapter, one poller or webhook. A front of its own is built from
`TelegramConnection` (no chat_id): it never dispatches and ignores every group. Private chats
are ignored when the bot serves no front, as before.

Setup: create the bot with @BotFather and add it to the staff group. With privacy mode on
(the default) a bot still receives replies to its own messages, which is all a plain group
needs. A forum group needs the bot to be an admin with "Manage topics" (to create a topic
per handoff); admins receive every message, so plain messages in a topic arrive too.

Errors are mapped, never retried here (the core's outbox retries): RetryAfter → transient
with the provider's delay; a timeout or broken connection after the request went out →
UncertainDeliveryError. The Bot API cannot look a sent message up, so `reconcile` is False
and such a retry may post the message twice — better than losing it. BadRequest and
Forbidden (bot removed from the group) are permanent; a refused token is ChannelAuthError.

The package, one concern a module: `adapter` (TelegramChannel: lifecycle, and sending to a
handoff's thread and to a subscriber's chat), `approvals` (the prompts and their closing),
`transport` (python-telegram-bot's Application against `api_base_url`, each Bot API call
and its error mapping), `receiver` (the webhook and its secret token, or the getUpdates
poller, and answering presses), `inbound` (what an update means: routing, presses and
subscriber messages as typed events), `direct` (people's own private chats, where a handoff
sent to one person lands: `Dispatch.direct`, thread_key `"{user id}:{dispatch id}"`, and
their line of plain messages), `keyboards` (our buttons and their callback_data,
written and read in one place), `formatting` (the templates, HTML length, defusing, fitting
a dispatch or prompt into one message), `protocol` (Telegram's limits, header, ports and
refused URLs) and `config` (TelegramConnection, TelegramConfig). The adapter's class puts
the receiving, approvals, parsing and Bot API halves together as its bases.
"""

from channels.telegram.adapter import TelegramChannel
from channels.telegram.config import TelegramConfig, TelegramConnection
from channels.telegram.formatting import defuse, visible_length
from channels.telegram.protocol import MESSAGE_LIMIT, button_url_ok, webhook_unreachable_reason

__all__ = [
    "MESSAGE_LIMIT",
    "TelegramChannel",
    "TelegramConfig",
    "TelegramConnection",
    "button_url_ok",
    "defuse",
    "visible_length",
    "webhook_unreachable_reason",
]
