"""The email channel: a handoff is one email thread, and replies to it come back.

A dispatch is a multipart/alternative message (plain text and HTML, both from templates in
templates/messages/email/) sent through the configured SMTP server with aiosmtplib to the
`to` addresses. Subscriber messages and desk notices follow as replies in the same thread
(`In-Reply-To` / `References`, "Re: " subject). Replies come back through a small SMTP
receiver built on aiosmtpd that runs inside the desk's event loop (`inbound:`), usually
behind the organisation's own mail server, which forwards the reply address to it.

How a reply finds its handoff, without a lookup table (so it survives restarts and works on
any instance): every handoff has a *thread key*, 16 base32 characters of a hash of its id,
and a *reply token*, the thread key plus a MAC of it (keyed by the desk's secret_key, or by
`reply_token_secret` when set). The token
sits in the `Reply-To` plus-address (`desk+<token>@example.com`) and in every Message-ID we
generate (`<hd.<token>.<random>@domain>`), so a reply maps back through the address it was
sent to or through its `In-Reply-To` / `References` headers; the MAC means nobody can aim a
reply at another handoff by guessing (the short code "A7F3" is not enough, and a handoff id
alone does not give the MAC).

What it guards against:
- **Header injection.** Subjects come from the summary people wrote: every control
  character and line break is collapsed to a space before it reaches a header, and headers
  are built by the standard library's `EmailMessage`, which refuses CR/LF anyway.
- **Markup injection.** The HTML part comes from autoescaped templates; the text part is
  plain text. A hostile summary shows as text in both.
- **Strangers writing in.** The receiver accepts mail only for its own address (with or
  without a token; 550 for any other recipient), only when it maps to a handoff by a valid
  token, and only from one of the `to` addresses — or from anyone holding the token when
  `accept_forwarded` is on (a colleague the handoff was forwarded to). Everything else is
  refused during the SMTP dialogue (550 with the reason), so nothing is stored and a person
  who wrote gets a bounce that says why. Sender addresses are not authenticated by SMTP
  itself: run the receiver behind a mail server that checks SPF/DKIM/DMARC.
- **Mail loops and robots.** Our own messages, bounces (empty envelope sender) and
  automatic replies (`Auto-Submitted`, `Precedence: bulk`, vacation notices) are accepted
  and dropped, never relayed to the subscriber; what we send carries `Auto-Submitted:
  auto-generated` so responders leave it alone.
- **Quoted history.** Replies quote the whole thread; only the new words are relayed:
  "On … wrote:" and everything after it, `>` lines, Outlook's "-----Original Message-----"
  and "From: … Sent: …" blocks, and the signature after "-- " are removed. The text/plain
  part is preferred; an HTML-only reply is turned into text (its blockquotes dropped).
- **Bounces.** A delivery status report (RFC 3464) whose failed recipient returns one of our
  handoff mails is handed to the core as that mail's `DeliveryFailure`, never as words;
  a delay report, or one returning a mail not ours, is dropped like other automatic mail.
- **Redelivery.** A sending server retries when it does not see our 250 (we answer only
  after the core stored the message); the Message-ID is the dedupe key.
- **Size.** `inbound.max_message_size` caps a message during the DATA transfer (552).

Approval prompts (`notice="approval"`) are not part of any handoff thread: each is a new
mail to the `to` addresses ("[Approval needed] refund_order (high risk)") showing the
action, its description, the risk, the exact arguments (pretty JSON), the deadline and the
signed decision link; mail has no buttons, the page decides. Its Message-ID is derived from
the approval id (`<ap.<hash>.prompt@domain>`), so the closing mail (`approval_closed`) can
answer it in the same thread without any stored state. Its Reply-To is
`<mailbox>+approval@domain`, and a reply to either mail (by that address or by its thread
headers) is refused during the SMTP dialogue with a 550 that says to use the decision link:
nothing of it is stored or relayed, and a "yes" by mail never counts as a decision.

Errors are mapped, never retried here: SMTP 4xx → TransientChannelError; 5xx →
PermanentChannelError with the server's words in the hint; refused credentials →
ChannelAuthError; refused connections and timeouts → transient, except a timeout or broken
connection once the message body was handed over (→ UncertainDeliveryError). Email cannot
look a sent message up, so `reconcile` is False: such a retry may deliver twice.

The package, one concern a module: `adapter` (EmailChannel: rendering and sending each
outbound message), `smtp` (the SMTP client and its error mapping), `receiver` (the built-in
SMTP receiver and its verdicts), `replies` (the reply parser), `tokens` (reply tokens and
Message-IDs), `config` (EmailConfig) and `text` (header-safe lines). The adapter's class
puts the sending, receiving and token halves together as its bases.
"""

from channels.email.adapter import EmailChannel
from channels.email.config import EmailConfig, InboundSettings, SmtpSettings
from channels.email.replies import html_to_text, strip_reply
from channels.email.text import one_line

__all__ = ["EmailChannel", "EmailConfig", "InboundSettings", "SmtpSettings", "html_to_text", "one_line", "strip_reply"]
