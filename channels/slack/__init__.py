"""The Slack channel: each handoff is one message in a channel, and its thread is the conversation.

Support teams already live in Slack. A dispatch is a Block Kit message in the configured
channel (what happened, what to do, the fields to hand back, the recent transcript, a
"Fill return form" and a "Release" button, and "I'm on it" when the handoff may be
claimed); every relay and notice after it goes into that message's thread, and every human
reply in that thread goes back to the subscriber. Several handoffs share one channel
without crossing, because a reply is mapped to a handoff only by its `thread_ts`
(thread_key `"{channel}:{thread_ts}"`). A notice that someone took the handoff elsewhere
edits the dispatch in place (chat.update: the buttons give way to it); a claim takes the
"I'm on it" button away.

A person can also be reached directly (`Dispatch.direct`, their Slack user id): the same
dispatch goes to their direct message with the app (conversations.open), and its thread
there is the handoff's thread (thread_key `"{D… id}:{thread_ts}"`): relays and notices
follow into it, and the person's replies in it and the buttons they press there come back
like a room's. `/handoff away [note]` and `/handoff back`, a slash command, tell the desk
they are away or back (an `AvailabilityRequest`), answered only to them.

Slack POSTs both kinds of callback to `{public_url}/webhooks/{channel id}`: the Events API
(JSON) brings the replies in a thread, interactivity (a form with `payload=<json>`) the
button presses, which become a `ReleasePress` or a `ClaimPress` named by the thread the
button is in.

What it guards against:
- forged callbacks: every webhook is verified first (HMAC-SHA256 of the raw body with the
  signing secret, compared in constant time; timestamps more than 5 minutes off are
  refused), so a forged or replayed request is answered 401 and nothing is stored;
- pings and markup injection: text people wrote goes into `plain_text` objects, or is
  escaped (`&`, `<`, `>`) inside `mrkdwn` marked `verbatim`, so a summary saying
  `<!channel>` or `<@U123>` notifies nobody; posts are sent with `parse: none`, no
  `link_names` and no unfurling;
- echo loops: messages from bots, our own included, are never relayed;
- redeliveries: Slack resends an event it thinks was not acked; the event id is the
  dedupe key, so the core drops the copies (and we still answer 200);
- double posts: every post carries message metadata with the outbox's delivery key, so a
  post whose answer was lost (timeout) is found again by `find_sent` instead of repeated;
- slow acks: Slack wants an answer within 3 s, so `handle_webhook` makes no Slack call;
  display names come from a cache filled at start and, for newcomers, in the background.

Approval prompts are top-level posts of their own, in no handoff's thread: what
the assistant wants to run, for whom, how risky, the exact arguments as preformatted rich
text (literal: nothing in them can ping or link), the deadline, Approve / Deny / Always
allow buttons (action_id says which, value carries the approval id) and the decision page
as a fallback. A press arrives as a signed block_actions callback and becomes a `Decision`
(deduplicated on its trigger_id); the core decides whether it counts. When the approval
ends, the prompt is edited in place (chat.update): the buttons give way to the closing text.
The prompt is found again by the approval id, from memory or, after a restart, in the
channel's history (message metadata); only when it cannot be found or edited is the
closing text posted as a new message.

Like every adapter it never retries or sleeps: slack-sdk runs without retry handlers,
failures become the typed errors of `channels.base` and the core's outbox decides what
happens next.

Slack app setup: bot token scopes `chat:write`, `channels:history` (`groups:history` for a
private channel; also used to find lost posts) and, for readable names, `users:read`;
Event Subscriptions and Interactivity both with the Request URL
`{public_url}/webhooks/{channel id}`, bot events `message.channels` (`message.groups`);
then invite the bot to the channel. To reach people directly: the scopes `im:write` and
`im:history` and the bot event `message.im` (App Home → allow messages); for `/handoff`,
the scope `commands` and a slash command `/handoff` with that same Request URL.

The package, one concern a module: `adapter` (SlackChannel: lifecycle, sending, editing a
dispatch or a prompt in place), `transport` (slack-sdk's client and the error mapping),
`direct` (a person's direct message, the slash command's response_url),
`posts` (posting with metadata, receipts, finding a post again), `blocks` (the Block Kit
layouts), `webhooks` (the signed callbacks and the events they become), `names` (the
display-name cache), `mrkdwn` (escaping, clipping, reading replies back as plain text),
`protocol` (Slack's ids, limits and error names) and `config` (SlackConfig). The adapter's
class puts the webhooks, posts and layout halves together as its bases.
"""

from channels.slack.adapter import SlackChannel
from channels.slack.config import SlackConfig
from channels.slack.mrkdwn import escape, plain_from_mrkdwn, transcript_text

__all__ = ["SlackChannel", "SlackConfig", "escape", "plain_from_mrkdwn", "transcript_text"]
