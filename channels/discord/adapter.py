"""DiscordChannel: the adapter the desk runs. It starts the client and the gateway, renders
each outbound message as Discord markdown and embeds, and posts it; REST, the gateway, the
interactions endpoint and the SDK client are its bases in the modules beside it."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from bot.runtime.bounded import BoundedDict
from channels import base
from channels.discord.config import DiscordConfig
from channels.discord.direct import DiscordDirect, direct_target
from channels.discord.interactions import DiscordInteractions
from channels.discord.markdown import _lines_within, clip_escaped, escape, escaped_length, hang, split_for_messages
from channels.discord.protocol import (
    ACTION_BUDGET,
    ACTION_ROW,
    APPROVAL_ID,
    ARGUMENTS_LIMIT,
    BUTTON,
    CHANNEL_KINDS,
    CLAIM_ID,
    CLOSED_COLOUR,
    COLOURS,
    CONTENT_LIMIT,
    DANGER,
    DESCRIPTION_LIMIT,
    DIRECT_CACHE_LIMIT,
    EMBED_TOTAL_LIMIT,
    FIELD_VALUE_LIMIT,
    FOOTER_LIMIT,
    LINK,
    PROMPT_CACHE_LIMIT,
    PROMPT_LOOKUP_LIMIT,
    RELEASE_ID,
    RISK_COLOURS,
    SECONDARY,
    SUCCESS,
    SUMMARY_BUDGET,
    SUPPRESS_EMBEDS,
    TEXT_CHANNEL_TYPES,
    THREAD_ALREADY_EXISTS,
    THREAD_NAME_LIMIT,
    TITLE_LIMIT,
    TRANSCRIPT_LINE,
    TRANSCRIPT_RESERVE,
)
from channels.discord.rest import nonce_of
from channels.text import TextLimit, clip, short_duration

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    import discord


log = structlog.get_logger(__name__)


class DiscordChannel(DiscordDirect, DiscordInteractions):
    """The Discord adapter (channels/discord/__init__.py describes the channel)."""

    kind = "discord"
    config_model = DiscordConfig
    # reconcile=False: a lost answer is retried, and the nonce makes Discord answer that
    # retry with the message it already has (within its nonce window of a few minutes).
    capabilities = base.Capabilities(buttons=True, threads=True, inbound=True, webhook=True, reconcile=False, approvals=True,
                                     edits=True, direct=True)
    text_limit = TextLimit(CONTENT_LIMIT, measure=escaped_length)
    config: DiscordConfig

    def __init__(self, config: base.ChannelConfig) -> None:
        super().__init__(config)
        self._ctx: base.ChannelContext | None = None
        self._client: discord.Client | None = None
        self._gateway_task: asyncio.Task[None] | None = None
        self._session_ready = asyncio.Event()
        self.bot_id: int | None = None
        self.bot_name: str | None = None
        self.guild_id: int | None = None
        self.channel_name: str | None = None
        self._threads: set[int] = set()  # threads this process started (known even if not cached)
        # A dispatch posted whose thread could not be started: the retry starts the thread
        # instead of posting the message again.
        self._posted: dict[str, dict[str, Any]] = {}
        # approval id -> its prompt message id (sent or pressed in this process), so the
        # closing notice edits it without a lookup.
        self._prompts: BoundedDict[str, str] = BoundedDict(PROMPT_CACHE_LIMIT)
        # user id -> their direct message's channel id; a direct message -> its newest dispatch
        self._directs = BoundedDict(DIRECT_CACHE_LIMIT)
        self._newest = BoundedDict(DIRECT_CACHE_LIMIT)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, ctx: base.ChannelContext) -> None:
        self._ctx = ctx
        try:
            self._client = client = self._build()
            await self._call("login", client.login(self.config.bot_token.get_secret_value()))
            assert client.user is not None
            self.bot_id, self.bot_name = client.user.id, client.user.name
            self._check_public_key(client)
            await self._check_channel(client)
            if self.config.gateway:
                await self._start_gateway(client)
        except BaseException:
            await self.stop()  # the core only stops channels that started
            raise
        log.info("discord_started", channel_id=self.id, bot=self.bot_name, discord_channel=self.config.channel_id,
                 gateway=self.config.gateway, interactions=self.config.application_public_key is not None)

    def _check_public_key(self, client: discord.Client) -> None:
        app = client.application
        key = self.config.application_public_key
        if key and app is not None and app.verify_key and app.verify_key.lower() != key:
            raise base.PermanentChannelError("application_public_key is not this bot's application key", hint=(
                f"application_public_key does not match the Public Key of the bot's application '{app.name}' "
                "(Developer Portal → General Information); Release button clicks would all be refused"))

    async def _check_channel(self, client: discord.Client) -> dict[str, Any]:
        from discord.http import Route

        route = Route("GET", "/channels/{channel_id}", channel_id=self.config.channel_id)
        data: dict[str, Any] = await self._call("get channel", client.http.request(route), target="channel")
        kind = data.get("type")
        if kind not in TEXT_CHANNEL_TYPES:
            known = CHANNEL_KINDS.get(kind) if isinstance(kind, int) else None
            what = known or ("thread or direct message" if kind in (1, 3, 10, 11, 12) else f"channel of type {kind}")
            raise base.PermanentChannelError(f"channel {self.config.channel_id} is a {what}", hint=(
                f"channel_id {self.config.channel_id} is a {what}; handoffs need a text channel (threads are started in it)"))
        self.guild_id = int(data["guild_id"]) if data.get("guild_id") else None
        self.channel_name = data.get("name")
        return data

    async def stop(self) -> None:
        client, task = self._client, self._gateway_task
        self._client = self._gateway_task = None
        self._session_ready.clear()
        if client is not None:
            await client.close()  # closes the websocket (the connect task returns) and the HTTP session
        if task is not None:
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def probe(self) -> str:
        own = self._client is None  # `check-config --probe` calls this without start()
        client = self._build() if own else self._client
        assert client is not None
        try:
            user = await self._call("users/@me", client.http.static_login(self.config.bot_token.get_secret_value()))
            await self._check_channel(client)
        finally:
            if own:
                await client.close()
        guild = f" (guild {self.guild_id})" if self.guild_id else ""
        return f"bot @{user.get('username')} ({user.get('id')}), posting to #{self.channel_name}{guild}"

    def _require_client(self) -> discord.Client:
        if self._client is None or self.bot_id is None:
            raise base.TransientChannelError("the Discord channel is not started", hint="the Discord channel is not running")
        return self._client

    # ------------------------------------------------------------------ sending

    async def send_relay(self, relay: base.Relay) -> base.Receipt:
        label = self._render("relay.txt", author=escape(clip(relay.author or "Subscriber", 80)))
        parts = self._parts(relay.body, reserve=len(label) + 12)
        return await self._post_in_thread(relay, relay.thread, [
            f"{label}{f' ({i}/{len(parts)})' if len(parts) > 1 else ''} {part}" for i, part in enumerate(parts, 1)])

    async def send_notice(self, notice: base.Notice) -> base.Receipt:
        """Into the handoff's thread; a release takes the Release button away and a claim won
        here the Claim button. On a route, "taken" edits the dispatch instead: the notice
        under its title, every button gone."""
        client = self._require_client()
        if notice.about == "taken":
            edited = await self._mark_taken(client, notice)
            if edited is not None:
                return edited
        receipt = await self._post_in_thread(notice, notice.thread, self._parts(notice.text))
        if notice.about == "released":
            await self._retire_buttons(client, notice.thread, RELEASE_ID)
        elif notice.about in ("claimed", "taken"):  # taken: only when the edit above could not be made
            await self._retire_buttons(client, notice.thread, CLAIM_ID if notice.about == "claimed" else "")
        return receipt

    def _parts(self, text: str, *, reserve: int = 0) -> list[str]:
        """`text` escaped, in parts that fit one message beside `reserve` characters."""
        return split_for_messages(text, self.text_limit.units - reserve)

    async def _post_in_thread(self, message: base.Relay | base.Notice, thread: dict[str, Any], contents: list[str]) -> base.Receipt:
        """Into the handoff's thread or, in a person's direct message, as replies to its dispatch."""
        channel_id, thread_key, reference = direct_target(thread) or (0, str(thread.get("thread_id") or ""), None)
        if not thread_key:
            raise base.PermanentChannelError("no Discord thread for this handoff",
                                             hint="the handoff has no Discord thread to post into (its dispatch receipt lacks thread_id)")
        client = self._require_client()
        first: dict[str, Any] | None = None
        for i, content in enumerate(contents):  # a failure after part 1: the retry resends all (nonces dedupe)
            posted = await self._post(client, channel_id or int(thread_key), {
                "content": content, "flags": SUPPRESS_EMBEDS, "nonce": nonce_of(message, i), "message_reference": reference,
            }, what="thread message")
            first = first or posted
        assert first is not None
        return base.Receipt(message_id=str(first["id"]), thread_key=thread_key, thread=dict(thread))

    async def send_dispatch(self, dispatch: base.Dispatch) -> base.Receipt:
        """The brief in the staff channel with a thread started from it or, to one person
        (`dispatch.direct`), in their direct message (channels/discord/direct.py)."""
        from discord.http import Route

        if dispatch.direct is not None:
            return await self._send_direct(dispatch, self._dispatch_message(dispatch))
        client, brief = self._require_client(), dispatch.brief
        channel_id = self.config.channel_id
        message = self._posted.get(brief.handoff_session_id)
        if message is None:
            message = await self._post(client, channel_id, self._dispatch_message(dispatch), what="dispatch")
            self._posted[brief.handoff_session_id] = message
        message_id = int(message["id"])
        name = clip(f"{brief.short_code} · {brief.subscriber_name or 'subscriber'}", THREAD_NAME_LIMIT)
        route = Route("POST", "/channels/{channel_id}/messages/{message_id}/threads", channel_id=channel_id, message_id=message_id)
        import discord

        try:
            thread = await self._call("start thread", client.http.request(
                route, json={"name": name, "auto_archive_duration": 1440}), may_have_landed=True, target="channel")
            thread_id = int(thread["id"])
        except base.PermanentChannelError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, discord.HTTPException) and cause.code == THREAD_ALREADY_EXISTS):
                raise
            thread_id = message_id  # an earlier attempt started it; its id is the message's
        self._posted.pop(brief.handoff_session_id, None)
        self._threads.add(thread_id)
        return base.Receipt(message_id=str(message_id), thread_key=str(thread_id),
                            thread={"channel_id": str(channel_id), "message_id": str(message_id), "thread_id": str(thread_id)})

    def _dispatch_message(self, dispatch: base.Dispatch) -> dict[str, Any]:
        brief = dispatch.brief
        return {
            "content": clip_escaped(escape(self._render("title.txt", brief=brief, who=brief.subscriber_name or "A subscriber")),
                                    CONTENT_LIMIT),
            "embeds": [self._dispatch_embed(brief, direct=dispatch.direct is not None)],
            "components": self._components(brief, release=True),
            "nonce": nonce_of(dispatch),
        }

    async def _retire_buttons(self, client: discord.Client, thread: dict[str, Any], custom_id: str) -> None:
        """Take the buttons whose custom_id starts with `custom_id` off the dispatch (every
        one but the form link for ""). Cosmetic: a failure is logged, never raised (the
        notice itself was posted)."""
        channel_id, message_id = thread.get("channel_id"), thread.get("message_id")
        if not (channel_id and message_id and self.config.application_public_key):
            return
        try:
            # Rebuild the rows from the message as Discord has it, without those buttons.
            message = await self._call("get dispatch", client.http.request(_message_route("GET", channel_id, message_id)))
            rows: list[dict[str, Any]] = []
            dropped = False
            for row in message.get("components") or []:
                kept = [c for c in row.get("components") or []
                        if "custom_id" not in c or not str(c["custom_id"]).startswith(custom_id)]
                dropped = dropped or len(kept) < len(row.get("components") or [])
                if kept:
                    rows.append({"type": ACTION_ROW, "components": kept})
            if not dropped:
                return  # none of those buttons there (a retry, or a dispatch without them)
            await self._call("edit dispatch", client.http.request(
                _message_route("PATCH", channel_id, message_id), json={"components": rows}))
        except base.ChannelError as exc:
            log.warning("discord_dispatch_buttons_kept", channel_id=self.id, hint=exc.hint)

    async def _mark_taken(self, client: discord.Client, notice: base.Notice) -> base.Receipt | None:
        """Edit the dispatch of a handoff someone elsewhere took: the notice under its title,
        no buttons. None when it cannot be found or edited (deleted), so the caller posts
        instead; a transient failure is raised (nothing posted yet: the core retries)."""
        channel_id, message_id = notice.thread.get("channel_id"), notice.thread.get("message_id")
        if not (channel_id and message_id):
            return None
        line = clip_escaped(escape(notice.text.strip()), CONTENT_LIMIT // 2)
        try:
            message = await self._call("get dispatch", client.http.request(_message_route("GET", channel_id, message_id)))
            title = str(message.get("content") or "")
            if not title.endswith(line):  # else a retry of an edit that went through
                title = f"{clip_escaped(title, CONTENT_LIMIT - len(line) - 1)}\n{line}".lstrip("\n")
            await self._call("edit dispatch", client.http.request(_message_route("PATCH", channel_id, message_id), json={
                "content": title, "components": [], "allowed_mentions": {"parse": []}}))
        except base.TransientChannelError:
            raise
        except base.ChannelError as exc:
            log.warning("discord_dispatch_not_edited", channel_id=self.id, hint=exc.hint)
            return None
        direct, thread_id = direct_target(notice.thread), notice.thread.get("thread_id")
        thread_key = direct[1] if direct is not None else str(thread_id) if thread_id else None
        return base.Receipt(message_id=str(message_id), thread_key=thread_key, thread=dict(notice.thread))

    # ------------------------------------------------------------------ approvals

    async def send_approval_prompt(self, prompt: base.ApprovalPrompt) -> base.Receipt:
        """An approval prompt: a message in the staff channel itself (no thread: it belongs
        to no handoff) with an embed, and Approve / Deny (/ Always allow) buttons when the
        interactions endpoint is configured; the decision page link always."""
        client, approval = self._require_client(), prompt.approval
        buttons = bool(self.config.application_public_key)
        title = self._render("approval_title.txt", approval=approval, who=approval.subscriber_name)
        message = await self._post(client, self.config.channel_id, {
            "content": clip_escaped(escape(title), CONTENT_LIMIT),
            "embeds": [self._prompt_embed(approval, buttons=buttons)],
            "components": self._prompt_components(approval, buttons=buttons),
            "nonce": nonce_of(prompt),
        }, what="approval prompt")
        self._remember_prompt(approval.approval_id, str(message["id"]))
        return base.Receipt(message_id=str(message["id"]),
                            thread={"channel_id": str(self.config.channel_id), "message_id": str(message["id"])})

    async def send_approval_closed(self, closed: base.ApprovalClosed) -> base.Receipt:
        """How an approval ended: the prompt is edited in place (buttons gone, the outcome in
        its embed). When it cannot be found or edited, the closing text is posted instead."""
        from discord.http import Route

        client, approval_id, text = self._require_client(), closed.approval.approval_id, closed.text.strip()
        channel_id = self.config.channel_id
        prompt = await self._find_prompt(client, approval_id, closed.prompt)
        if prompt is not None:
            embeds = [dict(e) for e in prompt.get("embeds") or []][:1]
            if embeds:
                embed = embeds[0]
                embed.pop("type", None)
                embed["color"] = CLOSED_COLOUR
                embed["fields"] = [*(embed.get("fields") or []), {
                    "name": "Outcome", "value": clip_escaped(escape(text), FIELD_VALUE_LIMIT), "inline": False}][:25]
            route = Route("PATCH", "/channels/{channel_id}/messages/{message_id}", channel_id=channel_id,
                          message_id=int(prompt["id"]))
            try:
                await self._call("edit approval prompt", client.http.request(route, json={
                    "embeds": embeds, "components": [], "allowed_mentions": {"parse": []}}))
            except base.TransientChannelError:
                raise  # nothing posted yet: the core retries the whole notice
            except base.ChannelError as exc:  # deleted, or its embed no longer acceptable: say it anew
                log.warning("discord_approval_prompt_not_updated", channel_id=self.id, approval_id=approval_id, hint=exc.hint)
            else:
                self._prompts.pop(approval_id, None)
                return base.Receipt(message_id=str(prompt["id"]), thread={"channel_id": str(channel_id), "message_id": str(prompt["id"])})
        message = await self._post(client, channel_id, {"content": self._parts(text)[0], "flags": SUPPRESS_EMBEDS,
                                                        "nonce": nonce_of(closed)}, what="approval outcome")
        return base.Receipt(message_id=str(message["id"]), thread={"channel_id": str(channel_id), "message_id": str(message["id"])})

    async def _find_prompt(self, client: discord.Client, approval_id: str, receipt: dict[str, Any]) -> dict[str, Any] | None:
        """The prompt as Discord has it: by the id remembered at send (or press) or given in
        the notice's `prompt` (the prompt's receipt), else among
        the channel's newest messages (after a restart), by the approval id on its buttons
        or in its footer. A transient failure is raised (the core retries the notice)."""
        from discord.http import Route

        channel_id = self.config.channel_id
        known = self._prompts.get(approval_id) or receipt.get("message_id")
        try:
            if known is not None:
                prompt: dict[str, Any] = await self._call("get approval prompt", client.http.request(Route(
                    "GET", "/channels/{channel_id}/messages/{message_id}", channel_id=channel_id, message_id=int(known))))
                return prompt
            recent: list[dict[str, Any]] | None = await self._call("list messages", client.http.request(
                Route("GET", "/channels/{channel_id}/messages", channel_id=channel_id), params={"limit": PROMPT_LOOKUP_LIMIT}))
        except base.TransientChannelError:
            raise
        except base.ChannelError as exc:
            log.warning("discord_approval_prompt_not_found", channel_id=self.id, approval_id=approval_id, hint=exc.hint)
            return None
        for message in recent or []:
            if str((message.get("author") or {}).get("id")) == str(self.bot_id) and _is_prompt_of(message, approval_id):
                return message
        return None

    def _prompt_embed(self, approval: base.ApprovalBrief, *, buttons: bool) -> dict[str, Any]:
        """Readable on a phone: the question, the description, the exact arguments in a code
        block (markdown and mentions inert there), risk and deadline, within embed limits."""
        title = clip_escaped(escape(self._render("approval_title.txt", approval=approval, who=approval.subscriber_name)),
                             TITLE_LIMIT)
        shown, left_out = base.pretty_arguments(approval.arguments, ARGUMENTS_LIMIT, also_escape="`")
        cut = f"\n*[… cut here: {left_out} more characters. The decision page shows every argument.]*" if left_out else ""
        question = escape(f"May the assistant run {approval.action_id}"
                          + (f" for {approval.subscriber_name}?" if approval.subscriber_name else "?"))
        two_people = f"**{escape(approval.two_people_line)}**\n\n" if approval.two_people_line else ""
        head = (f"{clip_escaped(question, 400)}\n\n{clip_escaped(escape(approval.description), 500)}\n\n{two_people}"
                "**Exactly these arguments:**\n")
        description = f"{head}```json\n{shown}\n```{cut}"
        expires = approval.expires_at[:16].replace("T", " ")
        try:
            unix = int(datetime.fromisoformat(approval.expires_at).timestamp())
            answer_by = f"{expires} UTC (<t:{unix}:R>)"  # Discord shows each reader how long is left
        except ValueError:
            answer_by = f"{expires} UTC"
        return {
            "title": title, "description": description, "url": approval.decision_url,
            "color": RISK_COLOURS.get(approval.risk, COLOURS["normal"]),
            "fields": [{"name": "Risk", "value": approval.risk, "inline": True},
                       {"name": "Answer by", "value": answer_by, "inline": True}],
            "footer": {"text": clip(self._render("approval_footer.txt", approval=approval, buttons=buttons), FOOTER_LIMIT)},
        }

    @staticmethod
    def _prompt_components(approval: base.ApprovalBrief, *, buttons: bool) -> list[dict[str, Any]]:
        row: list[dict[str, Any]] = []
        if buttons:
            custom = f"{APPROVAL_ID}:{approval.approval_id}"
            row += [{"type": BUTTON, "style": SUCCESS, "label": "Approve", "custom_id": f"{custom}:approve"},
                    {"type": BUTTON, "style": DANGER, "label": "Deny", "custom_id": f"{custom}:deny"}]
            if approval.allow_always:
                row.append({"type": BUTTON, "style": SECONDARY, "label": "Always allow", "custom_id": f"{custom}:always"})
        row.append({"type": BUTTON, "style": LINK, "label": "Decision page", "url": approval.decision_url})
        return [{"type": ACTION_ROW, "components": row}]

    # ------------------------------------------------------------------ rendering

    def _render(self, name: str, **context: Any) -> str:
        assert self._ctx is not None
        return self._ctx.render(f"messages/discord/{name}", **context).strip()

    def _components(self, brief: base.HandoffBrief | None, *, release: bool) -> list[dict[str, Any]]:
        buttons: list[dict[str, Any]] = []
        if release and brief is not None and brief.claimable and self.config.application_public_key:
            buttons.append({"type": BUTTON, "style": SUCCESS, "label": "I'm on it",
                            "custom_id": f"{CLAIM_ID}:{brief.handoff_session_id}"[:100]})
        if brief is not None and brief.form_url:
            buttons.append({"type": BUTTON, "style": LINK, "label": "Fill return form", "url": brief.form_url})
        if release and brief is not None and self.config.application_public_key:
            # Clicks come to our interactions endpoint; the custom_id names the handoff for people
            # reading logs, the thread (the message the button is on) routes it.
            buttons.append({"type": BUTTON, "style": DANGER, "label": "Release",
                            "custom_id": f"{RELEASE_ID}:{brief.handoff_session_id}"[:100]})
        return [{"type": ACTION_ROW, "components": buttons}] if buttons else []

    def _dispatch_embed(self, brief: base.HandoffBrief, *, direct: bool = False) -> dict[str, Any]:
        """The brief as one embed within Discord's limits: 256 title, 4096 description,
        1024 per field, 6000 in all. The transcript gets what is left, newest lines first.
        `direct`: in a person's direct message, whose footer says to reply to it (no thread)."""
        import discord

        who = brief.subscriber_name or "A subscriber"
        title = clip_escaped(escape(self._render("title.txt", brief=brief, who=who)), TITLE_LIMIT)
        summary = clip_escaped(escape(brief.summary), SUMMARY_BUDGET)
        action = clip_escaped(escape(brief.expected_action), ACTION_BUDGET)
        core = f"**Summary**\n{summary}\n\n**What to do**\n{action}"
        if brief.outside_hours:
            core = f"*{escape(brief.outside_hours)}*\n\n{core}"
        footer = clip(self._render("footer.txt", who=who, idle=short_duration(brief.idle_timeout_seconds), direct=direct,
                                   release_button=bool(self.config.application_public_key)), FOOTER_LIMIT)

        embed = discord.Embed(title=title, description=core, colour=COLOURS.get(brief.urgency, COLOURS["normal"]),
                              url=brief.form_url or None)
        subscriber = who if not brief.subscriber_email else f"{who} ({brief.subscriber_email})"
        embed.add_field(name="Subscriber", value=clip_escaped(escape(subscriber), FIELD_VALUE_LIMIT), inline=True)
        embed.add_field(name="Urgency", value=brief.urgency, inline=True)
        if brief.contact_back_email:
            embed.add_field(name="Contact back", value=clip_escaped(escape(brief.contact_back_email), FIELD_VALUE_LIMIT), inline=True)
        if brief.expected_return:
            lines = [f"• {escape(line)}" for line in brief.field_lines]
            embed.add_field(name="Please hand back", value=_lines_within(lines, FIELD_VALUE_LIMIT, "on the return form"), inline=False)
        embed.set_footer(text=footer)
        if brief.extra_context:
            # What is left, less a share kept for the transcript (the newest lines matter more).
            room = EMBED_TOTAL_LIMIT - len(embed) - len("Context") - (TRANSCRIPT_RESERVE if brief.transcript else 0)
            if room > 40:
                lines = [f"• **{escape(clip(k, 60))}**: {escape(clip(v, 300))}" for k, v in brief.extra_context.items()]
                embed.add_field(name="Context", value=_lines_within(lines, min(FIELD_VALUE_LIMIT, room), "not shown"), inline=False)
        if brief.transcript:
            room = min(DESCRIPTION_LIMIT - len(core), EMBED_TOTAL_LIMIT - len(embed)) - 4
            text = self._transcript(brief.transcript, room)
            if text:
                embed.description = f"{core}\n\n{text}"
        data: dict[str, Any] = {**embed.to_dict()}
        data.pop("type", None)
        return data

    def _transcript(self, lines: list[base.TranscriptLine], room: int) -> str:
        """The newest transcript lines that fit `room`, under a label saying how many were left out."""
        rendered = [f"**{escape(clip(line.author or line.role, 60))}:** {hang(escape(clip(line.text, TRANSCRIPT_LINE)))}"
                    for line in lines]
        kept: list[str] = []
        for count in range(len(rendered), -1, -1):
            kept = rendered[len(rendered) - count:]
            label = self._render("transcript_label.txt", omitted=len(rendered) - count)
            text = label + "\n" + "\n".join(kept)
            if len(text) <= room:
                return text if kept else ""
        return ""


def _message_route(method: str, channel_id: Any, message_id: Any) -> Any:
    from discord.http import Route

    return Route(method, "/channels/{channel_id}/messages/{message_id}", channel_id=int(channel_id), message_id=int(message_id))


def _is_prompt_of(message: dict[str, Any], approval_id: str) -> bool:
    for row in message.get("components") or []:
        for component in row.get("components") or []:
            if str(component.get("custom_id", "")).startswith(f"{APPROVAL_ID}:{approval_id}:"):
                return True
    footer = ((message.get("embeds") or [{}])[0].get("footer") or {}).get("text") or ""
    return footer.startswith(f"Approval {approval_id} ")
