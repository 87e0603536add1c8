"""What the sign-in tests share: a person with a password, signing in over HTTP, another
browser on the same app, and the tokens a page carries."""

from __future__ import annotations

import re

import httpx
import pyotp

from bot.config.people import Role
from bot.desk import Desk
from bot.domain.people.credentials import hash_password
from bot.runtime.clock import ManualClock
from bot.store.models import Person
from tests.conftest import Harness, StartDesk

OWNER_TOKEN = "owner-secret"
PASSWORD = "correct horse battery staple"


async def desk_with_people(start_desk: StartDesk, **overrides: object) -> tuple[Harness, ManualClock]:
    """A desk behind an owner token (so nobody is signed in by default) on a clock the test moves."""
    clock = ManualClock()
    harness = await start_desk(clock=clock, **{"owner": {"token": OWNER_TOKEN}, **overrides})
    return harness, clock


async def add_person(desk: Desk, pid: str = "olga", *, name: str = "Olga Petrova", email: str = "olga@example.com",
                     role: Role = Role.AGENT, password: str | None = PASSWORD) -> Person:
    await desk.people.add(pid=pid, name=name, email=email, role=role, source="cli", actor="test")
    if password is not None:
        await desk.people.set_password_hash(pid, hash_password(password), actor="test")
    return await desk.people.get(pid)


async def turn_on_totp(desk: Desk, person: Person) -> pyotp.TOTP:
    """TOTP on for `person` (as the account page would leave it); their app's generator."""
    secret = pyotp.random_base32()
    await desk.people.set_totp(person.id, secret, confirmed=True, actor="test")
    return pyotp.TOTP(secret)


def code_at(totp: pyotp.TOTP, clock: ManualClock) -> str:
    """The code the person's app shows at the desk's (injected) time."""
    return totp.at(clock.now())


def browser(harness: Harness, address: str = "203.0.113.5") -> httpx.AsyncClient:
    """Another browser on the same app, with no cookies, coming from `address` (the test
    client's peer is loopback, a trusted proxy, so X-Forwarded-For is its address)."""
    app = harness.client._transport.app
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://desk.test",
                             headers={"X-Forwarded-For": address})


async def sign_in(client: httpx.AsyncClient, email: str = "olga@example.com", password: str = PASSWORD,
                  next: str = "/inbox") -> httpx.Response:
    return await client.post("/inbox/login", data={"email": email, "password": password, "next": next})


def form_token(html: str, name: str = "csrf") -> str:
    match = re.search(rf'name="{name}" value="([^"]+)"', html)
    assert match, f"no {name} in the page"
    return match.group(1)


def without_nonce(html: str) -> str:
    """A page with its per-response nonce taken out, to compare two answers."""
    return re.sub(r'nonce="[^"]+"', 'nonce=""', html)
