"""A person's API tokens page (bot/web/tokens_page.py): made with the secret shown once,
listed with their role and dates, used on the API as their person, revoked; capped by the
person's role; the owner token's service has none and is told so."""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import func, select

from bot.config.people import Role
from bot.runtime.clock import ManualClock
from bot.store.models import ApiToken, Person
from bot.web.inbox.owner import COOKIE
from tests.conftest import SECRET, Harness, StartDesk

SAME_SITE = {"sec-fetch-site": "same-origin"}


async def signed_in(harness: Harness, person: Person | None) -> tuple[dict[str, str], str]:
    """Headers of a fresh session of `person` (None: the owner token's service) and its CSRF token."""
    token, session = await harness.desk.sessions.open(person, via="password" if person else "owner_token")
    return {"cookie": f"{COOKIE}={token}", **SAME_SITE}, session.csrf(SECRET)


async def olga(harness: Harness, role: Role = Role.AGENT) -> Person:
    return await harness.desk.people.add(pid="olga", name="Olga Petrova", email="olga@example.com", role=role,
                                         source="cli", actor="test")


def secret_in(html: str) -> str | None:
    found = re.search(r'value="(hdp_[^"]+)"', html)
    return found.group(1) if found else None


async def test_a_person_makes_a_token_sees_it_once_uses_it_and_revokes_it(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": "agent-key-0123456789abcdef"})
    clock = harness.desk.clock
    assert isinstance(clock, ManualClock)
    headers, csrf = await signed_in(harness, await olga(harness))
    empty = await harness.client.get("/inbox/tokens", headers=headers)
    assert empty.status_code == 200
    assert "No tokens yet." in empty.text
    assert '<option value="viewer" selected>viewer</option><option value="agent">agent</option>' in empty.text  # up to hers

    made = await harness.client.post("/inbox/tokens", headers=headers, data={"csrf": csrf, "name": "nightly", "role": "agent"})
    assert made.status_code == 200
    assert made.headers["cache-control"] == "no-store"
    secret = secret_in(made.text)
    assert secret is not None and secret.startswith("hdp_")
    assert "it is shown this once" in made.text
    listed = await harness.client.get("/inbox/tokens", headers=headers)
    assert secret_in(listed.text) is None and secret not in listed.text  # never again
    row = re.search(r"<tr>\s*<td>nightly</td>\s*<td>agent</td>.*?</tr>", listed.text, re.S)
    assert row is not None and "never" in row.group(0) and "active" in row.group(0)

    api = {"authorization": f"Bearer {secret}"}
    assert (await harness.client.get("/api/handoffs", headers=api)).status_code == 200
    [token] = await harness.desk.api_tokens.of_person("olga")
    assert token.last_used_at is not None
    first_use = token.last_used_at
    clock.advance(timedelta(seconds=30))
    await harness.client.get("/api/handoffs", headers=api)
    assert (await harness.desk.api_tokens.of_person("olga"))[0].last_used_at == first_use  # at most once a minute
    clock.advance(timedelta(seconds=31))
    await harness.client.get("/api/handoffs", headers=api)
    assert (await harness.desk.api_tokens.of_person("olga"))[0].last_used_at != first_use  # a minute on: moved
    shown = await harness.client.get("/inbox/tokens", headers=headers)
    assert f"{clock.now():%Y-%m-%d %H:%M} UTC" in shown.text

    revoked = await harness.client.post(f"/inbox/tokens/{token.id}/revoke", headers=headers, data={"csrf": csrf})
    assert (revoked.status_code, revoked.headers["location"]) == (303, "/inbox/tokens?done=revoked")
    after = await harness.client.get(revoked.headers["location"], headers=headers)
    assert "Revoked: a script using it is refused from its next request." in after.text
    assert re.search(r"<td>revoked \d{4}-\d\d-\d\d \d\d:\d\d UTC</td>", after.text)
    assert (await harness.client.get("/api/handoffs", headers=api)).status_code == 401
    again = await harness.client.post(f"/inbox/tokens/{token.id}/revoke", headers=headers, data={"csrf": csrf})
    assert again.headers["location"] == "/inbox/tokens?done=unchanged"


async def test_a_token_is_refused_above_its_persons_role_or_with_a_bad_name_naming_the_field(start_desk: StartDesk) -> None:
    harness = await start_desk()
    headers, csrf = await signed_in(harness, await olga(harness, Role.VIEWER))
    above = await harness.client.post("/inbox/tokens", headers=headers, data={"csrf": csrf, "name": "deploy", "role": "admin"})
    assert above.status_code == 400
    assert "role: one of viewer, got &#39;admin&#39;" in above.text
    assert 'value="deploy"' in above.text  # what was typed stays
    unknown = await harness.client.post("/inbox/tokens", headers=headers, data={"csrf": csrf, "name": "x", "role": "root"})
    assert unknown.status_code == 400 and "role: one of viewer" in unknown.text
    spaced = await harness.client.post("/inbox/tokens", headers=headers, data={"csrf": csrf, "name": " x ", "role": "viewer"})
    assert spaced.status_code == 400
    assert "name: 1-80 characters with no spaces at its start or end" in spaced.text
    assert secret_in(above.text + unknown.text + spaced.text) is None
    assert await harness.desk.api_tokens.of_person("olga") == []


async def test_nobody_revokes_anothers_token_and_posts_need_the_forms_csrf(start_desk: StartDesk) -> None:
    harness = await start_desk()
    ben = await harness.desk.people.add(pid="ben", name="Ben", email="ben@example.com", role=Role.ADMIN,
                                        source="cli", actor="test")
    _, bens = await harness.desk.api_tokens.create(ben, name="bens", role=Role.ADMIN, actor="test")
    headers, csrf = await signed_in(harness, await olga(harness))
    other = await harness.client.post(f"/inbox/tokens/{bens.id}/revoke", headers=headers, data={"csrf": csrf})
    assert other.headers["location"] == "/inbox/tokens?done=unchanged"
    assert [t.revoked_at for t in await harness.desk.api_tokens.of_person("ben")] == [None]
    assert "bens" not in (await harness.client.get("/inbox/tokens", headers=headers)).text
    forged = await harness.client.post("/inbox/tokens", headers=headers, data={"csrf": "forged", "name": "x", "role": "viewer"})
    assert forged.status_code == 403
    assert await harness.desk.api_tokens.of_person("olga") == []


async def test_the_owner_token_service_has_no_tokens_and_is_told_so(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-token-0123456789abcdef"})
    headers, csrf = await signed_in(harness, None)
    shown = await harness.client.get("/inbox/tokens", headers=headers)
    assert shown.status_code == 200
    assert "a service identity, not a person, so it has no personal tokens" in shown.text
    assert 'action="/inbox/tokens"' not in shown.text  # no form to make one
    posted = await harness.client.post("/inbox/tokens", headers=headers, data={"csrf": csrf, "name": "x", "role": "viewer"})
    assert (posted.status_code, posted.headers["location"]) == (303, "/inbox/tokens")
    async with harness.desk.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(ApiToken)) == 0
