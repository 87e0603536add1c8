"""Who may call what: every route of the app as `handoff serve` builds it declares it, and the
declaration is what the server does.

A route declares who may call it in one place: an inbox page or form post with
`needs(Role.X)` / `posts(Role.X)` (bot/web/inbox/owner.py; the guard carries `.role`), an
/api route with `api_needs(...)` (bot/web/api.py; an `ApiNeeds`: a role, and whether the
agent's key may). A route that takes no sign-in at all is in PUBLIC below, each with why; a
new route that is neither fails the first test. The second test then asks every declared
route as each kind of caller — nobody, a viewer, an agent and an admin (each a person of the
directory: a real session in the inbox, their personal token on the API), the owner token's
service identity, and the agent's key — with real requests, and checks that the answer is a
refusal (401, 403, or a page's redirect to the login) exactly when the declaration says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from bot.config import load_config
from bot.config.people import Role
from bot.desk import Desk
from bot.domain.people import Actor
from bot.store.models import Person
from bot.web.api import ApiNeeds
from bot.web.app import create_app
from bot.web.inbox.owner import COOKIE
from tests.conftest import SECRET, Harness, StartDesk

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "agent-key-0123456789abcdef"
OWNER_TOKEN = "owner-token-0123456789abcdef"

# The routes no sign-in guards, each with what protects it instead. (method, path template)
PUBLIC = {
    # The API's description (no data): the OpenAPI schema and its pages
    ("GET", "/api/openapi.json"), ("GET", "/api/docs"), ("GET", "/docs/oauth2-redirect"),
    # Providers' callbacks: each adapter verifies the provider's signature on the raw body
    ("POST", "/webhooks/{channel_id}"),
    # Liveness for probes; /metrics has its own `metrics.token`
    ("GET", "/healthz"), ("GET", "/metrics"),
    # The return form and the approval decision page: signed, expiring, single-use links
    ("GET", "/f/{token}"), ("POST", "/f/{token}"), ("GET", "/a/{token}"), ("POST", "/a/{token}"),
    # The subscriber's web chat: its own conversation cookie, not a person's sign-in
    ("GET", "/chat"), ("GET", "/widget.js"), ("POST", "/chat/api/conversations"), ("POST", "/chat/api/messages"),
    ("GET", "/chat/api/messages"), ("POST", "/chat/api/user_actions/{uaid}/response"),
    ("POST", "/chat/api/user_actions/{uaid}/step"), ("POST", "/chat/api/satisfaction/{sid}"),
    ("POST", "/chat/api/satisfaction/{sid}/comment"),
    # The stylesheet every page links, the login page itself
    ("GET", "/static/desk.css"),
    ("GET", "/inbox/login"), ("POST", "/inbox/login"),
    # A sign-in halfway (the TOTP step): a signed five-minute cookie of the password step
    ("GET", "/inbox/login/code"), ("POST", "/inbox/login/code"),
    # Invitation and reset links: signed, expiring, single-use; opening one changes nothing
    ("GET", "/inbox/welcome/{token}"), ("POST", "/inbox/welcome/{token}"),
    ("GET", "/inbox/reset/{token}"), ("POST", "/inbox/reset/{token}"),
    # Single sign-on: the start, and the provider's redirect back (state, nonce, PKCE)
    ("GET", "/inbox/sso"), ("GET", "/inbox/sso/callback"),
}

Declared = Role | ApiNeeds


def served_app() -> FastAPI:
    """The app as bot/cli.py's `serve` builds it (tests/test_docs_reference.py does the same)."""
    return create_app(Desk(load_config(ROOT / "config.example.yaml")))


def operations(app: FastAPI) -> dict[tuple[str, str], Any]:
    """Every (method, path template) the app answers, with its route (HEAD rides on GET)."""
    found: dict[tuple[str, str], Any] = {}
    for route in iter_route_contexts(app.routes):
        for method in sorted((route.methods or set()) - {"HEAD"}):
            found[(method, str(route.path))] = route
    return found


def declarations(route: Any) -> list[Declared]:
    """What the route's dependencies declare: the inbox guards' `.role`, the API's ApiNeeds."""
    found: list[Declared] = []
    dependant = getattr(route, "dependant", None)
    stack = list(dependant.dependencies) if dependant is not None else []
    while stack:
        dependency = stack.pop()
        call = dependency.call
        if isinstance(call, ApiNeeds):
            found.append(call)
        elif isinstance(getattr(call, "role", None), Role):
            found.append(call.role)
        stack.extend(dependency.dependencies)
    return found


