"""The one way routes get the desk (bot/web/deps.py): every dependency reads `app.state.desk`
when the request comes, so putting another desk there swaps it for every router — the API, the
web chat, the inbox, approval pages and return-form pages alike."""

from __future__ import annotations

from pathlib import Path

import httpx

from bot.web.app import create_app
from bot.web.deps import handoffs_of
from tests.approval_actions import refund_action
from tests.conftest import StartDesk

API_KEY = "k-0123456789abcdef0123"


async def test_every_router_reaches_the_desk_through_app_state(start_desk: StartDesk, tmp_path: Path) -> None:
    plain = await start_desk(url=f"sqlite:///{tmp_path / 'plain.db'}")  # no key, no chat, an open inbox
    other = await start_desk(api={"key": API_KEY}, owner={"token": "owner-secret"}, fronts=[{"kind": "web", "title": "Acme help"}],
                             actions=[refund_action(1)])
    other.client.headers["Authorization"] = f"Bearer {API_KEY}"
    cid = await other.conversation()
    form_path = (await other.handoff((await other.start_handoff(cid))["handoff_session_id"]))["form_url"]
    gated = await other.tool(cid, "refund_order", {"order_id": "A1", "amount": 5})
    approval_path = other.desk.approvals.decision_url(gated["approval_id"])

    app = create_app(plain.desk, manage_desk=False)
    requests = {  # path → (status from the plain desk, status once app.state holds the other desk)
        "/api/handoffs": (200, 401),  # the other desk has an api.key
        "/chat": (404, 200),  # … a web front
        "/inbox": (200, 303),  # … an owner token, so a login first
        form_path.removeprefix("http://desk.test"): (404, 200),  # … this handoff's form link
        approval_path.removeprefix("http://desk.test"): (404, 200),  # … this approval
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://desk.test") as client:
        before = {path: (await client.get(path)).status_code for path in requests}
        app.state.desk = other.desk
        after = {path: (await client.get(path)).status_code for path in requests}

    assert before == {path: statuses[0] for path, statuses in requests.items()}
    assert after == {path: statuses[1] for path, statuses in requests.items()}


async def test_one_service_can_be_swapped_alone(start_desk: StartDesk, tmp_path: Path) -> None:
    """Overriding `handoffs_of` changes what the routes that read handoffs see, and nothing else:
    the list comes from the read side (queries_of), which still reads the app's own desk."""
    plain = await start_desk(url=f"sqlite:///{tmp_path / 'plain.db'}")
    other = await start_desk()
    sid = (await other.start_handoff(await other.conversation()))["handoff_session_id"]

    app = create_app(plain.desk, manage_desk=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://desk.test") as client:
        assert (await client.get(f"/api/handoffs/{sid}")).status_code == 404
        app.dependency_overrides[handoffs_of] = lambda: other.desk.handoffs
        swapped = await client.get(f"/api/handoffs/{sid}")
        listed = await client.get("/api/handoffs")

    assert swapped.status_code == 200
    assert swapped.json()["handoff_session_id"] == sid
    assert listed.json()["handoffs"] == []
