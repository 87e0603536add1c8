"""Return forms over HTTP: links, typed submission, single use, every unusable state, headers."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from bot.store.models import FormLink, HandoffSession, Message
from forms.links import FormLinks
from tests.conftest import Harness, StartDesk

FIELDS = [
    {"name": "order_status", "type": "enum", "enum_values": ["shipped", "delayed", "lost", "not_found"], "required": True,
     "label": "Order status", "description": "Where the order is now."},
    {"name": "tracking_url", "type": "url", "placeholder": "https://…"},
    {"name": "eta_date", "type": "date", "required": True},
    {"name": "items", "type": "number"},
    {"name": "refunded", "type": "boolean"},
    {"name": "carrier", "type": "string"},
    {"name": "notes", "type": "multiline"},
]
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}


async def open_handoff(harness: Harness, fields: list[dict[str, Any]] | None = None, **extra: Any) -> tuple[str, str, str]:
    cid = await harness.conversation()
    result = await harness.start_handoff(cid, expected_return=FIELDS if fields is None else fields, **extra)
    sid = result["handoff_session_id"]
    url = (await harness.handoff(sid))["form_url"]
    assert url.startswith("http://desk.test/f/")
    return cid, sid, url.removeprefix("http://desk.test")


def answers(**overrides: str) -> dict[str, str]:
    data = {
        "f_order_status": "shipped", "f_tracking_url": "https://carrier.example/track/abc", "f_eta_date": "2026-06-10",
        "f_items": "3", "f_refunded": "no", "f_carrier": "DHL", "f_notes": "Left the depot\nthis morning",
        "outcome": "resolved", "note": "Checked with the carrier.", "filled_by": "Sam",
    }
    data.update(overrides)
    return data


async def submit(harness: Harness, path: str, data: dict[str, str], headers: dict[str, str] | None = None) -> Any:
    token = path.rsplit("/", 1)[1]
    return await harness.client.post(path, data={"token": token, **data}, headers=SAME_ORIGIN if headers is None else headers)


async def test_the_dispatch_and_the_api_carry_the_link(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    _cid, sid, path = await open_handoff(harness)
    dispatch = harness.desk.channels.get(1).sent[0]
    assert f"http://desk.test{path}" in dispatch.text
    assert "works once, for 1 day; you may forward it to a colleague" in dispatch.text
    assert dispatch.brief.form_url == f"http://desk.test{path}"
    assert "  • Order status [one of: shipped, delayed, lost, not_found] (required) — Where the order is now." in dispatch.text


async def test_every_field_type_renders_as_its_input(harness: Harness) -> None:
    _cid, _sid, path = await open_handoff(harness)
    page = await harness.client.get(path)
    assert page.status_code == 200
    html = page.text
    assert 'name="f_order_status" value="shipped"' in html
    assert 'type="radio"' in html  # ≤5 enum values: radios
    assert re.search(r'<input id="in-tracking_url" name="f_tracking_url" value=""\s+type="url"', html)
    assert re.search(r'<input id="in-eta_date" name="f_eta_date" value=""\s+type="date"\s+min="0001-01-01" max="9999-12-31"'
                     r'\s+placeholder="YYYY-MM-DD"', html)  # four-digit years only; the format where there is no picker
    # a number is text: <input type=number> turns a typed "12,50" into 1250 before we see it
    assert re.search(r'<input id="in-items" name="f_items" value=""\s+type="text"\s+inputmode="decimal"', html)
    assert 'name="f_refunded" value="yes"' in html
    assert 'name="f_refunded" value="no"' in html
    assert re.search(r'<input id="in-carrier" name="f_carrier" value=""\s+type="text"', html)
    assert '<textarea id="in-notes" name="f_notes"' in html
    assert '<label for="in-carrier">Carrier</label>' in html  # labels are tied to inputs
    assert 'aria-describedby="desc-order_status"' in html
    assert "Where the order is now." in html
    assert html.count('<span class="req">required</span>') == 2
    assert 'placeholder="https://…"' in html


async def test_long_enums_become_a_select(harness: Harness) -> None:
    _cid, _sid, path = await open_handoff(harness, [{"name": "size", "type": "enum", "enum_values": list("ABCDEFG")}])
    html = (await harness.client.get(path)).text
    assert '<select id="in-size" name="f_size"' in html
    assert '<option value="G">G</option>' in html


async def test_submission_releases_with_typed_values(harness: Harness) -> None:
    cid, sid, path = await open_handoff(harness)
    response = await submit(harness, path, answers())
    assert response.status_code == 200, response.text
    assert "Thank you, handed back" in response.text
    assert "<dt>Outcome</dt><dd>Resolved</dd>" in response.text  # what was sent, besides the values
    assert "<dt>Note for the assistant</dt><dd>Checked with the carrier.</dd>" in response.text
    assert f'<a href="/inbox/handoffs/{sid}">Are you the owner? See this handoff in the inbox</a>' in response.text
    handoff = await harness.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["outcome"], handoff["released_by"]) == (
        "released", "form", "resolved", "Sam")
    assert handoff["returned"] == {
        "order_status": "shipped", "tracking_url": "https://carrier.example/track/abc", "eta_date": "2026-06-10",
        "items": 3, "refunded": False, "carrier": "DHL", "notes": "Left the depot\nthis morning",
    }
    assert handoff["missing_required"] == []
    assert handoff["form_url"] is None
    system = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert system == [
        "[Bot resumed — the recipient submitted the return form. Outcome: resolved. Checked with the carrier.]\n"
        "Returned data:\n  • order_status: shipped\n  • tracking_url: https://carrier.example/track/abc\n"
        "  • eta_date: 2026-06-10\n  • items: 3\n  • refunded: false\n  • carrier: DHL\n"
        "  • notes: Left the depot\n    this morning"
    ]


async def test_missing_required_fields_do_not_block(harness: Harness) -> None:
    cid, sid, path = await open_handoff(harness)
    response = await submit(harness, path, answers(f_order_status="", f_eta_date="", outcome="needs_followup"))
    assert response.status_code == 200
    assert "Left empty although expected: Order status, Eta date." in response.text
    handoff = await harness.handoff(sid)
    assert handoff["missing_required"] == ["order_status", "eta_date"]
    assert handoff["outcome"] == "needs_followup"
    system = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert system[0].endswith("Missing required: order_status, eta_date")


async def test_a_note_or_name_longer_than_the_page_allows_is_refused_not_cut(harness: Harness) -> None:
    _cid, sid, path = await open_handoff(harness)
    response = await submit(harness, path, answers(note="n" * 2001, filled_by="S" * 101))
    assert response.status_code == 422
    assert "Note</a> is longer than 2000 characters (2001)" in response.text
    assert "Your name</a> is longer than 100 characters (101)" in response.text
    assert "n" * 2001 in response.text  # what was typed is kept, whole
    assert (await harness.handoff(sid))["state"] == "active"  # nothing consumed, nothing released
    assert (await submit(harness, path, answers(note="n" * 2000))).status_code == 200
    assert (await harness.handoff(sid))["note"] == "n" * 2000


async def test_wrong_typed_values_come_back_for_correction(harness: Harness) -> None:
    _cid, sid, path = await open_handoff(harness)
    response = await submit(harness, path, answers(f_items="three", f_eta_date="10/06/2026", f_tracking_url="ftp://x",
                                                   f_order_status="stolen", outcome="great"))
    assert response.status_code == 422
    html = response.text
    assert "Please check 5 answers" in html
    assert "Items must be a number like 1250 or 12.50 (got &#34;three&#34;)." in html
    assert "Eta date must be a date as YYYY-MM-DD, such as 2026-06-10 (got &#34;10/06/2026&#34;)." in html
    assert 'aria-invalid="true"' in html
    assert 'value="three"' in html  # what was typed is kept
    assert 'value="10/06/2026"' in html
    assert 'value="ftp://x"' in html
    assert 'Note for the assistant' in html
    assert "Checked with the carrier." in html
    assert (await harness.handoff(sid))["state"] == "active"  # nothing consumed, nothing released
    fixed = await submit(harness, path, answers())
    assert fixed.status_code == 200


async def test_a_decimal_comma_is_a_decimal_and_what_reads_two_ways_is_refused_as_typed(harness: Harness) -> None:
    fields = [{"name": "refund", "type": "number", "label": "Refund"}, {"name": "weight", "type": "number"}]
    cid, sid, path = await open_handoff(harness, fields)
    ambiguous = await submit(harness, path, {"f_refund": "12,50", "f_weight": "1,250", "outcome": "resolved"})
    assert ambiguous.status_code == 422
    assert ("Weight is ambiguous: &#34;1,250&#34; could mean 1250 or 1.25; write 1250 or 1.25, whichever you mean."
            in ambiguous.text)
    assert 'value="12,50"' in ambiguous.text
    assert 'value="1,250"' in ambiguous.text  # both kept as typed
    mixed = await submit(harness, path, {"f_refund": "12,50", "f_weight": "1,234.5", "outcome": "resolved"})
    assert mixed.status_code == 422
    assert "Refund uses a decimal comma (&#34;12,50&#34;) but Weight uses a decimal point" in mixed.text
    assert (await harness.handoff(sid))["state"] == "active"
    done = await submit(harness, path, {"f_refund": "12,50", "f_weight": "1.250,5", "outcome": "resolved"})
    assert done.status_code == 200, done.text
    assert (await harness.handoff(sid))["returned"] == {"refund": 12.5, "weight": 1250.5}
    [resume] = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert resume.endswith("Returned data:\n  • refund: 12.5\n  • weight: 1250.5")


async def test_get_never_consumes_and_a_second_post_is_refused(harness: Harness) -> None:
    cid, sid, path = await open_handoff(harness)
    for _ in range(3):  # scanners, previews, the recipient opening it twice
        assert (await harness.client.get(path)).status_code == 200
    assert (await harness.handoff(sid))["state"] == "active"
    assert (await submit(harness, path, answers())).status_code == 200
    again = await submit(harness, path, answers(note="second try"))
    assert again.status_code == 410
    assert "This form was already submitted" in again.text
    assert "by Sam" in again.text
    page = await harness.client.get(path)
    assert page.status_code == 410
    assert "The assistant has resumed the conversation" in page.text
    assert len([m for m in await harness.messages(cid) if m["role"] == "system"]) == 1


async def test_concurrent_submissions_release_once(harness: Harness) -> None:
    cid, _sid, path = await open_handoff(harness)
    responses = await asyncio.gather(*(submit(harness, path, answers(note=f"try {i}")) for i in range(6)))
    assert sorted(r.status_code for r in responses) == [200] + [410] * 5
    async with harness.desk.db.transaction() as session:
        count = await session.scalar(
            select(func.count()).select_from(Message).where(Message.conversation_id == cid, Message.role == "system"))
    assert count == 1


async def test_expired_links_say_when_and_what_to_do(harness: Harness) -> None:
    _cid, sid, path = await open_handoff(harness)
    harness.desk.clock.advance(timedelta(hours=24, seconds=1))
    page = await harness.client.get(path)
    assert page.status_code == 410
    assert "This link has expired" in page.text
    assert "The handoff is still open." in page.text
    # the recipient: what they can still do without the form, in the channel this link came through
    assert ("To hand back without the form, reply to the handoff message in Owner inbox with /release (you may add"
            " resolved, unresolved or needs_followup, and a note), or press its Release button.") in page.text
    assert "Or ask the owner for a fresh link: it comes to you the same way this one did." in page.text
    # the owner: where the fresh link is made
    assert (f'<a href="/inbox/handoffs/{sid}">Are you the owner? Make a fresh link on this handoff&#39;s page'
            " in the inbox</a>") in page.text
    assert (await submit(harness, path, answers())).status_code == 410
    assert (await harness.handoff(sid))["state"] == "active"


async def test_a_released_handoff_explains_itself(harness: Harness) -> None:
    _cid, sid, path = await open_handoff(harness)
    await harness.client.post(f"/api/handoffs/{sid}/release", json={})
    page = await harness.client.get(path)
    assert page.status_code == 410
    assert "This handoff has already ended" in page.text
    assert "released by the owner" in page.text
    assert (await submit(harness, path, answers())).status_code == 410


@pytest.mark.parametrize("mangle", [
    lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # signature tampered
    lambda t: "garbage",
    lambda t: FormLinks(secret_keys=["another-key-0123456789"], public_url="", ttl=timedelta(1)).token("made-up-id"),
])
async def test_tampered_tokens_get_a_plain_404(harness: Harness, mangle: Any) -> None:
    _cid, sid, path = await open_handoff(harness)
    bad = "/f/" + mangle(path.rsplit("/", 1)[1])
    page = await harness.client.get(bad)
    assert page.status_code == 404
    assert "This link is not valid" in page.text
    assert sid not in page.text
    assert "Order status" not in page.text  # no detail leaks
    assert (await submit(harness, bad, answers())).status_code == 404


async def test_a_forged_link_id_signed_with_our_key_is_still_404(harness: Harness) -> None:
    forged = harness.desk.forms.token("no-such-link")
    assert (await harness.client.get(f"/f/{forged}")).status_code == 404


async def test_cross_origin_posts_and_missing_body_tokens_are_refused(harness: Harness) -> None:
    _cid, sid, path = await open_handoff(harness)
    cross = await submit(harness, path, answers(), headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    evil = await submit(harness, path, answers(), headers={"Origin": "https://evil.example"})
    assert evil.status_code == 403
    no_token = await harness.client.post(path, data=answers(), headers=SAME_ORIGIN)
    assert no_token.status_code == 403
    assert (await harness.handoff(sid))["state"] == "active"


async def test_pages_carry_security_headers_and_escape_everything(harness: Harness) -> None:
    hostile = [{"name": "x", "type": "string", "label": '<script>alert("label")</script>', "description": '"><img src=x onerror=1>'}]
    _cid, _sid, path = await open_handoff(harness, hostile, summary='<script>alert("summary")</script> needs a hand now')
    page = await harness.client.get(path)
    assert "<script>" not in page.text
    assert "<img src=x" not in page.text
    assert "&lt;script&gt;alert(&#34;label&#34;)&lt;/script&gt;" in page.text
    headers = page.headers
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "form-action 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"


def test_every_html_template_is_autoescaped() -> None:
    from bot.domain.rendering import Renderer
    from bot.runtime.paths import TEMPLATES_DIR

    env = Renderer().env
    html_templates = [p.relative_to(TEMPLATES_DIR).as_posix() for p in TEMPLATES_DIR.rglob("*.html")]
    assert len(html_templates) >= 8
    for name in html_templates:
        assert env.autoescape(name) is True, name  # type: ignore[operator]
    assert env.autoescape("messages/dispatch.txt") is False  # type: ignore[operator]


async def test_links_signed_with_a_previous_key_keep_working(start_desk: StartDesk, database_url: str) -> None:
    first = await start_desk(secret_key="old-secret-key-0123456789")
    _cid, sid, path = await open_handoff(first)
    await first.desk.stop()
    rotated = await start_desk(url=database_url, secret_key="new-secret-key-0123456789",
                               previous_secret_keys=["old-secret-key-0123456789"])
    assert (await rotated.client.get(path)).status_code == 200
    assert (await rotated.handoff(sid))["form_url"] != f"http://desk.test{path}"  # new links use the new key
    forgotten = await start_desk(url=database_url, secret_key="new-secret-key-0123456789")
    assert (await forgotten.client.get(path)).status_code == 404


async def test_the_owner_reissues_a_link_and_the_old_one_stops(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    _cid, sid, old = await open_handoff(harness)
    inbox = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert f'href="http://desk.test{old}">Fill return form</a>' in inbox
    csrf = re.search(r'name="csrf" value="([^"]+)"', inbox).group(1)
    response = await harness.client.post(f"/inbox/handoffs/{sid}/form-link", data={"csrf": csrf})
    assert response.status_code == 303
    new = (await harness.handoff(sid))["form_url"].removeprefix("http://desk.test")
    assert new != old
    replaced = await harness.client.get(old)
    assert replaced.status_code == 410
    assert "This link was replaced" in replaced.text
    assert (await harness.client.get(new)).status_code == 200
    await harness.desk.settle()
    notice = harness.desk.channels.get(1).sent[-1]
    assert notice.purpose == "notice"
    assert f"http://desk.test{new}" in notice.text
    assert "form_link_issued" in await harness.kinds(sid)


async def test_a_new_handoff_is_stored_naming_its_one_link(harness: Harness) -> None:
    _cid, sid, path = await open_handoff(harness)
    async with harness.desk.db.read() as session:
        links = (await session.scalars(select(FormLink).where(FormLink.handoff_session_id == sid))).all()
        handoff = await session.get(HandoffSession, sid)
    assert [link.id for link in links] == [handoff.form_link_id if handoff else None]
    assert links[0].superseded_at is None
    assert harness.desk.forms.link_id(path.rsplit("/", 1)[1]) == links[0].id
