"""The Discord channel: each handoff is an embed in a staff text channel, with a thread of its own.

A dispatch is one message in the configured channel (`channel_id`): an embed with the brief
(urgency and short code, summary, what to do, subscriber, the fields to hand back, the
recent transcript), a link button to the return form and, when the interactions endpoint is
configured, a Release button. A thread is started from that message; every relay and notice
goes into it, and every human message in it goes back to the subscriber. The thread id is
the handoff's thread_key (Discord gives a thread started from a message the message's id).

A person can also be reached directly (`Dispatch.direct`, their Discord user id): the same
dispatch goes to their direct message with the bot, where it has no thread; its line there
is the dispatch message itself, thread_key `"{DM channel id}:{dispatch message id}"`.
Relays and notices reply to it, and the person's replies (to it or to those replies, or a
message replying to nothing, which goes to the newest dispatch there) and their Claim and
Release presses come back under that key (channels/discord/direct.py).

Discord delivers human messages only over the gateway (a websocket), so `start()` logs in
over REST, checks the channel, and runs a discord.py `Client` in the background with the
GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES and MESSAGE_CONTENT intents. Button clicks come over HTTP instead:
Discord POSTs interactions to `{public_url}/webhooks/{channel id}`.

What it guards against:
- pings: every message carries `allowed_mentions: {"parse": []}`, so a summary or a relayed
  message saying `@everyone` or `<@123>` notifies nobody; such text is also defused for the
  eye (a zero-width space after `@`, `<` escaped), and embeds never ping anyway;
- markup injection: user-derived text is escaped for Discord markdown (`discord.utils.
  escape_markdown` plus line-start markers and `<…>` pills), so it shows exactly as typed;
- forged interactions: the Ed25519 signature (PyNaCl `VerifyKey`) over timestamp + raw body
  is checked before anything is parsed; a bad, missing or stale signature gets 401;
- echo loops: messages from bots and webhooks, ours included, are never relayed;
- double posts: messages are sent with a `nonce` derived from the outbox's delivery key and
  `enforce_nonce`, so Discord itself answers a retry of a post that landed (within a few
  minutes) with the message it already has; a dispatch whose thread could not be started
  is completed on retry instead of posted again;
- the SDK's own retries: discord.py sleeps and retries 429s and 5xx inside a request (up to
  five times, tens of seconds). An aiohttp trace on our client's session turns those
  answers into an exception before discord.py sees them, so `send()` returns at once with
  a typed error and the core's outbox owns the retry. discord.py's pre-emptive bucket waits
  are capped by `max_ratelimit_timeout` and every call by `request_timeout`.

Test knobs without global state: discord.py keeps the REST base (`discord.http.Route.BASE`)
and the gateway (`DiscordWebSocket.DEFAULT_GATEWAY`) as class attributes. Setting them would
repoint every discord.py client in the process (two channels with different bases would
fight). Instead each adapter rewrites the URLs of its own client only: `api_base_url`
replaces the default prefix of each route's URL in its HTTPClient's `request`, and
`gateway_url` the default gateway in its `ws_connect`. The globals are never touched.

Approval prompts are messages in the staff channel itself (no thread: they
belong to no handoff): an embed with the question, the risk, the deadline (also as a
Discord timestamp, in each reader's time zone) and the exact arguments in a code block
(backticks and invisible characters shown as JSON escapes, so nothing can break out or
hide; cut with a note when too long, never silently), Approve / Deny / Always allow
buttons (custom_id `approval:<id>:approve|deny|always`) when the interactions endpoint is
configured, and the decision page as a link button always. A press is verified like every
interaction, answered privately at once and becomes a `Decision` (deduplicated on the
interaction id); the core decides whether it counts. When the approval ends, the prompt
is edited in place (no buttons, the outcome in its embed), found by the id remembered at
send or press or, after a restart, among the channel's newest messages; only when it is
gone is the closing text posted anew.

Discord setup: create an application and a bot (Developer Portal); enable the **Message
Content** privileged intent (Bot tab); invite the bot with the permissions View Channel,
Send Messages, Create Public Threads, Send Messages in Threads, Embed Links and Read
Message History; copy the channel id (Developer Mode → right click → Copy Channel ID).
For the Release button set the application's Interactions Endpoint URL to
`{public_url}/webhooks/{channel id}` and `application_public_key` to its Public Key.

The package, one concern a module: `adapter` (DiscordChannel: lifecycle, rendering and
posting), `direct` (a person's direct message), `rest` (REST calls and their error mapping), `gateway` (the websocket and the
messages it brings), `interactions` (the signed button presses), `sdk` (discord.py's client
built for this adapter, its retries intercepted), `markdown` (escaping and splitting),
`protocol` (Discord's limits and numbers) and `config` (DiscordConfig). The adapter's class
puts the REST, gateway and interactions halves together as its bases.
"""

from channels.discord.adapter import DiscordChannel
from channels.discord.config import DiscordConfig
from channels.discord.markdown import clip_escaped, escape, split_for_messages

__all__ = ["DiscordChannel", "DiscordConfig", "clip_escaped", "escape", "split_for_messages"]
