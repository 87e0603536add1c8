"""Discord's numbers as this adapter uses them: its limits, interaction, response and
component types, message flags, channel types, colours, and the custom_ids of our buttons."""

from __future__ import annotations

import re

DEFAULT_API = "https://discord.com/api/v10"
DEFAULT_GATEWAY = "wss://gateway.discord.gg/"
RELEASE_ID = "handoff_release"
CLAIM_ID = "handoff_claim"

# Discord's limits (https://discord.com/developers/docs/resources/message#embed-object-embed-limits)
CONTENT_LIMIT = 2000
TITLE_LIMIT = 256
DESCRIPTION_LIMIT = 4096
FIELD_NAME_LIMIT = 256
FIELD_VALUE_LIMIT = 1024
FOOTER_LIMIT = 2048
EMBED_TOTAL_LIMIT = 6000
THREAD_NAME_LIMIT = 100
SUMMARY_BUDGET, ACTION_BUDGET = 2000, 1000  # escaped characters in the description
TRANSCRIPT_LINE = 400  # raw characters of one transcript message
TRANSCRIPT_RESERVE = 900  # characters of the embed kept for the transcript before the context is shown
NONCE_LENGTH = 25

# Interaction and response types, message flags, component types.
PING, COMPONENT = 1, 3
PONG, MESSAGE_REPLY = 1, 4
EPHEMERAL, SUPPRESS_EMBEDS = 1 << 6, 1 << 2
ACTION_ROW, BUTTON = 1, 2
SECONDARY, SUCCESS, DANGER, LINK = 2, 3, 4, 5
TEXT_CHANNEL_TYPES = {0: "text", 5: "announcement"}
CHANNEL_KINDS = {2: "voice channel", 4: "category", 13: "stage channel", 15: "forum", 16: "media channel"}
THREAD_ALREADY_EXISTS = 160004
SIGNATURE_MAX_AGE = 300  # seconds; interactions are answered within 3 s, so older ones are replays
COLOURS = {"high": 0xED4245, "normal": 0x5865F2, "low": 0x99AAB5}
RISK_COLOURS = {"high": 0xED4245, "medium": 0xFEE75C, "low": 0x99AAB5}
CLOSED_COLOUR = 0x4F545C
# Approval buttons: custom_id `approval:<approval id>:approve|deny|always`.
APPROVAL_ID = "approval"
_APPROVAL_CUSTOM_ID = re.compile(r"^approval:(ap_[A-Za-z0-9_-]{1,80}):(approve|deny|always)$")
APPROVAL_CHOICES = {"approve": (True, False), "deny": (False, False), "always": (True, True)}
ARGUMENTS_LIMIT = 2800  # characters of pretty JSON in a prompt's embed (the rest is announced, never dropped silently)
PROMPT_CACHE_LIMIT = 1000
DIRECT_CACHE_LIMIT = 5000  # people's direct messages with the bot, and each one's newest dispatch
DIRECT_LOOKUP_LIMIT = 50  # newest messages of a direct message searched for its newest dispatch
DM_CHANNEL, BOT_DM_CONTEXT = 1, 1  # a direct message's channel type; an interaction's context there
CANNOT_MESSAGE_USER, UNKNOWN_USER = 50007, 10013  # Discord's error codes for a person out of reach
PROMPT_LOOKUP_LIMIT = 100  # newest channel messages searched for a prompt this process did not send
