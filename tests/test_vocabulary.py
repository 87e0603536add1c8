"""The stored words (bot/store/vocabulary.py): their values are contracts, and each phrase
people or agents read is defined once beside its word."""

from __future__ import annotations

import json

import pytest

from bot.store.vocabulary import OPEN_STATES, HandoffState, InboundState, OutboxState, Outcome, ReleaseReason, Role


def test_the_values_are_the_words_clients_and_templates_already_use() -> None:
    assert [s.value for s in HandoffState] == ["dispatching", "active", "released", "failed"]
    assert OPEN_STATES == ("dispatching", "active")
    assert [s.value for s in OutboxState] == ["pending", "sending", "sent", "failed"]
    assert [s.value for s in InboundState] == ["pending", "processing", "done", "ignored", "failed"]
    assert f"inbound_{InboundState.IGNORED}" == "inbound_ignored"  # the audit event's name
    assert [r.value for r in Role] == ["subscriber", "agent", "human", "system"]
    assert [o.value for o in Outcome] == ["resolved", "unresolved", "needs_followup"]
    assert [r.value for r in ReleaseReason] == ["form", "release_token", "agent", "owner", "idle_timeout", "unclaimed"]


def test_a_member_is_its_string_in_json_templates_and_comparisons() -> None:
    assert json.dumps({"state": HandoffState.ACTIVE}) == '{"state": "active"}'
    assert f"{ReleaseReason.IDLE_TIMEOUT}" == "idle_timeout"
    assert "active" == HandoffState.ACTIVE  # a value read back from a column
    assert HandoffState("released") is HandoffState.RELEASED


def test_an_unknown_word_is_refused_with_its_value_named() -> None:
    with pytest.raises(ValueError, match="'finished' is not a valid ReleaseReason"):
        ReleaseReason("finished")


@pytest.mark.parametrize(("reason", "phrase"), [
    (ReleaseReason.FORM, "the recipient submitted the return form"),
    (ReleaseReason.RELEASE_TOKEN, "the recipient released the conversation"),
    (ReleaseReason.AGENT, "the sibling agent has handed control back"),
    (ReleaseReason.OWNER, "the owner released the conversation"),
    (ReleaseReason.IDLE_TIMEOUT, "the handoff ended after 30 minutes without activity"),
])
def test_every_reason_has_its_resume_phrase(reason: ReleaseReason, phrase: str) -> None:
    assert reason.resume_phrase("30 minutes") == phrase


def test_every_reason_has_a_page_phrase() -> None:
    assert ReleaseReason.OWNER.page_phrase == "released by the owner"
    assert ReleaseReason.IDLE_TIMEOUT.page_phrase == "ended after a period without activity"
    assert all(reason.page_phrase for reason in ReleaseReason)


def test_only_the_timers_default_to_unresolved() -> None:
    defaults = {reason: reason.default_outcome for reason in ReleaseReason}
    assert defaults.pop(ReleaseReason.IDLE_TIMEOUT) is Outcome.UNRESOLVED
    assert defaults.pop(ReleaseReason.UNCLAIMED) is Outcome.UNRESOLVED  # nobody took it: nothing was resolved
    assert set(defaults.values()) == {Outcome.RESOLVED}


def test_outcome_labels_are_what_the_pages_show() -> None:
    assert [o.label for o in Outcome] == ["Resolved", "Unresolved", "Needs follow-up"]
