"""`sign_in.sso` (bot/config/sso.py): what a provider's settings must be, and the messages
that say so. Every value is refused as written, never repaired."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bot.config.people import Role
from bot.config.sso import SsoConfig

GOOD = {"issuer": "https://login.example.com/realms/desk", "client_id": "handoff-desk", "client_secret": "s3cret"}


def problem(**overrides: Any) -> str:
    """The one message SsoConfig gives for GOOD with `overrides`, as `field: message`."""
    with pytest.raises(ValidationError) as error:
        SsoConfig.model_validate({**GOOD, **overrides})
    [only] = error.value.errors()
    where = ".".join(str(part) for part in only["loc"])
    return f"{where}: {only['msg'].removeprefix('Value error, ')}" if where else only["msg"].removeprefix("Value error, ")


def test_the_defaults_ask_for_openid_email_and_profile_and_give_no_role() -> None:
    config = SsoConfig.model_validate(GOOD)
    assert config.scopes == ["openid", "email", "profile"]
    assert (config.label, config.allowed_domains, config.role_claim, config.roles) == ("Sign in with single sign-on", [], None, {})
    assert (config.default_role, config.create_people) == ("none", True)
    assert config.client_secret is not None and config.client_secret.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(config)
    assert SsoConfig.model_validate({**GOOD, "client_secret": ""}).client_secret is None  # a public client
    for name, field in SsoConfig.model_fields.items():
        assert field.description, name


@pytest.mark.parametrize("issuer", ["https://login.example.com", "https://tenant.auth0.example/", "http://127.0.0.1:8080",
                                    "http://localhost:9000/realms/x", "http://[::1]:4000"])
def test_an_issuer_is_kept_exactly_as_written(issuer: str) -> None:
    assert SsoConfig.model_validate({**GOOD, "issuer": issuer}).issuer == issuer


@pytest.mark.parametrize(("issuer", "message"), [
    ("login.example.com", "must be an https URL such as https://login.example.com/realms/desk"),
    ("ftp://login.example.com", "must be an https URL such as https://login.example.com/realms/desk"),
    ("http://login.example.com", "must be https (http only for a provider on this machine: localhost, 127.0.0.1 or ::1), "
                                 "such as https://login.example.com/realms/desk"),
    ("https://login.example.com/?tenant=1", "must be an https URL with no query, fragment or surrounding spaces, "
                                            "such as https://login.example.com/realms/desk"),
    ("https://login.example.com ", "must be an https URL with no query, fragment or surrounding spaces, "
                                   "such as https://login.example.com/realms/desk"),
])
def test_an_issuer_that_is_not_https_is_refused_with_an_example(issuer: str, message: str) -> None:
    assert problem(issuer=issuer) == f"issuer: {message}"


def test_scopes_must_include_openid_each_once_each_one_word() -> None:
    assert problem(scopes=["email", "profile"]) == "scopes: must include openid (without it the provider answers with no ID token)"
    assert problem(scopes=["openid", "email", "email"]) == "scopes: each scope once; repeated: email"
    assert problem(scopes=["openid", "email profile"]) == \
        "scopes: each scope must be one word of printable characters such as email, got 'email profile'"


def test_allowed_domains_are_domains_each_once_in_any_case() -> None:
    assert SsoConfig.model_validate({**GOOD, "allowed_domains": ["Example.com", "eu.example.com"]}).allowed_domains == \
        ["Example.com", "eu.example.com"]
    for bad in ("@example.com", ".example.com", "example", "olga@example.com", "exa mple.com"):
        assert problem(allowed_domains=[bad]) == \
            f"allowed_domains: each entry must be an e-mail domain such as example.com (no @, no leading dot), got {bad!r}"
    assert problem(allowed_domains=["example.com", "EXAMPLE.com"]) == \
        "allowed_domains: each domain once (compared in any case); repeated: example.com"


def test_a_domain_is_allowed_exactly_in_any_case() -> None:
    config = SsoConfig.model_validate({**GOOD, "allowed_domains": ["Example.com"]})
    assert config.allows_domain("olga@EXAMPLE.COM")
    assert not config.allows_domain("olga@eu.example.com")
    assert not config.allows_domain("olga@example.com.evil.test")
    assert SsoConfig.model_validate(GOOD).allows_domain("anyone@anywhere.test")


def test_roles_and_their_claim_come_together() -> None:
    assert problem(roles={"desk-admins": "admin"}) == \
        "roles maps values of role_claim, which is not set: set role_claim (such as groups)"
    assert problem(role_claim="groups") == \
        "role_claim 'groups' needs roles, its values mapped to roles (such as desk-admins: admin)"
    assert problem(role_claim=" groups", roles={"a": "agent"}) == \
        "role_claim: must be a claim name such as groups, with no surrounding spaces"
    assert problem(role_claim="groups", roles={"desk-admins": "owner"}).startswith("roles.desk-admins: Input should be 'viewer'")
    assert problem(default_role="nobody") == \
        "default_role: must be admin, agent, viewer or none (none refuses whom the roles do not name)"


def test_the_highest_mapped_role_else_the_default_else_none() -> None:
    config = SsoConfig.model_validate({**GOOD, "role_claim": "groups", "roles": {"staff": "viewer", "desk-admins": "admin"}})
    assert config.role_for(["staff", "desk-admins"]) is Role.ADMIN
    assert config.role_for(["Desk-Admins"]) is None  # values compared exactly
    assert config.role_for([]) is None
    viewer = config.model_copy(update={"default_role": Role.VIEWER})
    assert viewer.role_for(["elsewhere"]) is Role.VIEWER
    assert SsoConfig.model_validate({**GOOD, "default_role": "agent"}).default_role is Role.AGENT
