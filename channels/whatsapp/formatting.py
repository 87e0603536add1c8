"""What the WhatsApp channel writes: people's text defused, and every message fitted into
one WhatsApp body.

WhatsApp turns `*x*`, `_x_`, `~x~` and backticks into formatting and a line starting with
`>` into a quote, so `defuse` replaces those markers in people's text (summary, names,
transcript, relayed messages) by look-alike characters where they could format, leaving
links, e-mail addresses and snake_case words untouched. Twilio takes at most BODY_LIMIT
(1600) UTF-16 units a body: the dispatch and an approval prompt are fitted into one
message with their link kept; relays, notices and messages to a subscriber go out in
numbered parts. Template variables are single lines (WhatsApp refuses line breaks there).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from bot.runtime.text import hang, one_line
from channels.base import (
    ApprovalBrief,
    ApprovalClosed,
    ChannelAdapter,
    ChannelContext,
    HandoffBrief,
    Notice,
    PermanentChannelError,
    Relay,
    ToSubscriber,
    pretty_arguments,
)
from channels.text import Budget, TextLimit, clip, fit_brief, short_duration, utf16_len
from channels.whatsapp.config import TemplateValue

BODY_LIMIT = 1600  # Twilio's limit for one message body
TRANSCRIPT_LINE = 300
APPROVAL_DESCRIPTION = 400  # characters of an action's description in a prompt


# Links and addresses are kept exactly as written (a changed character breaks them).
_VERBATIM = re.compile(r"https?://\S*[^\s*_~`.,;:!?)\]'\"]|[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.IGNORECASE)
# A formatting marker that could open or close a span: not between two letters or digits
# (`snake_case` and `ORD_123` cannot format, so they stay as they are).
_MARKER = re.compile(r"(?<![^\W_])[*_~]|[*_~](?![^\W_])|`")
_QUOTE = re.compile(r"(?m)^(\s*)>")
_LOOKALIKE = {"*": "\u2217", "_": "\u02cd", "~": "\u223c", "`": "\u02cb"}  # ∗ ˍ ∼ ˋ


def defuse(text: str) -> str:
    """People's text with WhatsApp's formatting markers made inert: `*bold*` shows as
    `∗bold∗`, not in bold, and a line starting with `>` is not a quote."""

    def plain(part: str) -> str:
        return _QUOTE.sub("\\1\u203a", _MARKER.sub(lambda m: _LOOKALIKE[m.group()], part))

    out, last = [], 0
    for match in _VERBATIM.finditer(text):
        out.append(plain(text[last:match.start()]))
        out.append(match.group())
        last = match.end()
    out.append(plain(text[last:]))
    return "".join(out).replace("\x00", "\ufffd")


def template_value(text: str, limit: int) -> str:
    """A template variable: WhatsApp refuses line breaks, tabs and runs of spaces in them
    (and `clip` cuts a trailing blank before its ellipsis)."""
    return clip(one_line(text), limit)


_BUDGETS = (
    Budget(context_key=60),
    Budget(summary=700, action=400, context_items=5, context_key=60, context_value=100, field_items=5, field_line=100),
    Budget(summary=400, action=250, context_items=0, field_items=0),
)


class WhatsAppFormatting(ChannelAdapter):
    """The rendering half of WhatsAppChannel: the templates under templates/messages/whatsapp/
    filled with defused text and fitted into `text_limit`; the adapter sets `_ctx`."""

    text_limit = TextLimit(BODY_LIMIT)
    _ctx: ChannelContext | None

    def _render(self, name: str, **context: Any) -> str:
        assert self._ctx is not None
        return self._ctx.render(f"messages/whatsapp/{name}.txt", **context).strip()

    def _template_values(self, brief: HandoffBrief, variables: dict[str, TemplateValue]) -> dict[str, str]:
        values = {
            "summary": template_value(defuse(brief.summary), 600),
            "expected_action": template_value(defuse(brief.expected_action), 300),
            "link": brief.form_url or "(no return form)",
            "short_code": f"#{brief.short_code}",
            "urgency": brief.urgency,
            "subscriber": template_value(defuse(brief.subscriber_name or "a subscriber"), 100),
            "contact_back_email": brief.contact_back_email or "(none)",
        }
        return {number: values[name] for number, name in variables.items()}

    def dispatch_text(self, brief: HandoffBrief) -> str:
        """The dispatch as one message: everything when it fits, else the newest transcript
        lines that fit and, when the brief alone is too long, its long parts shortened.
        The link and the short code are never cut."""
        lines = [(defuse(line.author or line.role), hang(defuse(clip(line.text, TRANSCRIPT_LINE)), width=2)) for line in brief.transcript]
        context = [(defuse(k), defuse(v)) for k, v in brief.extra_context.items()]
        fields = [defuse(line) for line in brief.field_lines]
        fitted = fit_brief(
            summary=brief.summary, action=brief.expected_action, context=context, fields=fields, lines=lines,
            budgets=_BUDGETS, fits=self.text_limit.fits,
            render=lambda cut: self._render(
                "dispatch",
                brief=brief,
                code=brief.short_code,
                subscriber=defuse(template_value(brief.subscriber_name, 100)) if brief.subscriber_name else None,
                summary=defuse(cut.summary),
                action=defuse(cut.action),
                **cut.shown(),
                idle=short_duration(brief.idle_timeout_seconds, at_least_a_minute=True),
            ),
        )
        if fitted is not None:
            return fitted
        raise PermanentChannelError("the dispatch does not fit one WhatsApp message", hint="the brief is too long for WhatsApp")

    def approval_text(self, brief: ApprovalBrief) -> str:
        """The prompt as one message: everything when it fits, else the arguments cut with a
        visible note (the page shows them all); the link is never cut."""
        arguments, _ = pretty_arguments(brief.arguments, also_escape="`")  # a backtick cannot close the block
        try:
            deadline = datetime.fromisoformat(brief.expires_at).strftime("%d %b, %H:%M UTC")
        except ValueError:
            deadline = clip(brief.expires_at, 40)

        def render(kept: int) -> str:
            return self._render(
                "approval", a=brief, action=defuse(brief.action_id), description=defuse(clip(brief.description, APPROVAL_DESCRIPTION)),
                who=defuse(template_value(brief.subscriber_name, 100)) if brief.subscriber_name else None,
                arguments=arguments[:kept].rstrip() if kept < len(arguments) else arguments,
                left_out=len(arguments) - kept, deadline=deadline,
                two_people=defuse(brief.two_people_line) if brief.two_people_line else None,
            )

        if self.text_limit.fits(render(len(arguments))):
            return render(len(arguments))
        low, high = 0, len(arguments)  # the most characters of the arguments that fit
        while low < high:
            middle = (low + high + 1) // 2
            if self.text_limit.fits(render(middle)):
                low = middle
            else:
                high = middle - 1
        text = render(low)
        if not self.text_limit.fits(text):
            raise PermanentChannelError("the approval prompt does not fit one WhatsApp message",
                                        hint="the approval prompt is too long for WhatsApp")
        return text

    def _closed_text(self, closed: ApprovalClosed) -> str:
        raw = clip(closed.text, 1400)
        # The approval id stays exactly as written (it may hold `_` or `-`): people quote it.
        approval_id = closed.approval.approval_id
        return self._render("approval_closed", body=approval_id.join(defuse(part) for part in raw.split(approval_id)))

    def subscriber_parts(self, message: ToSubscriber) -> list[str]:
        """A message to a subscriber: their words defused like a relay's (the assistant's too:
        what an agent was told to say cannot restyle itself), a person's name in bold, and
        numbered parts of at most 1600 characters, so nothing is cut off."""
        author = defuse(template_value(message.author, 100)) if message.author else None
        return self._numbered("to_subscriber", defuse(message.body.strip()), author=author)

    def _relay_parts(self, relay: Relay) -> list[str]:
        author = defuse(template_value(relay.author or "Subscriber", 100))
        return self._numbered("relay", defuse(relay.body), code=relay.short_code, author=author)

    def _numbered(self, name: str, body: str, **context: Any) -> list[str]:
        """`body` in the template `name`, in numbered parts ("2/3") when it needs more than one
        message: room is kept for the widest part number, so no part is ever cut off."""
        head = utf16_len(self._render(name, **context, body="", part="99/99"))
        chunks = self.text_limit.split(body, reserve=head + 1)
        return [self._render(name, **context, body=chunk, part=f"{i}/{len(chunks)}" if len(chunks) > 1 else None)
                for i, chunk in enumerate(chunks, 1)]

    def _notice_parts(self, notice: Notice) -> list[str]:
        raw = notice.text.strip()
        code = notice.short_code
        # The desk's notices usually name their handoff already ("Handoff A7F3 released …");
        # the code stays exactly as written: people type it to address the handoff.
        body = code.join(defuse(part) for part in raw.split(code))
        tagged = code in raw
        head = 0 if tagged else utf16_len(self._render("notice", code=code, tagged=False, body="")) + 1
        return [self._render("notice", code=code, tagged=tagged, body=chunk) for chunk in self.text_limit.split(body, reserve=head)]
