"""A real OpenID provider for the single sign-on tests: node-oidc-provider, run by
tests/oidc_provider/provider.mjs on 127.0.0.1, and a driver that signs in through its login
page with httpx as a browser would (its forms posted, its redirects followed) up to the
redirect back to the desk.

`start_oidc_provider(...)` starts one (with its own accounts, redirect URIs, or the claims in
the ID token); the `oidc_provider` fixture (tests/conftest.py imports it, so every test module
may take it) is one per test module with `ACCOUNTS`. Without
tests/oidc_provider/node_modules (`cd tests/oidc_provider && npm ci`) the tests that need it are
skipped, unless CI or HANDOFF_REQUIRE_BROWSER is set: then they fail, so CI cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urljoin, urlsplit

import httpx
import pytest
from pydantic import SecretStr

from bot.config import SsoConfig

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc_provider"
SCRIPT = PROVIDER_DIR / "provider.mjs"
CLIENT_ID = "handoff-desk"
CLIENT_SECRET = "test-client-secret-0123456789"
REDIRECT_URI = "http://desk.test/inbox/sso/callback"
START_TIMEOUT = 30.0  # seconds; it is ready in well under one on an idle machine
MAX_HOPS = 10  # redirects and pages between the authorization URL and the redirect back

# The accounts of the default provider: one for each way a sign-in ends.
ACCOUNTS: list[dict[str, Any]] = [
    {"sub": "olga", "email": "olga@example.com", "email_verified": True, "name": "Olga Admin", "groups": ["desk-admins", "staff"]},
    {"sub": "ben", "email": "Ben@Example.COM", "email_verified": True, "name": "Ben Agent", "groups": ["desk-agents"]},
    {"sub": "vera", "email": "vera@example.com", "email_verified": True, "name": "Vera", "groups": "staff"},
    {"sub": "una", "email": "una@example.com", "email_verified": False, "name": "Una Unverified", "groups": ["desk-agents"]},
    {"sub": "otto", "email": "otto@other.example", "email_verified": True, "name": "Otto Outsider", "groups": ["desk-agents"]},
    {"sub": "nemo", "name": "Nemo No-Email", "groups": ["desk-agents"]},
    {"sub": "pia", "email": "pia@example.com", "email_verified": True, "name": "Pia", "password": "correct horse"},
]


class Redirect(NamedTuple):
    """Where the provider sent the browser back: the full URL and its query."""

    url: str
    params: dict[str, str]


@dataclass
class OidcProvider:
    """A running provider: its issuer, the desk's client at it, and a way to sign in."""

    issuer: str
    client_id: str
    client_secret: str | None
    redirect_uri: str
    accounts: list[dict[str, Any]]
    log: Path = field(repr=False)

    def sso_config(self, **overrides: Any) -> SsoConfig:
        """`sign_in.sso` for this provider: its issuer and client, the groups scope and claim,
        desk-admins → admin and desk-agents → agent, example.com only; `overrides` on top."""
        values: dict[str, Any] = {
            "issuer": self.issuer, "client_id": self.client_id,
            "client_secret": SecretStr(self.client_secret) if self.client_secret else None,
            "scopes": ["openid", "email", "profile", "groups"], "allowed_domains": ["example.com"],
            "role_claim": "groups", "roles": {"desk-admins": "admin", "desk-agents": "agent"},
        }
        return SsoConfig.model_validate({**values, **overrides})

    async def sign_in(self, url: str, login: str, password: str | None = None) -> Redirect:
        """Open `url` (an authorization URL), sign in on the login page as `login` (an
        account's sub or e-mail), and return the redirect back to the desk."""
        return await self._drive(url, {"login": login, "password": password or ""}, abort=False)

    async def cancel_sign_in(self, url: str) -> Redirect:
        """Open `url` and press Cancel on the login page: the redirect back carries an error."""
        return await self._drive(url, {}, abort=True)

    async def _drive(self, url: str, form: dict[str, str], *, abort: bool) -> Redirect:
        async with httpx.AsyncClient(timeout=10.0, follow_redirects=False) as browser:
            response = await browser.get(url)
            for _ in range(MAX_HOPS):
                if response.is_redirect:
                    target = urljoin(str(response.url), response.headers["location"])
                    if target.split("?", 1)[0] == self.redirect_uri:
                        return Redirect(target, dict(parse_qsl(urlsplit(target).query)))
                    response = await browser.get(target)
                    continue
                forms = _forms(response.text)
                wanted = [f for f in forms if f.action.endswith("/abort") == abort]
                if response.status_code != 200 or not wanted:
                    raise AssertionError(f"the provider answered {response.status_code} at {response.url}:\n"
                                         f"{_text(response.text)}\n{self.log.read_text()}")
                response = await browser.post(urljoin(str(response.url), wanted[0].action), data={**wanted[0].fields, **form})
        raise AssertionError(f"no redirect to {self.redirect_uri} after {MAX_HOPS} steps")


