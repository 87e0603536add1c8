"""Telegram's HTML as this channel writes it: the message bodies come from autoescaped
templates (templates/messages/telegram/*.html), so every user-derived string is escaped by
construction; here is what the templates cannot do themselves.

- `visible_length`: a message's length as Telegram counts it (tags removed, entities
  decoded, UTF-16 code units), so the 4096-character limit is checked before Telegram
  refuses the whole message;
- `defuse`: `@name` and `/command` made inert in what people (or the agent) wrote;
- `dispatch_html` and `prompt_html`: a dispatch or an approval prompt fitted into one
  message, the newest transcript lines (or the arguments) getting what the rest leaves and
  what is left out announced, never dropped silently;
- `TelegramTemplates._render`: a template of templates/messages/telegram/ rendered with
  the desk's context (the adapter's rendering half).
"""

from __future__ import annotations

import html
import re
from typing import Any, Protocol

from channels.base import ApprovalBrief, ChannelAdapter, ChannelContext, HandoffBrief, PermanentChannelError, pretty_arguments
from channels.telegram.protocol import MESSAGE_LIMIT
from channels.text import Budget, clip, fit_brief, utf16_len

_TAGS = re.compile(r"<[^>]*>")
_MENTION = re.compile(r"(?<![\w@])@(?=\w)")
_COMMAND = re.compile(r"(?<!\S)/(?=[A-Za-z])")
WORD_JOINER = "\u2060"
ARGUMENTS_LIMIT = 3000  # characters of pretty JSON shown in a prompt (the rest is announced, never dropped silently)
TRANSCRIPT_LINE = 400  # characters of one transcript message, so one essay cannot push out the rest
# Tried in order until the dispatch fits: the whole brief (with the newest transcript lines
# that fit), then less context and fewer fields, then a shorter summary and action too.
_BUDGETS = (
    Budget(),
    Budget(context_items=10, context_key=60, context_value=200, field_items=10, field_line=150),
    Budget(summary=1500, action=700, context_items=5, context_key=60, context_value=120, field_items=5, field_line=120),
    Budget(summary=800, action=400, context_items=0, field_items=0),
)


class Render(Protocol):
    """The adapter's template renderer: `render("dispatch", brief=…)` → HTML."""

    def __call__(self, name: str, **context: Any) -> str: ...


def visible_length(markup: str) -> int:
    """Length of an HTML message as Telegram counts it: tags removed, entities decoded.
    Safe to compute this way because user text is escaped, so every `<` left is our tag."""
    return utf16_len(html.unescape(_TAGS.sub("", markup)))


def defuse(text: str) -> str:
    """Telegram turns `@name` in any message into a mention (a notification to that member)
    and `/word` into a tappable command — in a forum topic, tapping `/release` in a relayed
    message would release the handoff. An invisible word joiner after `@` and `/` keeps the
    text readable and inert. Applied to everything people (or the agent) wrote."""
    return _COMMAND.sub("/" + WORD_JOINER, _MENTION.sub("@" + WORD_JOINER, text))


def dispatch_html(render: Render, brief: HandoffBrief, *, in_topic: bool) -> str:
    """The dispatch message, fitted to one Telegram message: the newest transcript lines
    that fit, and when the brief alone is too long, its long parts shortened."""
    lines = [(defuse(line.author or line.role), defuse(clip(line.text, TRANSCRIPT_LINE))) for line in brief.transcript]
    context = [(defuse(k), defuse(v)) for k, v in brief.extra_context.items()]
    fields = [defuse(line) for line in brief.field_lines]
    fitted = fit_brief(
        summary=brief.summary, action=brief.expected_action, context=context, fields=fields, lines=lines,
        budgets=_BUDGETS, fits=lambda html: visible_length(html) <= MESSAGE_LIMIT,
        render=lambda cut: render(
            "dispatch",
            brief=brief,
            subscriber=defuse(brief.subscriber_name) if brief.subscriber_name else None,
            summary=defuse(cut.summary),
            action=defuse(cut.action),
            **cut.shown(),
            in_topic=in_topic,
            idle_minutes=max(1, round(brief.idle_timeout_seconds / 60)),
        ),
    )
    if fitted is not None:
        return fitted
    raise PermanentChannelError("the dispatch does not fit one Telegram message", hint="the brief is too long for Telegram")


def prompt_html(render: Render, approval: ApprovalBrief, *, buttons: bool) -> str:
    """The prompt within one message: the arguments get what the rest leaves, and what
    does not fit is announced (the decision page shows everything)."""
    limit = ARGUMENTS_LIMIT
    while True:
        shown, left_out = pretty_arguments(approval.arguments, limit)
        text = render(
            "approval", approval=approval, buttons=buttons, arguments=shown, left_out=left_out,
            subscriber=defuse(clip(approval.subscriber_name, 200)) if approval.subscriber_name else None,
            description=defuse(clip(approval.description, 1000)), deadline=approval.expires_at[:16].replace("T", " "),
        )
        if visible_length(text) <= MESSAGE_LIMIT or limit < 200:
            return text
        limit -= visible_length(text) - MESSAGE_LIMIT + 50


class TelegramTemplates(ChannelAdapter):
    """The rendering half of TelegramChannel; the adapter sets `_ctx` at start."""

    _ctx: ChannelContext | None

    def _render(self, name: str, **context: Any) -> str:
        assert self._ctx is not None
        # .html templates are autoescaped: every value passed in is escaped for Telegram's HTML.
        return self._ctx.render(f"messages/telegram/{name}.html", **context)
