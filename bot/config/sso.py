"""Single sign-on through an OpenID Connect provider (`sign_in.sso`): which provider, which
addresses it may sign in, and which role their claims give them.

The desk is a relying party of one provider (Keycloak, Entra ID, Okta, Google Workspace,
Authentik …). A person is who the provider says once the address is verified and in an
allowed domain; their role comes from one claim (`groups`, say) mapped through `roles`, or
`default_role`. Nothing here is repaired: a value that is not what is expected is refused
with the key and an example, so an owner never signs people in under a setting they did not
write.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal
from urllib.parse import urlparse

from pydantic import Field, field_validator, model_validator

from bot.config.roles import Role
from bot.config.values import OptionalSecret, _Section, each_once

NO_ROLE: Literal["none"] = "none"
"""`default_role: none`: an allowed address whose claims map to no role is refused."""

_LOOPBACK_NAMES = ("localhost",)
_DOMAIN = re.compile(r"(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]", re.IGNORECASE)
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3: printable ASCII but space, " and \
_ISSUER_EXAMPLE = "https://login.example.com/realms/desk"


def is_loopback_host(host: str) -> bool:
    """Whether `host` names this machine: localhost, 127.0.0.0/8 or ::1."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def issuer_url(value: str) -> str:
    """`value` as given when it is an https URL with a host and no query or fragment (as
    OpenID Connect Discovery requires of an issuer), or http on a loopback host (a provider
    on this machine, as the tests run); otherwise a ValueError naming an example. The value is
    never trimmed: the provider's ID tokens must name exactly it, trailing slash included."""
    parsed = urlparse(value)
    if parsed.scheme not in ("https", "http") or not parsed.hostname:
        raise ValueError(f"must be an https URL such as {_ISSUER_EXAMPLE}")
    if parsed.query or parsed.fragment or value != value.strip():
        raise ValueError(f"must be an https URL with no query, fragment or surrounding spaces, such as {_ISSUER_EXAMPLE}")
    if parsed.scheme == "http" and not is_loopback_host(parsed.hostname):
        raise ValueError("must be https (http only for a provider on this machine: localhost, 127.0.0.1 or ::1), "
                         f"such as {_ISSUER_EXAMPLE}")
    return value


class SsoConfig(_Section):
    """One OpenID Connect provider people sign in with (authorization code with PKCE). The
    desk is registered there as a client whose redirect URI is the inbox's single sign-on
    callback under `server.public_url`."""

    issuer: str = Field(
        description="The provider's issuer URL, exactly as its /.well-known/openid-configuration says, "
                    f"such as {_ISSUER_EXAMPLE}.",
    )
    client_id: str = Field(min_length=1, max_length=255, description="The client id the provider gave the desk.")
    client_secret: OptionalSecret = Field(
        default=None,
        description="The client secret the provider gave the desk; empty for a public client (PKCE alone).",
    )
    label: str = Field(
        default="Sign in with single sign-on", min_length=1, max_length=60,
        description="The text of the sign-in button, such as Sign in with Okta.",
    )
    scopes: list[str] = Field(
        default_factory=lambda: ["openid", "email", "profile"],
        description="Scopes asked for; must include openid. Add the one that carries role_claim if the provider "
                    "needs it (often groups).",
    )
    allowed_domains: list[str] = Field(
        default_factory=list,
        description="E-mail domains that may sign in, such as example.com (exactly that domain, any case; "
                    "sub-domains are listed on their own). Empty lets in every verified address the provider "
                    "vouches for: only for a provider that knows your people alone.",
    )
    role_claim: str | None = Field(
        default=None,
        description="The claim whose value (a string or a list of strings) gives the role through roles, "
                    "such as groups.",
    )
    roles: dict[str, Role] = Field(
        default_factory=dict,
        description="Value of role_claim → role (admin, agent or viewer), such as desk-admins: admin. "
                    "Values are compared exactly; a person in several gets the highest.",
    )
    default_role: Role | Literal["none"] = Field(
        default=NO_ROLE,
        description="The role of an allowed address whose claims map to no role; none refuses them.",
    )
    create_people: bool = Field(
        default=True,
        description="Whether an allowed address that signs in for the first time becomes a person; false lets in "
                    "only people already in the directory.",
    )

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return issuer_url(value)

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        for scope in value:
            if not _SCOPE.fullmatch(scope):
                raise ValueError(f"each scope must be one word of printable characters such as email, got {scope!r}")
        if "openid" not in value:
            raise ValueError("must include openid (without it the provider answers with no ID token)")
        return each_once(value, "each scope once; repeated: {}")

    @field_validator("allowed_domains")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        for domain in value:
            if not _DOMAIN.fullmatch(domain):
                raise ValueError(f"each entry must be an e-mail domain such as example.com (no @, no leading dot), got {domain!r}")
        each_once([domain.lower() for domain in value], "each domain once (compared in any case); repeated: {}")
        return value

    @field_validator("default_role", mode="before")
    @classmethod
    def _default_role(cls, value: object) -> object:
        if value not in (*Role, NO_ROLE):
            raise ValueError("must be admin, agent, viewer or none (none refuses whom the roles do not name)")
        return value

    @field_validator("role_claim")
    @classmethod
    def _claim(cls, value: str | None) -> str | None:
        if value is not None and (not value or value != value.strip()):
            raise ValueError("must be a claim name such as groups, with no surrounding spaces")
        return value

    @model_validator(mode="after")
    def _roles_need_their_claim(self) -> SsoConfig:
        if self.roles and self.role_claim is None:
            raise ValueError("roles maps values of role_claim, which is not set: set role_claim (such as groups)")
        if self.role_claim is not None and not self.roles:
            raise ValueError(f"role_claim {self.role_claim!r} needs roles, its values mapped to roles (such as desk-admins: admin)")
        return self

    def allows_domain(self, email: str) -> bool:
        """Whether `email`'s domain is allowed: exactly one of allowed_domains in any case,
        or any when the list is empty."""
        if not self.allowed_domains:
            return True
        domain = email.rpartition("@")[2].lower()
        return domain in {allowed.lower() for allowed in self.allowed_domains}

    def role_for(self, values: list[str]) -> Role | None:
        """The highest role `values` (the role claim's) map to, else default_role; None when
        that is none."""
        mapped = [self.roles[value] for value in values if value in self.roles]
        if mapped:
            return max(mapped, key=lambda role: role.rank)
        return None if self.default_role == NO_ROLE else Role(self.default_role)
