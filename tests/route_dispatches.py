"""The dispatch of a route's step, as the core sends one to each notified channel, for the
provider tests of Claim buttons and "taken" edits (the core's side is tested with the core)."""

from __future__ import annotations

from channels.base import Dispatch, HandoffBrief

SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."
FORM_URL = "https://desk.example.com/f/abc"


def route_dispatch(sid: str = "hs_route1", *, claimable: bool = True) -> Dispatch:
    """A claimable dispatch with a form link (`claimable=False`: the same as a plain channel's)."""
    brief = HandoffBrief(handoff_session_id=sid, short_code=sid[-4:].upper(), conversation_id="c_1", subscriber_name="Ana",
                         summary=SUMMARY, expected_action=ACTION, form_url=FORM_URL, claimable=claimable)
    return Dispatch(handoff_id=sid, text=f"Handoff for Ana: {SUMMARY}", brief=brief, delivery_key=f"hd-{sid}")
