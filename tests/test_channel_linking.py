"""channels/linking.py: what counts as a link command, as adapters and the core recognise it."""

from __future__ import annotations

import pytest

from channels.linking import LINK_CODE_ALPHABET, link_code


@pytest.mark.parametrize(("text", "code"), [
    ("/link 7H3K9QXW", "7H3K9QXW"),
    ("  /LINK 7h3k-9qxw  ", "7h3k-9qxw"),  # the case and a dash are the redemption's to ignore
    ("/link@handoff_desk_bot 7H3K 9QXW", "7H3K 9QXW"),  # a group chat addressing the bot
    ("/link", ""),  # a link command all the same: answered as an unknown code, never relayed
    ("/link whatever this is", "whatever this is"),
    ("link 7H3K9QXW", "7H3K9QXW"),  # Slack takes a leading / for its own commands
    ("Link: 7H3K-9QXW", "7H3K-9QXW"),
    ("/link 7H3K9QXW\n\n-- \nOlga Petrova", "7H3K9QXW"),  # a mail's signature is not part of it
])
def test_a_link_command_is_recognised_with_its_code_as_typed(text: str, code: str) -> None:
    assert link_code(text) == code


@pytest.mark.parametrize("text", [
    "link sent to you", "link up at noon",  # "UPATNOON" has an O: no code has one
    "linked 7H3K9QXW", "/linkage 7H3K9QXW", "please /link 7H3K9QXW", "link 7H 3K 9Q XW", "link\n7H3K9QXW",
    "/start link-7H3K9QXW",  # a deep link only where the adapter says so (a private chat)
])
def test_ordinary_words_are_not_a_link_command(text: str) -> None:
    assert link_code(text) is None


def test_telegrams_deep_link_is_one_where_the_adapter_says_so() -> None:
    assert link_code("/start link-7H3K9QXW", deep_link=True) == "7H3K9QXW"
    assert link_code("/start", deep_link=True) is None
    assert "O" not in LINK_CODE_ALPHABET and "0" not in LINK_CODE_ALPHABET and "I" not in LINK_CODE_ALPHABET
