"""The Block Kit layouts: a dispatch (brief, fields, transcript, buttons), a relay, a
notice, an approval prompt, and the changes a notice makes to a dispatch already posted.
People's words go into `plain_text` or are escaped inside `mrkdwn` marked `verbatim`, so
a summary saying `<!channel>` or `<@U123>` shows as typed and notifies nobody."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from channels.base import ApprovalBrief, ChannelAdapter, ChannelContext, HandoffBrief, Notice, Relay, pretty_arguments
from channels.slack.mrkdwn import (
    Blocks,
    chunks,
    clip,
    clip_escaped,
    escape,
    mrkdwn_block,
    mrkdwn_context,
    mrkdwn_section,
    plain,
    transcript_text,
)
from channels.slack.protocol import (
    APPROVAL_BLOCK,
    ARGUMENTS_BLOCK,
    ARGUMENTS_LIMIT,
    CLAIM_ACTION,
    FIELD_LIMIT,
    FORM_ACTION,
    HEADER_LIMIT,
    RELEASE_ACTION,
    SECTION_LIMIT,
    TAKEN_BLOCK,
)
from channels.text import short_duration

BlockChange = Callable[[Blocks], Blocks]
"""How a notice changes a dispatch's blocks."""


class SlackBlocks(ChannelAdapter):
    """The layout half of SlackChannel; the adapter sets `_ctx` on start (the templates,
    templates/messages/slack/, and the public URL)."""

    _ctx: ChannelContext | None

    def _render(self, name: str, **context: Any) -> str:
        assert self._ctx is not None
        return self._ctx.render(f"messages/slack/{name}", **context).strip()

    def _dispatch_blocks(self, brief: HandoffBrief) -> Blocks:
        who = brief.subscriber_name or "A subscriber"
        blocks: Blocks = [
            {"type": "header", "text": plain(clip(self._render("header.txt", brief=brief, who=who), HEADER_LIMIT))},
            *([mrkdwn_block(f"_{escape(brief.outside_hours)}_")] if brief.outside_hours else []),
            mrkdwn_section("Summary", brief.summary),
            mrkdwn_section("What to do", brief.expected_action),
        ]
        fields = [("Subscriber", who if not brief.subscriber_email else f"{who} ({brief.subscriber_email})"),
                  ("Urgency", brief.urgency)]
        if brief.contact_back_email:
            fields.append(("Contact back", brief.contact_back_email))
        blocks.append({"type": "section", "fields": [
            {"type": "mrkdwn", "text": clip_escaped(f"*{label}*\n{escape(value)}", FIELD_LIMIT), "verbatim": True}
            for label, value in fields
        ]})
        if brief.extra_context:
            lines = [f"• *{escape(key)}*: {escape(value)}" for key, value in brief.extra_context.items()]
            blocks.append(mrkdwn_block("*Context*\n" + "\n".join(lines)))
        if brief.expected_return:
            lines = [f"• {escape(line)}" for line in brief.field_lines]
            blocks.append(mrkdwn_block("*Please hand back*\n" + "\n".join(lines)))
        if brief.transcript:
            text, omitted = transcript_text(brief.transcript)
            blocks.append(mrkdwn_context(self._render("transcript_label.txt", omitted=omitted)))
            blocks.append({"type": "section", "text": plain(text)})
        blocks.append({"type": "actions", "block_id": "handoff_actions", "elements": self._buttons(brief)})
        blocks.append(mrkdwn_context(self._render("help.txt", who=escape(who), idle=short_duration(brief.idle_timeout_seconds))))
        return blocks

    @staticmethod
    def _buttons(brief: HandoffBrief) -> Blocks:
        buttons: Blocks = []
        if brief.claimable:
            buttons.append({"type": "button", "action_id": CLAIM_ACTION, "text": plain("I'm on it"),
                            "value": brief.handoff_session_id})
        if brief.form_url:
            buttons.append({"type": "button", "action_id": FORM_ACTION, "text": plain("Fill return form"),
                            "url": brief.form_url, "style": "primary"})
        buttons.append({
            "type": "button", "action_id": RELEASE_ACTION, "text": plain("Release"), "value": brief.handoff_session_id,
            "confirm": {
                "title": plain("Release this handoff?"),
                "text": plain("The assistant takes the conversation back. Use the return form to hand back data."),
                "confirm": plain("Release"), "deny": plain("Cancel"),
            },
        })
        return buttons

    def _relay_blocks(self, relay: Relay) -> Blocks:
        label = self._render("relay.txt", author=escape(relay.author or "Subscriber"))
        # The words themselves as plain_text: shown exactly as typed, never parsed.
        return [mrkdwn_context(label)] + [{"type": "section", "text": plain(part)} for part in chunks(relay.body, SECTION_LIMIT)]

    def _notice_block(self, notice: Notice) -> dict[str, Any]:
        text = escape(notice.text.strip())
        # Notices are the desk's own words; make our links (a fresh return form) clickable.
        if self._ctx is not None and self._ctx.public_url:
            base = re.escape(escape(self._ctx.public_url.rstrip("/")))
            text = re.sub(rf"({base}/\S+)", r"<\1>", text)
        return mrkdwn_block(text)

    def _prompt_blocks(self, approval: ApprovalBrief) -> Blocks:
        """Readable on a phone: what, for whom, how risky, the exact arguments, until when,
        and the buttons. People's words (subscriber name, arguments) are plain_text or
        preformatted rich text, never mrkdwn, so nothing in them can ping or link."""
        deadline = approval.expires_at[:16].replace("T", " ")
        blocks: Blocks = [
            {"type": "header", "text": plain(clip(self._render("approval_header.txt", approval=approval), HEADER_LIMIT))},
            {"type": "section", "text": plain(clip(self._render("approval_question.txt", approval=approval), SECTION_LIMIT))},
            {"type": "section", "fields": [plain(f"Risk: {approval.risk}"), plain(f"Answer by: {deadline} UTC")]},
        ]
        if approval.two_people_line:
            blocks.append({"type": "section", "text": plain(approval.two_people_line)})
        blocks.append(mrkdwn_context("*Exactly these arguments:*"))
        shown, left_out = pretty_arguments(approval.arguments, ARGUMENTS_LIMIT)
        for part in chunks(shown, ARGUMENTS_BLOCK):
            blocks.append({"type": "rich_text", "elements": [
                {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": part}]}]})
        if left_out:
            blocks.append({"type": "context", "elements": [plain(
                f"[… cut here: {left_out} more characters. The decision page shows every argument.]")]})
        blocks.append({"type": "actions", "block_id": APPROVAL_BLOCK, "elements": _approval_buttons(approval)})
        help_text = self._render("approval_help.txt", deadline=escape(deadline), url=escape(approval.decision_url),
                                 approval_id=escape(approval.approval_id), two_people=approval.approvals_required > 1)
        blocks.append(mrkdwn_context(help_text, block_id="approval_help"))
        return blocks


def _approval_buttons(approval: ApprovalBrief) -> Blocks:
    """Approve, Deny and (when offered) Always allow: the action id says which, the value
    carries the approval id."""
    buttons: Blocks = [
        {"type": "button", "action_id": "approval_approve", "text": plain("Approve"), "style": "primary",
         "value": approval.approval_id},
        {"type": "button", "action_id": "approval_deny", "text": plain("Deny"), "style": "danger",
         "value": approval.approval_id},
    ]
    if approval.allow_always:
        buttons.append({
            "type": "button", "action_id": "approval_always", "text": plain("Always allow"), "value": approval.approval_id,
            "confirm": {
                "title": plain("Always allow?"),
                "text": plain(clip(f"Approve this call, and let the assistant run {approval.action_id} with the same "
                                   "argument names for the rest of this conversation without asking.", 300)),
                "confirm": plain("Always allow"), "deny": plain("Cancel"),
            },
        })
    return buttons


def closed_prompt(blocks: Blocks, text: str) -> Blocks:
    """An approval prompt once the approval ended: its buttons and help give way to the closing text."""
    kept = [b for b in blocks if b.get("type") != "actions" and b.get("block_id") != "approval_help"]
    kept.append({"type": "section", "block_id": "approval_closed", "text": plain(clip(text, SECTION_LIMIT))})
    return kept


def without_claim(blocks: Blocks) -> Blocks:
    """The dispatch once its thread has claimed the handoff: the Claim button goes, the rest stays."""
    kept: Blocks = []
    for block in blocks:
        if block.get("type") == "actions":
            elements = [e for e in block.get("elements") or [] if e.get("action_id") != CLAIM_ACTION]
            if not elements:
                continue
            block = {**block, "elements": elements}
        kept.append(block)
    return kept


def taken(notice: dict[str, Any]) -> BlockChange:
    """The dispatch once someone elsewhere took the handoff: no buttons, and the notice
    at the end (once: a retry replaces its own line)."""
    def change(blocks: Blocks) -> Blocks:
        kept = [b for b in blocks if b.get("type") != "actions" and b.get("block_id") != TAKEN_BLOCK]
        return [*kept, {**notice, "block_id": TAKEN_BLOCK}]
    return change
