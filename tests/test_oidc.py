"""Single sign-on against a real OpenID provider (node-oidc-provider, tests/oidc_provider.py):
a good sign-in gives the identity and the role its groups map to, and each way a sign-in can
go wrong is an SsoRefused with its reason: answers that belong to another sign-in, codes used
twice or without their PKCE verifier, tokens outside their time on the injected clock, and
people the desk does not let in."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from bot.config.people import Role
from bot.domain.people.oidc import OidcSignIn, SsoIdentity, SsoRefusal, SsoRefused, SsoStart
from bot.runtime.clock import ManualClock
from tests.oidc_provider import OidcProvider, start_oidc_provider


@pytest.fixture
async def requests() -> AsyncIterator[tuple[httpx.AsyncClient, list[str]]]:
    """A real client for the relying party that notes each URL it calls (its path)."""
    seen: list[str] = []

    async def note(request: httpx.Request) -> None:
        seen.append(request.url.path)

    async with httpx.AsyncClient(timeout=10.0, event_hooks={"request": [note]}) as http:
        yield http, seen


async def signed_in(provider: OidcProvider, login: str, sign_in: OidcSignIn | None = None) -> SsoIdentity:
    sign_in = sign_in or OidcSignIn(provider.sso_config())
    start = await sign_in.begin(provider.redirect_uri)
    back = await provider.sign_in(start.url, login)
    return await sign_in.finish(start, redirect_uri=provider.redirect_uri, params=back.params)


async def refusal(provider: OidcProvider, login: str, **config: object) -> SsoRefused:
    with pytest.raises(SsoRefused) as refused:
        await signed_in(provider, login, OidcSignIn(provider.sso_config(**config)))
    return refused.value


async def test_a_good_sign_in_is_the_person_with_the_role_their_groups_map_to(
        oidc_provider: OidcProvider, requests: tuple[httpx.AsyncClient, list[str]]) -> None:
    http, seen = requests
    identity = await signed_in(oidc_provider, "olga", OidcSignIn(oidc_provider.sso_config(), http=http))
    assert identity == SsoIdentity(issuer=oidc_provider.issuer, subject="olga", email="olga@example.com",
                                   name="Olga Admin", role=Role.ADMIN)
    # This provider keeps the e-mail and groups out of the ID token: they came from userinfo.
    assert seen == ["/.well-known/openid-configuration", "/token", "/jwks", "/me"]


async def test_the_highest_mapped_role_the_default_role_and_domains_in_any_case(oidc_provider: OidcProvider) -> None:
    ben = await signed_in(oidc_provider, "ben@example.com")  # Ben@Example.COM at the provider
    assert (ben.email, ben.role) == ("Ben@Example.COM", Role.AGENT)
    both = OidcSignIn(oidc_provider.sso_config(roles={"desk-agents": "agent", "staff": "viewer", "desk-admins": "admin"}))
    assert (await signed_in(oidc_provider, "olga", both)).role is Role.ADMIN
    # Vera's groups claim is one string, "staff", mapped to nothing: the default role is hers.
    vera = await signed_in(oidc_provider, "vera", OidcSignIn(oidc_provider.sso_config(default_role="viewer")))
    assert vera.role is Role.VIEWER


async def test_claims_in_the_id_token_need_no_userinfo_call_and_a_public_client_signs_in_with_pkce_alone(
        requests: tuple[httpx.AsyncClient, list[str]]) -> None:
    http, seen = requests
    with start_oidc_provider(claims_in_id_token=True, client_secret=None) as provider:
        config = provider.sso_config()
        assert config.client_secret is None
        identity = await signed_in(provider, "ben", OidcSignIn(config, http=http))
    assert (identity.subject, identity.email, identity.role) == ("ben", "Ben@Example.COM", Role.AGENT)
    assert "/me" not in seen


async def test_the_authorization_url_asks_for_a_code_with_pkce_s256_and_fresh_secrets(oidc_provider: OidcProvider) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config())
    first, second = await sign_in.begin(oidc_provider.redirect_uri), await sign_in.begin(oidc_provider.redirect_uri)
    query = {key: values[0] for key, values in parse_qs(urlsplit(first.url).query).items()}
    assert first.url.startswith(f"{oidc_provider.issuer}/auth?")
    assert query["response_type"] == "code" and query["code_challenge_method"] == "S256"
    assert (query["client_id"], query["redirect_uri"]) == (oidc_provider.client_id, oidc_provider.redirect_uri)
    assert query["scope"] == "openid email profile groups"
    assert (query["state"], query["nonce"]) == (first.state, first.nonce)
    assert first.code_verifier not in first.url and len(first.code_verifier) >= 43
    assert {first.state, first.nonce, first.code_verifier}.isdisjoint({second.state, second.nonce, second.code_verifier})
    assert first.code_verifier not in repr(first)


async def test_an_answer_with_another_state_or_issuer_or_none_is_refused(oidc_provider: OidcProvider) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config())
    start = await sign_in.begin(oidc_provider.redirect_uri)
    back = await oidc_provider.sign_in(start.url, "olga")
    for params, reason in [({**back.params, "state": start.state[:-1] + "x"}, SsoRefusal.STATE_MISMATCH),
                           ({key: value for key, value in back.params.items() if key != "state"}, SsoRefusal.STATE_MISMATCH),
                           ({**back.params, "iss": "http://127.0.0.1:1"}, SsoRefusal.PROVIDER_ERROR),
                           ({key: value for key, value in back.params.items() if key != "iss"}, SsoRefusal.PROVIDER_ERROR)]:
        with pytest.raises(SsoRefused) as refused:
            await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=params)
        assert refused.value.reason is reason, params
        assert "Start again from the sign-in page." in refused.value.message
    # None of those used the code: it still signs in.
    assert (await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=back.params)).subject == "olga"


async def test_an_id_token_for_another_nonce_is_refused(oidc_provider: OidcProvider) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config())
    start = await sign_in.begin(oidc_provider.redirect_uri)
    back = await oidc_provider.sign_in(start.url, "olga")
    with pytest.raises(SsoRefused) as refused:
        await sign_in.finish(dataclasses.replace(start, nonce="another-sign-in"), redirect_uri=oidc_provider.redirect_uri,
                             params=back.params)
    assert refused.value.reason is SsoRefusal.NONCE_MISMATCH
    assert "nonce differs" in refused.value.message


async def test_a_code_used_twice_is_refused_by_the_provider(oidc_provider: OidcProvider) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config())
    start = await sign_in.begin(oidc_provider.redirect_uri)
    back = await oidc_provider.sign_in(start.url, "olga")
    await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=back.params)
    with pytest.raises(SsoRefused) as refused:
        await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=back.params)
    assert refused.value.reason is SsoRefusal.TOKEN_EXCHANGE_FAILED
    assert "invalid_grant" in refused.value.message


@pytest.mark.parametrize("verifier", ["w" * 64, ""], ids=["another verifier", "no verifier"])
async def test_a_code_without_its_pkce_verifier_is_refused_by_the_provider(oidc_provider: OidcProvider, verifier: str) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config())
    start = await sign_in.begin(oidc_provider.redirect_uri)
    back = await oidc_provider.sign_in(start.url, "olga")
    with pytest.raises(SsoRefused) as refused:
        await sign_in.finish(dataclasses.replace(start, code_verifier=verifier), redirect_uri=oidc_provider.redirect_uri,
                             params=back.params)
    assert refused.value.reason is SsoRefusal.TOKEN_EXCHANGE_FAILED
    assert refused.value.message.startswith("The single sign-on provider would not exchange the sign-in code (invalid_grant")
    # Whoever holds the code without the verifier cannot spend it; this provider leaves it to the
    # sign-in that holds both.
    assert (await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=back.params)).subject == "olga"


async def test_a_code_for_another_redirect_uri_is_refused(oidc_provider: OidcProvider) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config())
    start = await sign_in.begin(oidc_provider.redirect_uri)
    back = await oidc_provider.sign_in(start.url, "olga")
    with pytest.raises(SsoRefused) as refused:
        await sign_in.finish(start, redirect_uri="http://desk.test/elsewhere", params=back.params)
    assert refused.value.reason is SsoRefusal.TOKEN_EXCHANGE_FAILED


async def test_a_sign_in_cancelled_at_the_provider_is_its_error(oidc_provider: OidcProvider) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config())
    start = await sign_in.begin(oidc_provider.redirect_uri)
    back = await oidc_provider.cancel_sign_in(start.url)
    with pytest.raises(SsoRefused) as refused:
        await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=back.params)
    assert refused.value.reason is SsoRefusal.PROVIDER_ERROR
    assert "access_denied: the person cancelled the sign-in" in refused.value.message


@pytest.mark.parametrize(("moved", "said"), [(timedelta(hours=2), "has expired"), (-timedelta(hours=1), "issued in the future")],
                         ids=["expired", "from the future"])
async def test_an_id_token_outside_its_time_on_the_injected_clock_is_refused(
        oidc_provider: OidcProvider, moved: timedelta, said: str) -> None:
    clock = ManualClock(datetime.now(UTC))
    sign_in = OidcSignIn(oidc_provider.sso_config(), now=clock.now)
    start = await sign_in.begin(oidc_provider.redirect_uri)
    back = await oidc_provider.sign_in(start.url, "olga")
    clock.advance(moved)
    with pytest.raises(SsoRefused) as refused:
        await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=back.params)
    assert refused.value.reason is SsoRefusal.INVALID_ID_TOKEN
    assert said in refused.value.message


async def test_a_token_within_the_clock_leeway_is_accepted(oidc_provider: OidcProvider) -> None:
    clock = ManualClock(datetime.now(UTC) - timedelta(seconds=30))  # this server a little behind the provider
    assert (await signed_in(oidc_provider, "olga", OidcSignIn(oidc_provider.sso_config(), now=clock.now))).role is Role.ADMIN


async def test_people_the_desk_does_not_let_in_are_refused_with_the_reason(oidc_provider: OidcProvider) -> None:
    unverified = await refusal(oidc_provider, "una")
    assert unverified.reason is SsoRefusal.EMAIL_UNVERIFIED
    assert "una@example.com" in unverified.message and "email_verified" in unverified.message
    outsider = await refusal(oidc_provider, "otto")
    assert outsider.reason is SsoRefusal.DOMAIN_NOT_ALLOWED
    assert outsider.message == "otto@other.example is not in a domain allowed to sign in here."
    assert (await refusal(oidc_provider, "nemo")).reason is SsoRefusal.EMAIL_MISSING
    no_role = await refusal(oidc_provider, "vera")  # default_role: none
    assert no_role.reason is SsoRefusal.NO_ROLE
    assert no_role.message == "vera@example.com may not sign in here: its groups claim names none of the roles set here. " \
                              "Ask an admin for access."
    # Without the groups scope the provider shares no groups: nobody has a role.
    assert (await refusal(oidc_provider, "olga", scopes=["openid", "email", "profile"])).reason is SsoRefusal.NO_ROLE
    # Any domain, when none is listed.
    assert (await signed_in(oidc_provider, "otto", OidcSignIn(oidc_provider.sso_config(allowed_domains=[])))).role is Role.AGENT


async def test_the_login_page_checks_an_accounts_password(oidc_provider: OidcProvider) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config(default_role="agent"))
    start = await sign_in.begin(oidc_provider.redirect_uri)
    with pytest.raises(AssertionError, match="Unknown account or wrong password"):
        await oidc_provider.sign_in(start.url, "pia", "wrong")
    back = await oidc_provider.sign_in(start.url, "pia", "correct horse")
    assert (await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=back.params)).email == "pia@example.com"


async def test_an_issuer_other_than_the_providers_own_is_refused_at_discovery(oidc_provider: OidcProvider) -> None:
    with pytest.raises(SsoRefused) as refused:
        await OidcSignIn(oidc_provider.sso_config(issuer=oidc_provider.issuer + "/")).begin(oidc_provider.redirect_uri)
    assert refused.value.reason is SsoRefusal.DISCOVERY_FAILED
    assert f"it names the issuer '{oidc_provider.issuer}'; sso.issuer must be exactly that" in refused.value.message
    assert refused.value.status == 502


async def test_a_provider_that_does_not_answer_is_a_discovery_failure(oidc_provider: OidcProvider) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{unused.getsockname()[1]}"
    with pytest.raises(SsoRefused) as refused:
        await OidcSignIn(oidc_provider.sso_config(issuer=closed)).begin(oidc_provider.redirect_uri)
    assert refused.value.reason is SsoRefusal.DISCOVERY_FAILED
    assert refused.value.message == (f"The single sign-on provider could not be used: {closed}/.well-known/openid-configuration: "
                                     "it did not answer (ConnectError).")
    assert refused.value.to_json() == {"error": "sso_refused", "details": {"hint": refused.value.message, "reason": "discovery_failed"}}


async def test_discovery_is_read_once_an_hour(oidc_provider: OidcProvider, requests: tuple[httpx.AsyncClient, list[str]]) -> None:
    http, seen = requests
    clock = ManualClock(datetime.now(UTC))
    sign_in = OidcSignIn(oidc_provider.sso_config(), http=http, now=clock.now)
    await sign_in.begin(oidc_provider.redirect_uri)
    await sign_in.begin(oidc_provider.redirect_uri)
    assert seen.count("/.well-known/openid-configuration") == 1
    clock.advance(timedelta(minutes=61))
    start: SsoStart = await sign_in.begin(oidc_provider.redirect_uri)
    assert seen.count("/.well-known/openid-configuration") == 2 and start.url.startswith(oidc_provider.issuer)
