"""The WhatsApp channel (through Twilio): handoffs reach people's phones, and their answers come back.

A dispatch is one WhatsApp message from the configured sender (`from_number`) to every
configured recipient (`to`): urgency, who needs help, the summary, what to do, the fields to
hand back, the return-form link and the handoff's short code (`#A7F3`). The subscriber's
messages are relayed to the same numbers ("#A7F3 *Ana*: …"), and whatever a recipient writes
back to the sender goes to the subscriber; `/release` ends the handoff. It uses the official
`twilio` SDK on its async path (`AsyncTwilioHttpClient` + `create_async`), pointed at
`api_base_url`.

The same number can be a front too (config `fronts: [{kind: whatsapp, …}]`): subscribers
write to the sender and talk to the bot. Each sender number is one conversation (thread_key
`whatsapp:+…`, the name from their WhatsApp profile); the assistant's and people's replies go
back to that number, a person's name in bold. With a channel on the same account and sender
(one webhook per sender at Twilio), one adapter does both: the staff numbers in `to` are
recipients, every other number is a subscriber. A front of its own (built from
WhatsAppConnection, without `to`) takes every sender as a subscriber and never dispatches.
WhatsApp has no buttons here: a pending user action names the "done" / "cancel" keywords.

WhatsApp has no threads. Every handoff of a channel shares one line, so every receipt and
every inbound message carries the same thread_key (`"whatsapp"`), and a reply cannot tell by
itself which handoff it answers. The core routes it (the most recent handoff, or the one
named by a `#A7F3` prefix, `/list` to see them) and answers with routing notices; this
adapter makes that possible by putting the short code at the start of every message it sends.

What it guards against:
- **Forged webhooks.** Every call must carry a valid `X-Twilio-Signature` (HMAC-SHA1 of the
  public URL and the form parameters with the auth token, compared in constant time by the
  SDK's RequestValidator): otherwise 403 and nothing is stored. Only messages from the
  configured recipient numbers to our sender are relayed to a handoff; anyone else who writes
  to the business number is a subscriber with a conversation of their own when the number is a
  front, and ignored (and logged) otherwise, so a stranger can never talk to another subscriber.
- **Redeliveries.** Twilio retries a webhook it thinks failed; MessageSid is the dedupe key.
- **Restyled text.** WhatsApp turns `*x*`, `_x_`, `~x~` and backticks into formatting, so a
  summary could make its own words look like the desk's. People's text (summary, names,
  transcript, relayed messages) has those markers replaced by look-alike characters where they
  could format, leaving links, e-mail addresses and snake_case words untouched.
- **The 1600-character limit.** The dispatch is fitted into one message with its link kept
  (the newest transcript lines that fit, long parts shortened when needed); relays, notices and
  messages to a subscriber longer than a message go out in numbered parts.
- **The 24-hour window.** WhatsApp refuses free-form messages to someone who has not written
  to the sender in 24 hours (error 63016). That is a permanent failure whose hint says to set
  `content_sid`: the dispatch then goes out as the approved template (`content_sid` +
  `content_variables`), which opens the conversation; relays follow once the person answers.
  To a subscriber, the hint says they must write first.
- **Duplicates.** Twilio's create is not idempotent: a 5xx or a lost answer is an
  UncertainDeliveryError (the message may exist). With several recipients, the numbers that
  already got a message are remembered by its delivery key, so a retry sends only to the rest.

Approval prompts (`notice="approval"`) go to every number as one text: the action, its
description, the risk, the exact arguments as pretty JSON in a monospace block (where
WhatsApp formats nothing; a backtick in a value is written as the JSON escape `\\u0060`, so
the block cannot be closed early and the value stays exact), the deadline and the signed
decision link; WhatsApp has no buttons here, the page decides. When it does not fit 1600
characters the arguments are cut visibly ("… N more characters on the page"), never the
link. `approval_closed` sends how it ended. An approval is not a handoff: a reply on the line
is routed to the handoffs as always, and the prompt says that a reply is not a decision.

Errors are mapped, never retried here: 429 → transient with Retry-After; 401/20003 → auth;
63016, 21211/21614 (bad number), 63007 (wrong sender) and other 4xx → permanent.

Twilio setup: a WhatsApp sender (or the sandbox) whose "A message comes in" webhook is
`{public_url}/webhooks/{channel id}` (HTTP POST; a front of its own: its id, 1000 + its
position in `fronts` by default). The recipients must have opted in (for the sandbox: sent
the join code).

The package, one concern a module: `adapter` (WhatsAppChannel: lifecycle, and which
numbers each outbound message goes to), `transport` (the twilio client with its HTTP client
against `api_base_url`, a message sent to several numbers at once, and the error mapping),
`webhooks` (the signature check, form parameters turned into typed events, status
callbacks), `formatting` (defusing, the 1600-unit body, fitting the brief and the prompt,
numbered parts) and `config` (WhatsAppConnection, WhatsAppConfig and the number rules).
The adapter's class puts the transport, webhook and formatting halves together as its bases.
"""

from channels.whatsapp.adapter import WhatsAppChannel
from channels.whatsapp.config import WhatsAppConfig, WhatsAppConnection, normalise_number
from channels.whatsapp.formatting import BODY_LIMIT, defuse
from channels.whatsapp.webhooks import LINE_KEY

__all__ = ["BODY_LIMIT", "LINE_KEY", "WhatsAppChannel", "WhatsAppConfig", "WhatsAppConnection", "defuse", "normalise_number"]