@dataclass
class _Form:
    action: str
    fields: dict[str, str]


class _FormReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[_Form] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "form":
            self.forms.append(_Form(named.get("action") or "", {}))
        elif tag == "input" and self.forms and named.get("name") and named.get("type") == "hidden":
            self.forms[-1].fields[named["name"] or ""] = named.get("value") or ""

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.texts.append(data.strip())


def _forms(html: str) -> list[_Form]:
    reader = _FormReader()
    reader.feed(html)
    return reader.forms


def _text(html: str) -> str:
    reader = _FormReader()
    reader.feed(html)
    return " ".join(reader.texts)


def _require_node() -> str:
    """The node binary, or a skip (a failure under CI) saying what is missing."""
    node = shutil.which("node")
    missing = (None if node and (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir()
               else "Node.js" if not node else "tests/oidc_provider/node_modules (run: cd tests/oidc_provider && npm ci)")
    if missing:
        if os.environ.get("CI") or os.environ.get("HANDOFF_REQUIRE_BROWSER"):
            pytest.fail(f"the OpenID provider for the single sign-on tests needs {missing}")
        pytest.skip(f"the OpenID provider for the single sign-on tests needs {missing}")
    assert node is not None
    return node


@contextmanager
def start_oidc_provider(*, accounts: list[dict[str, Any]] | None = None, redirect_uris: list[str] | None = None,
                        client_secret: str | None = CLIENT_SECRET, claims_in_id_token: bool = False) -> Iterator[OidcProvider]:
    """A provider on a free port of 127.0.0.1 for the block's length, with `accounts`
    (ACCOUNTS by default) and the desk's client registered with `redirect_uris` (the first
    one is where `sign_in` stops); `client_secret` None makes it a public client."""
    node = _require_node()
    redirects = redirect_uris or [REDIRECT_URI]
    options = {"port": 0, "accounts": ACCOUNTS if accounts is None else accounts, "claims_in_id_token": claims_in_id_token,
               "client": {"client_id": CLIENT_ID, "client_secret": client_secret, "redirect_uris": redirects}}
    with tempfile.NamedTemporaryFile("w+", prefix="oidc-provider-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
        process = subprocess.Popen([node, str(SCRIPT), json.dumps(options)], cwd=PROVIDER_DIR,
                                   stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
    try:
        issuer = _ready_line(process, log_path)
        yield OidcProvider(issuer, CLIENT_ID, client_secret, redirects[0], options["accounts"], log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
        log_path.unlink(missing_ok=True)


def _ready_line(process: subprocess.Popen[str], log: Path) -> str:
    """The issuer from the provider's "ready <issuer>" line, waited for without sleeping."""
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stdout], [], [], left)
        if not readable:
            break
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"the OpenID provider exited ({process.wait()}) before it was ready:\n{log.read_text()}")
        if line.startswith("ready "):
            return line.split(" ", 1)[1].strip()
    raise AssertionError(f"the OpenID provider was not ready within {START_TIMEOUT:g}s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def oidc_provider() -> Iterator[OidcProvider]:
    """A provider with ACCOUNTS for the whole test module."""
    with start_oidc_provider() as provider:
        yield provider
