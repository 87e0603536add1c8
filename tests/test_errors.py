"""The one error shape (bot/errors.py): every API answer and tool result that reports a
failure is built by `error_body`."""

from __future__ import annotations

from bot.domain.handoffs import HandoffAlreadyOpen
from bot.errors import Conflict, DeskError, NotFound, error_body


def test_the_body_carries_the_code_the_hint_and_any_details_beside_it() -> None:
    assert error_body("invalid_input", "summary: is required", fields={"summary": "is required"}) == {
        "error": "invalid_input", "details": {"hint": "summary: is required", "fields": {"summary": "is required"}},
    }
    assert error_body("unauthorized", "log in to the inbox") == {
        "error": "unauthorized", "details": {"hint": "log in to the inbox"},
    }


def test_typed_errors_answer_in_the_same_shape() -> None:
    assert NotFound("handoff", "hs_1").to_json() == error_body("not_found", "handoff 'hs_1' not found")
    assert Conflict("already released", state="released").to_json() == error_body(
        "conflict", "already released", state="released"
    )



def test_a_domain_error_is_part_of_the_tree_and_carries_facts() -> None:
    refused = HandoffAlreadyOpen("hs_1")
    assert isinstance(refused, DeskError)
    assert (refused.code, refused.active_id) == ("handoff_already_active", "hs_1")
