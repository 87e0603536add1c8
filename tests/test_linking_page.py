"""bot/web/inbox/linking_page.py: "Link a channel" — a signed-in person takes a code (a POST,
CSRF-checked), sends it from the channel, and sees the identity listed; the owner token has
nobody to link. The real desk and inbox, the Telegram adapter against tests/fake_telegram.py."""

from __future__ import annotations

import re
from typing import Any

import httpx
from sqlalchemy import func, select

from bot.store.models import LinkCode
from tests.conftest import TELEGRAM_TOKEN, Harness, StartDesk
from tests.fake_telegram import BOT_USER, SAM, STAFF_CHAT_ID, FakeTelegram

PAGE = "/inbox/account/linking"
OWNER_TOKEN = "owner-token-0123456789abcdef"
SECRET = "test_webhook-secret-1"


async def desk(start_desk: StartDesk, telegram: FakeTelegram) -> Harness:
    h = await start_desk(owner={"token": OWNER_TOKEN}, delivery={"base_backoff": "10ms"}, channels=[
        {"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
        {"id": 2, "kind": "telegram", "label": "Telegram support", "bot_token": TELEGRAM_TOKEN, "chat_id": STAFF_CHAT_ID,
         "api_base_url": telegram.base_url, "mode": "webhook", "webhook_secret": SECRET},
    ])
    await h.desk.people.add(pid="olga", name="Olga Petrova", email="olga@example.com", source="cli", actor="test")
    return h


async def sign_in_as_olga(h: Harness) -> None:
    token, _ = await h.desk.sessions.open(await h.desk.people.get("olga"), via="password")
    h.client.cookies.set("handoff_session", token)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)


async def codes(h: Harness) -> int:
    async with h.desk.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(LinkCode)) or 0)


async def post(h: Harness, path: str, **form: Any) -> httpx.Response:
    return await h.client.post(path, data=form)


async def test_a_person_takes_a_code_sends_it_and_sees_the_identity(start_desk: StartDesk, telegram: FakeTelegram) -> None:
    h = await desk(start_desk, telegram)
    await sign_in_as_olga(h)
    shown = await h.client.get(PAGE)
    assert shown.status_code == 200
    assert "Nothing yet; replies by e-mail from olga@example.com are already yours." in shown.text
    assert await codes(h) == 0  # GET never issues one

    assert (await post(h, PAGE, csrf="forged")).status_code == 403
    issued = await post(h, PAGE, csrf=csrf_of(shown.text))
    assert issued.status_code == 200
    code = re.search(r'<code id="link-code">([A-Z0-9]{8})</code>', issued.text)
    assert code is not None
    assert f"Send <code>/link {code.group(1)}</code>" in issued.text
    assert f'href="https://t.me/{BOT_USER["username"]}?start=link-{code.group(1)}"' in issued.text
    assert await codes(h) == 1

    update = telegram.private_update(f"/start link-{code.group(1)}", user=SAM)
    answered = await h.client.post("/webhooks/2", json=update, headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})
    assert answered.status_code == 200
    await h.desk.settle()
    listed = (await h.client.get(PAGE)).text
    assert f"<strong>telegram</strong> {SAM['id']}" in listed

    [identity] = await h.desk.people.identities("olga")
    assert (await post(h, f"{PAGE}/unlink", csrf=csrf_of(listed), identity=str(identity.id + 1000))).status_code == 400
    unlinked = await post(h, f"{PAGE}/unlink", csrf=csrf_of(listed), identity=str(identity.id))
    assert (unlinked.status_code, unlinked.headers["location"]) == (303, f"{PAGE}?unlinked=1")
    assert await h.desk.people.identities("olga") == []


async def test_the_owner_token_has_nobody_to_link(start_desk: StartDesk, telegram: FakeTelegram) -> None:
    h = await desk(start_desk, telegram)
    assert (await h.client.post("/inbox/login", data={"token": OWNER_TOKEN, "next": "/inbox"})).status_code == 303
    shown = await h.client.get(PAGE)
    assert "the desk's service identity, not a person" in shown.text
    refused = await post(h, PAGE, csrf=csrf_of(shown.text))
    assert refused.status_code == 400
    assert await codes(h) == 0


async def test_signed_out_the_page_asks_to_sign_in(start_desk: StartDesk, telegram: FakeTelegram) -> None:
    h = await desk(start_desk, telegram)
    shown = await h.client.get(PAGE)
    assert (shown.status_code, shown.headers["location"]) == (303, f"/inbox/login?next={PAGE}")
