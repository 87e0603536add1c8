"""Slack's names and numbers as this adapter uses them: the action and block ids of our
buttons, the metadata type that marks our posts, what the channel can do, Block Kit's limits,
how far back a lost post is looked for, and which of Slack's error names mean what."""

from __future__ import annotations

from channels.base import Capabilities, ClaimPress, ReleasePress

RELEASE_ACTION = "handoff_release"
CLAIM_ACTION = "handoff_claim"
FORM_ACTION = "handoff_form"
HANDOFF_ACTIONS: dict[str, type[ReleasePress | ClaimPress]] = {RELEASE_ACTION: ReleasePress, CLAIM_ACTION: ClaimPress}
TAKEN_BLOCK = "handoff_taken"  # the "taken" line that replaces a dispatch's buttons
# Approval buttons: the action says what was pressed, the value carries the approval id.
APPROVAL_ACTIONS = {"approval_approve": (True, False), "approval_deny": (False, False), "approval_always": (True, True)}
APPROVAL_BLOCK = "approval_actions"
EVENT_TYPE = "handoff_desk_message"  # message metadata type that marks our posts
# What Slack offers the desk: buttons and threads, the Events API over a webhook, posts found
# again by their metadata (reconcile), approval prompts, edits in place, and a brief to one
# person in their direct message with the app (conversations.open).
CAPABILITIES = Capabilities(buttons=True, threads=True, inbound=True, webhook=True, reconcile=True, approvals=True, edits=True,
                            direct=True)

# Slack's limits (https://docs.slack.dev/reference/block-kit): section text 3000 characters,
# header 150, a section field 2000; the top-level `text` is cut by Slack after 40,000, and
# as a notification fallback a few thousand is plenty.
SECTION_LIMIT = 3000
HEADER_LIMIT = 150
FIELD_LIMIT = 2000
FALLBACK_LIMIT = 4000
NAME_CACHE_LIMIT = 5000
# The exact arguments of an approval prompt: preformatted blocks of at most this many
# characters, and at most this many in all (the rest is announced, never silently dropped).
ARGUMENTS_BLOCK, ARGUMENTS_LIMIT = 2900, 8700
PROMPT_CACHE_LIMIT = 1000
DISPATCH_CACHE_LIMIT = 1000
DIRECT_CACHE_LIMIT = 5000  # user id -> the id of their direct message with the app
# A Slack user id (U…, W… in Enterprise Grid), as a person's linked identity holds it; a
# direct message's channel id starts with D.
USER_ID = r"[UW][A-Z0-9]{2,}"
DIRECT_CHANNEL_PREFIX = "D"
# The slash command's answer goes to its response_url: Slack's own host, or the host of the
# configured API (a local or test Slack); any other URL is refused, whoever signed it.
HOOKS_URL = "https://hooks.slack.com/"
NOTE_LIMIT = 200  # characters of an away note (AvailabilityRequest.note)
# find_sent looks this far back: a retry follows its lost attempt within minutes, so the
# message is among the newest of the channel (or the newest replies of its thread).
HISTORY_PAGES, HISTORY_PAGE_SIZE = 3, 100
REPLIES_PAGES, REPLIES_PAGE_SIZE = 10, 200

AUTH_ERRORS = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "org_login_required"}
# Slack's own words for these two: "it's possible some aspect of the operation succeeded".
MAYBE_DONE_ERRORS = {"internal_error", "fatal_error"}
TRANSIENT_ERRORS = {"ratelimited", "rate_limited", "service_unavailable", "team_added_to_org"} | MAYBE_DONE_ERRORS
# Messages people edit or delete, joins, topic changes … are not replies to relay.
RELAYED_SUBTYPES = {None, "thread_broadcast", "file_share"}