def test_every_route_declares_who_may_call_it_or_is_public() -> None:
    served = operations(served_app())
    assert len(served) > 50, "the walk found too few routes: has FastAPI's route list changed?"
    problems = []
    for key, route in sorted(served.items()):
        declared = declarations(route)
        if key in PUBLIC and declared:
            problems.append(f"{key}: public, yet declares {declared}")
        elif key not in PUBLIC and len(declared) != 1:
            problems.append(f"{key}: declares {declared or 'nothing'}; use needs/posts(Role.X), api_needs(...), or list it in PUBLIC")
    assert problems == []
    assert sorted(PUBLIC - set(served)) == [], "PUBLIC names routes the app no longer has"


def test_the_walk_reads_each_kind_of_declaration() -> None:
    served = operations(served_app())
    assert declarations(served[("GET", "/inbox")]) == [Role.VIEWER]
    assert declarations(served[("POST", "/inbox/handoffs/{sid}/reply")]) == [Role.AGENT]
    [decide] = declarations(served[("POST", "/api/approvals/{aid}/decision")])
    assert isinstance(decide, ApiNeeds) and (decide.role, decide.agent) == (Role.AGENT, False)


# --------------------------------------------------------------------------- the real requests


@dataclass(frozen=True)
class Caller:
    """One kind of caller: `role` for a person or the owner token's service (None: nobody,
    or the agent's key); `person` opens their sessions; `bearer` is what they send to /api."""

    name: str
    role: Role | None = None
    person: Person | None = None
    service: bool = False
    bearer: str | None = None

    @property
    def signs_in(self) -> bool:
        return self.person is not None or self.service


async def callers(harness: Harness) -> list[Caller]:
    desk = harness.desk
    found = [Caller("nobody")]
    for role in Role:
        person = await desk.people.add(pid=f"p-{role}", name=f"A {role}", email=f"{role}@example.com", role=role,
                                       source="cli", actor="test")
        secret, _ = await desk.api_tokens.create(person, name="matrix", role=role, actor="test")
        found.append(Caller(f"{role} person", role, person=person, bearer=secret))
    found.append(Caller("owner-token service", Role.ADMIN, service=True, bearer=OWNER_TOKEN))
    found.append(Caller("agent key", bearer=API_KEY))
    return found


def allowed(declared: Declared, caller: Caller) -> bool:
    """What the declaration says, read apart from the code that enforces it: a role admits
    the people and the service at or above it; an ApiNeeds admits those its role admits and
    the agent's key when it says so (never `agent_alone` here: this desk has owner.token and
    people). Nobody is admitted by anything."""
    if isinstance(declared, ApiNeeds):
        if caller.role is None:
            return caller.bearer == API_KEY and declared.agent
        return declared.role is not None and caller.role.rank >= declared.role.rank
    return caller.signs_in and caller.role is not None and caller.role.rank >= declared.rank


def concrete(path: str) -> str:
    """A path template with ids that name nothing: a caller let in gets a 404 or a 422 there,
    never a refusal."""
    return re.sub(r"\{(\w+)\}", lambda m: "999" if m.group(1) == "channel_id" else "nope", path)


async def ask(client: httpx.AsyncClient, harness: Harness, method: str, path: str, caller: Caller) -> httpx.Response:
    """One real request as `caller`: to /api with their bearer; to a page with a session of
    their own opened for it (a post can end its session: /inbox/logout), its CSRF token and
    the inbox's own origin."""
    client.cookies.clear()
    url = concrete(path) + ("?wait=0" if method == "GET" else "")
    if path.startswith("/api/"):
        headers = {"authorization": f"Bearer {caller.bearer}"} if caller.bearer else {}
        return await client.request(method, url, headers=headers, json={} if method == "POST" else None)
    headers, form = {"sec-fetch-site": "same-origin"}, {}
    if caller.signs_in:
        token, session = await harness.desk.sessions.open(caller.person, via="password" if caller.person else "owner_token")
        headers["cookie"] = f"{COOKIE}={token}"
        form["csrf"] = session.csrf(SECRET)
    elif caller.bearer:
        headers["authorization"] = f"Bearer {caller.bearer}"  # a key is nobody in the inbox
    return await client.request(method, url, headers=headers, data=form if method == "POST" else None)


