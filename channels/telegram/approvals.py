"""Approval prompts in the staff chat: messages of their own (no handoff's reply chain, no
topic) with the question, the risk, the exact arguments (cut with a note when they would not
fit, never silently), the deadline and the decision page link, and Approve / Deny / Always
allow buttons. A press is read in channels/telegram/inbound.py; the core decides whether it
counts. When the approval ends, the prompt loses its keyboard (when this process knows which
message it is) and the closing text is posted, as a reply to the prompt then."""

from __future__ import annotations

import structlog

from bot.runtime.bounded import BoundedDict
from channels.base import ApprovalClosed, ApprovalPrompt, ChannelError, Receipt, TransientChannelError
from channels.telegram.formatting import TelegramTemplates, defuse, prompt_html
from channels.telegram.keyboards import approval_keyboard
from channels.telegram.protocol import MESSAGE_LIMIT
from channels.telegram.transport import TelegramTransport
from channels.text import clip

log = structlog.get_logger(__name__)


class TelegramApprovals(TelegramTemplates, TelegramTransport):
    """The approvals half of TelegramChannel; the adapter sets `_prompts` (approval id → the
    message id of its prompt, from the send or a press: the Bot API cannot look it up)."""

    _prompts: BoundedDict[str, int]

    async def send_approval_prompt(self, prompt: ApprovalPrompt) -> Receipt:
        """An approval prompt: a new message in the staff chat (it belongs to no handoff),
        with Approve / Deny (/ Always allow) callback buttons."""
        from telegram.constants import ParseMode

        bot, staff, approval = self._bot(), self._staff_group(), prompt.approval
        keyboard = approval_keyboard(approval)  # None: the id is too long for callback_data, the link alone
        message = await self._call(bot.send_message(
            chat_id=staff, text=prompt_html(self._render, approval, buttons=keyboard is not None), parse_mode=ParseMode.HTML,
            reply_markup=keyboard, link_preview_options=self._no_preview(),
        ), "sendMessage")
        self._prompts[approval.approval_id] = message.message_id
        return Receipt(message_id=str(message.message_id), thread={"chat_id": message.chat.id, "message_id": message.message_id})

    async def send_approval_closed(self, closed: ApprovalClosed) -> Receipt:
        """How an approval ended: the prompt's buttons are taken away when we know which
        message it is (sent or pressed in this process), and the closing text is posted, as
        a reply to the prompt when known."""
        from telegram import ReplyParameters
        from telegram.constants import ParseMode

        bot, staff, approval_id = self._bot(), self._staff_group(), closed.approval.approval_id
        # Remembered from the send or a press; or the prompt's receipt, which the core passes.
        prompt_id = self._prompts.get(approval_id) or closed.prompt.get("message_id")
        if prompt_id is not None:
            try:
                await self._call(bot.edit_message_reply_markup(chat_id=staff, message_id=prompt_id, reply_markup=None),
                                 "editMessageReplyMarkup")
            except TransientChannelError:
                raise  # nothing posted yet: the core retries the whole notice
            except ChannelError as exc:  # already without buttons (a retry), deleted, too old …
                log.info("telegram_approval_buttons_not_removed", channel_id=self.id, approval_id=approval_id, hint=exc.hint)
        body = defuse(closed.text.strip())
        reply = ReplyParameters(message_id=prompt_id, allow_sending_without_reply=True) if prompt_id else None
        message = await self._call(bot.send_message(
            chat_id=staff, text=self._render("notice", body=clip(body, MESSAGE_LIMIT - 8)), parse_mode=ParseMode.HTML,
            reply_parameters=reply, link_preview_options=self._no_preview(),
        ), "sendMessage")
        self._prompts.pop(approval_id, None)
        return Receipt(message_id=str(message.message_id), thread={"chat_id": message.chat.id, "message_id": message.message_id})