def refused(method: str, response: httpx.Response) -> bool:
    """401, 403, or a page sending the browser to sign in (the login redirect carries `next`)."""
    if response.status_code in (401, 403):
        return True
    return method == "GET" and response.status_code == 303 and response.headers["location"].startswith("/inbox/login?next=")


async def test_each_route_refuses_exactly_the_callers_its_declaration_refuses(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": API_KEY}, owner={"token": OWNER_TOKEN})
    app = create_app(harness.desk, manage_desk=False)
    routes = operations(app)
    assert set(routes) == set(operations(served_app())), "the app under test is not the app `serve` builds"
    everyone = await callers(harness)
    wrong: list[str] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://desk.test") as client:
        for (method, path), route in sorted(routes.items()):
            if (method, path) in PUBLIC:
                continue
            [declared] = declarations(route)
            for caller in everyone:
                response = await ask(client, harness, method, path, caller)
                expected = not allowed(declared, caller)
                if refused(method, response) != expected:
                    wrong.append(f"{method} {path} as {caller.name}: {response.status_code} "
                                 f"({'should refuse' if expected else 'should let in'}) {response.text[:120]!r}")
    assert wrong == []


async def test_a_disabled_persons_session_and_token_fail_on_their_next_request(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": API_KEY}, owner={"token": OWNER_TOKEN})
    desk = harness.desk
    olga = await desk.people.add(pid="olga", name="Olga Petrova", email="olga@example.com", role=Role.AGENT,
                                 source="cli", actor="test")
    cookie, _ = await desk.sessions.open(olga, via="password")
    secret, _ = await desk.api_tokens.create(olga, name="nightly", role=Role.AGENT, actor="test")
    page = {"cookie": f"{COOKIE}={cookie}"}
    api = {"authorization": f"Bearer {secret}"}
    assert (await harness.client.get("/inbox", headers=page)).status_code == 200
    assert (await harness.client.get("/api/handoffs", headers=api)).status_code == 200

    await desk.people.set_disabled("olga", True, actor="test")
    harness.client.cookies.clear()
    signed_out = await harness.client.get("/inbox", headers=page)
    assert (signed_out.status_code, signed_out.headers["location"]) == (303, "/inbox/login?next=/inbox")
    refused_token = await harness.client.get("/api/handoffs", headers=api)
    assert (refused_token.status_code, refused_token.json()["error"]) == (401, "unauthorized")
    assert refused_token.headers["www-authenticate"] == "Bearer"

    await desk.people.set_disabled("olga", False, actor="test")  # enabling again brings neither back
    assert (await harness.client.get("/api/handoffs", headers=api)).status_code == 401
    assert (await harness.client.get("/inbox", headers=page)).status_code == 303


async def test_a_revoked_token_fails_and_a_demoted_persons_token_is_demoted(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": API_KEY}, owner={"token": OWNER_TOKEN})
    desk = harness.desk
    ben = await desk.people.add(pid="ben", name="Ben", email="ben@example.com", role=Role.ADMIN, source="cli", actor="test")
    kept, _ = await desk.api_tokens.create(ben, name="kept", role=Role.AGENT, actor="test")
    dropped, row = await desk.api_tokens.create(ben, name="dropped", role=Role.AGENT, actor="test")
    assert await desk.api_tokens.revoke(row.id, person_id="ben", actor=Actor.of_person(ben, "inbox").label)
    gone = await harness.client.get("/api/handoffs", headers={"authorization": f"Bearer {dropped}"})
    assert (gone.status_code, gone.json()["error"]) == (401, "unauthorized")
    assert "revoked" in gone.json()["details"]["hint"]

    release = "/api/handoffs/hs_nope/release"
    as_kept = {"authorization": f"Bearer {kept}"}
    assert (await harness.client.post(release, json={}, headers=as_kept)).status_code == 404  # let in: no such handoff
    await desk.people.update("ben", role=Role.VIEWER, actor="test")
    demoted = await harness.client.post(release, json={}, headers=as_kept)
    assert (demoted.status_code, demoted.json()["error"], demoted.json()["details"]["needed"]) == (403, "forbidden", "agent")
    assert "acts as viewer" in demoted.json()["details"]["hint"]
    assert (await harness.client.get("/api/handoffs", headers=as_kept)).status_code == 200  # still a viewer
