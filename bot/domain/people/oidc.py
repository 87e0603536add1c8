"""Single sign-on: the desk as an OpenID Connect relying party of one provider (`sign_in.sso`).

A sign-in is two calls around a trip through the browser. `begin` reads the provider's
discovery document and builds the authorization URL (authorization code, PKCE S256, a fresh
random state and nonce); the web layer keeps the `SsoStart` it returns where only this
browser's next request finds it (server-side, or a signed short-lived cookie) and redirects.
The provider sends the browser back with a code; `finish` checks the answer belongs to that
start, exchanges the code (with the PKCE verifier, so a stolen code is useless), verifies the
ID token (signature against the provider's published keys, issuer, audience, times on the
injected clock, nonce), then decides who this is: a verified address in an allowed domain,
with the role its claims map to. Every way it can fail is an `SsoRefused` whose `reason` the
caller can branch on and whose message a person can read on the page.

The claims come from the ID token; those it lacks (a strictly conforming provider puts the
e-mail and profile claims in the userinfo answer only, when an access token is issued) are
asked of the userinfo endpoint, whose `sub` must be the ID token's.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import quote, urlparse

import httpx
from authlib.common.security import generate_token
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import ExpiredTokenError, InvalidKeyIdError, JoseError, MissingClaimError
from joserfc.jwk import KeySet

from bot.config import SsoConfig, is_loopback_host
from bot.config.people import Role
from bot.errors import DeskError

DISCOVERY_PATH = "/.well-known/openid-configuration"
DISCOVERY_TTL = timedelta(hours=1)  # a provider's endpoints and keys change rarely; a restart is not needed to see it
CLOCK_LEEWAY = timedelta(minutes=1)  # clock skew between the provider and this server that a token's times tolerate
HTTP_TIMEOUT = 10.0  # seconds for each call to the provider: a person is waiting on the page
# Signature algorithms an ID token may use: public-key ones only, so the client secret is
# never a signing key and `none` is never accepted.
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class SsoRefusal(StrEnum):
    """Why a single sign-on did not sign anybody in."""

    STATE_MISMATCH = "state_mismatch"
    NONCE_MISMATCH = "nonce_mismatch"
    PROVIDER_ERROR = "provider_error"
    TOKEN_EXCHANGE_FAILED = "token_exchange_failed"
    INVALID_ID_TOKEN = "invalid_id_token"
    USERINFO_FAILED = "userinfo_failed"
    EMAIL_MISSING = "email_missing"
    EMAIL_UNVERIFIED = "email_unverified"
    DOMAIN_NOT_ALLOWED = "domain_not_allowed"
    NO_ROLE = "no_role"
    DISCOVERY_FAILED = "discovery_failed"
    # Decided by the desk after the provider vouched (bot/web/inbox/sso.py)
    NOT_A_PERSON = "not_a_person"
    PERSON_DISABLED = "person_disabled"
    IDENTITY_TAKEN = "identity_taken"


class SsoRefused(DeskError):
    """A single sign-on that signs nobody in: `reason` to branch on, `message` for the page.
    403, but 502 when the provider itself could not be read (nothing the person did)."""

    code = "sso_refused"
    status = 403

    def __init__(self, reason: SsoRefusal, message: str) -> None:
        super().__init__(message, reason=reason.value)
        self.reason = reason
        if reason in (SsoRefusal.DISCOVERY_FAILED, SsoRefusal.USERINFO_FAILED):
            self.status = 502


@dataclass(frozen=True)
class SsoStart:
    """A sign-in under way: where to send the browser, and what its answer must match. The
    web layer keeps it for this browser only; the verifier never leaves the server (the URL
    carries its S256 challenge), and is left out of the repr so no log shows it."""

    url: str
    state: str
    nonce: str
    code_verifier: str = field(repr=False)


@dataclass(frozen=True)
class SsoIdentity:
    """Who the provider vouches for: its issuer and subject (stable, unlike the address),
    the verified address, the name it shares (None when it shares none) and the role."""

    issuer: str
    subject: str
    email: str
    name: str | None
    role: Role


@dataclass(frozen=True)
class _Provider:
    """What the desk uses of the discovery document."""

    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None
    algorithms: tuple[str, ...]
    secret_basic: bool  # client_secret_basic offered (the default when the document says nothing)
    iss_parameter: bool  # the provider names itself in its answers (RFC 9207)
    read_at: datetime


@dataclass(frozen=True)
class _Tokens:
    id_token: str
    access_token: str | None = field(repr=False)


class OidcSignIn:
    """The relying party of `config`'s provider. `http` is the client its calls go through
    (one of its own per call when None); `now` is the clock tokens' times are checked on."""

    def __init__(self, config: SsoConfig, *, http: httpx.AsyncClient | None = None,
                 now: Callable[[], datetime] | None = None) -> None:
        self.config = config
        self._http = http
        self._now = now or (lambda: datetime.now(UTC))
        self._provider: _Provider | None = None
        self._keys: KeySet | None = None

    async def begin(self, redirect_uri: str) -> SsoStart:
        """A new sign-in: the URL to send the browser to, with a fresh state, nonce and PKCE
        verifier (only its S256 challenge is in the URL)."""
        provider = await self._discover()
        state, nonce, verifier = generate_token(43), generate_token(43), generate_token(64)
        url = prepare_grant_uri(
            provider.authorization_endpoint, client_id=self.config.client_id, response_type="code",
            redirect_uri=redirect_uri, scope=" ".join(self.config.scopes), state=state, nonce=nonce,
            code_challenge=create_s256_code_challenge(verifier), code_challenge_method="S256",
        )
        return SsoStart(url=str(url), state=state, nonce=nonce, code_verifier=verifier)

    async def finish(self, start: SsoStart, *, redirect_uri: str, params: Mapping[str, str]) -> SsoIdentity:
        """The person `params` (the query of the provider's redirect to `redirect_uri`)
        signs in, or SsoRefused saying why not."""
        provider = await self._discover()
        code = self._code_of(provider, start, params)
        tokens = await self._exchange(provider, start, redirect_uri, code)
        claims = await self._id_claims(provider, tokens.id_token, start.nonce)
        if self._lacks_claims(claims) and provider.userinfo_endpoint and tokens.access_token:
            claims = {**await self._userinfo(provider.userinfo_endpoint, tokens.access_token, claims["sub"]), **claims}
        return self._identity(claims)

    # ------------------------------------------------------------------ the provider's answer

    def _code_of(self, provider: _Provider, start: SsoStart, params: Mapping[str, str]) -> str:
        """The code of an answer that belongs to `start`: same state (compared in constant
        time), from this issuer (named in the answer when the provider says it names itself:
        RFC 9207 against mix-ups), and no error."""
        state = params.get("state", "")
        if not hmac.compare_digest(state.encode(), start.state.encode()):
            raise SsoRefused(SsoRefusal.STATE_MISMATCH, "This sign-in answer does not belong to the sign-in this browser "
                                                        "started (its state differs). Start again from the sign-in page.")
        issuer = params.get("iss")
        if (issuer is not None or provider.iss_parameter) and issuer != self.config.issuer:
            raise SsoRefused(SsoRefusal.PROVIDER_ERROR, f"The sign-in answer comes from {issuer}, not from the configured "
                                                        f"provider {self.config.issuer}. Start again from the sign-in page.")
        if "error" in params:
            description = params.get("error_description")
            said = params["error"] + (f": {description}" if description else "")
            raise SsoRefused(SsoRefusal.PROVIDER_ERROR, f"The single sign-on provider did not sign you in ({said}).")
        code = params.get("code")
        if not code:
            raise SsoRefused(SsoRefusal.PROVIDER_ERROR, "The single sign-on provider's answer carries no sign-in code. "
                                                        "Start again from the sign-in page.")
        return code

    async def _exchange(self, provider: _Provider, start: SsoStart, redirect_uri: str, code: str) -> _Tokens:
        """The tokens for `code`, asked with the PKCE verifier and the client's credentials
        (HTTP Basic when the provider offers it, else in the form)."""
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": start.code_verifier}
        auth: httpx.BasicAuth | None = None
        secret = self.config.client_secret.get_secret_value() if self.config.client_secret else None
        if secret is not None and provider.secret_basic:
            # RFC 6749 §2.3.1: both halves form-encoded before they are joined.
            auth = httpx.BasicAuth(quote(self.config.client_id, safe=""), quote(secret, safe=""))
        else:
            form["client_id"] = self.config.client_id
            if secret is not None:
                form["client_secret"] = secret
        failed = SsoRefusal.TOKEN_EXCHANGE_FAILED
        try:
            async with self._client() as http:
                response = await http.post(provider.token_endpoint, data=form, auth=auth or httpx.USE_CLIENT_DEFAULT,
                                           headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise SsoRefused(failed, f"The single sign-on provider's token endpoint did not answer ({type(error).__name__}).") from error
        body = _json_object(response)
        if response.status_code != 200:
            said = _provider_said(body) or f"HTTP {response.status_code}"
            raise SsoRefused(failed, f"The single sign-on provider would not exchange the sign-in code ({said}). "
                                     "Start again from the sign-in page.")
        id_token, access_token = (body or {}).get("id_token"), (body or {}).get("access_token")
        if not isinstance(id_token, str) or not id_token:
            raise SsoRefused(failed, "The single sign-on provider's token answer carries no ID token (is openid in sso.scopes?).")
        return _Tokens(id_token, access_token if isinstance(access_token, str) and access_token else None)

    async def _id_claims(self, provider: _Provider, id_token: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims once its signature, issuer, audience, times and nonce hold."""
        invalid = SsoRefusal.INVALID_ID_TOKEN
        try:
            try:
                token = jwt.decode(id_token, await self._key_set(provider), algorithms=list(provider.algorithms))
            except InvalidKeyIdError:  # signed with a key published since the keys were read: read them again
                token = jwt.decode(id_token, await self._key_set(provider, fresh=True), algorithms=list(provider.algorithms))
        except JoseError as error:
            raise SsoRefused(invalid, f"The single sign-on provider's ID token does not verify ({error.error}).") from error
        now = self._now()
        registry = jwt.JWTClaimsRegistry(
            now=int(now.timestamp()), leeway=int(CLOCK_LEEWAY.total_seconds()),
            iss={"essential": True, "value": self.config.issuer}, aud={"essential": True, "value": self.config.client_id},
            sub={"essential": True}, exp={"essential": True}, iat={"essential": True},
        )
        try:
            registry.validate(token.claims)
        except ExpiredTokenError as error:
            raise SsoRefused(invalid, f"The single sign-on provider's ID token has expired (this server's clock says "
                                      f"{now:%Y-%m-%d %H:%M:%S} UTC: is it right?).") from error
        except MissingClaimError as error:
            raise SsoRefused(invalid, f"The single sign-on provider's ID token lacks {error.description}.") from error
        except JoseError as error:
            raise SsoRefused(invalid, f"The single sign-on provider's ID token is not valid ({error.description}).") from error
        claims = token.claims
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if (len(audiences) > 1 or "azp" in claims) and claims.get("azp") != self.config.client_id:
            raise SsoRefused(invalid, "The single sign-on provider's ID token was issued to another client (azp).")
        if not hmac.compare_digest(str(claims.get("nonce", "")).encode(), nonce.encode()):
            raise SsoRefused(SsoRefusal.NONCE_MISMATCH, "The single sign-on provider's ID token was not issued for this "
                                                        "sign-in (its nonce differs). Start again from the sign-in page.")
        return claims

    def _lacks_claims(self, claims: Mapping[str, Any]) -> bool:
        wanted = ["email", "email_verified", "name", *([self.config.role_claim] if self.config.role_claim else [])]
        return any(name not in claims for name in wanted)

    async def _userinfo(self, endpoint: str, access_token: str, subject: str) -> dict[str, Any]:
        """The userinfo endpoint's claims for `subject`, asked with the access token."""
        failed = SsoRefusal.USERINFO_FAILED
        try:
            async with self._client() as http:
                response = await http.get(endpoint, headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"})
        except httpx.HTTPError as error:
            raise SsoRefused(failed, f"The single sign-on provider's userinfo endpoint did not answer ({type(error).__name__}).") from error
        body = _json_object(response)
        if response.status_code != 200 or body is None:
            said = _provider_said(body) or f"HTTP {response.status_code}"
            raise SsoRefused(failed, f"The single sign-on provider would not say who signed in ({said}).")
        if body.get("sub") != subject:
            raise SsoRefused(failed, "The single sign-on provider's userinfo answer is about another subject than its ID token.")
        return body

    def _identity(self, claims: Mapping[str, Any]) -> SsoIdentity:
        """Who `claims` are about, if the desk lets them in: a verified address, in an allowed
        domain, with a role."""
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email:
            raise SsoRefused(SsoRefusal.EMAIL_MISSING, "The single sign-on provider shares no e-mail address for this "
                                                       "account (the desk needs one, and the email scope).")
        if claims.get("email_verified") is not True:
            raise SsoRefused(SsoRefusal.EMAIL_UNVERIFIED, f"The single sign-on provider does not vouch for {email} "
                                                          "(email_verified is not true): verify the address there first.")
        if not self.config.allows_domain(email):
            raise SsoRefused(SsoRefusal.DOMAIN_NOT_ALLOWED, f"{email} is not in a domain allowed to sign in here.")
        values = _role_values(claims.get(self.config.role_claim)) if self.config.role_claim else []
        role = self.config.role_for(values)
        if role is None:
            why = (f"its {self.config.role_claim} claim names none of the roles set here" if self.config.role_claim
                   else "the provider's claims give no role here")
            raise SsoRefused(SsoRefusal.NO_ROLE, f"{email} may not sign in here: {why}. Ask an admin for access.")
        return SsoIdentity(issuer=self.config.issuer, subject=str(claims["sub"]), email=email, name=_name(claims), role=role)

    # ------------------------------------------------------------------ discovery and keys

    async def _discover(self) -> _Provider:
        """The provider's endpoints, read from its discovery document at most once an hour.
        Its issuer must be the configured one, exactly (OpenID Connect Discovery §4.3)."""
        if self._provider is not None and self._now() - self._provider.read_at < DISCOVERY_TTL:
            return self._provider
        url = self.config.issuer.rstrip("/") + DISCOVERY_PATH
        document = await self._read_json(url, "configuration")
        if document.get("issuer") != self.config.issuer:
            raise _discovery_failed(url, f"it names the issuer {document.get('issuer')!r}; sso.issuer must be exactly that")
        endpoints = {}
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            endpoints[name] = _endpoint(document, name, url)
        userinfo = _endpoint(document, "userinfo_endpoint", url) if document.get("userinfo_endpoint") else None
        challenges = document.get("code_challenge_methods_supported")
        if isinstance(challenges, list) and "S256" not in challenges:
            raise _discovery_failed(url, "it does not offer PKCE with S256 (code_challenge_methods_supported)")
        offered = document.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = tuple(alg for alg in ASYMMETRIC_ALGORITHMS if alg in offered)
        if not algorithms:
            raise _discovery_failed(url, f"it signs ID tokens with none of {', '.join(ASYMMETRIC_ALGORITHMS)}")
        methods = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        self._provider = _Provider(
            authorization_endpoint=endpoints["authorization_endpoint"], token_endpoint=endpoints["token_endpoint"],
            jwks_uri=endpoints["jwks_uri"], userinfo_endpoint=userinfo, algorithms=algorithms,
            secret_basic="client_secret_basic" in methods,
            iss_parameter=document.get("authorization_response_iss_parameter_supported") is True, read_at=self._now(),
        )
        self._keys = None
        return self._provider

    async def _key_set(self, provider: _Provider, *, fresh: bool = False) -> KeySet:
        """The provider's published signing keys, read once per discovery (again when `fresh`)."""
        if self._keys is None or fresh:
            document = await self._read_json(provider.jwks_uri, "signing keys")
            try:
                self._keys = KeySet.import_key_set(document)  # type: ignore[arg-type]  # checked by import_key_set itself
            except (JoseError, KeyError, TypeError, ValueError) as error:
                raise _discovery_failed(provider.jwks_uri, "its signing keys are not a JSON Web Key Set") from error
        return self._keys

    async def _read_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            async with self._client() as http:
                response = await http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise _discovery_failed(url, f"it did not answer ({type(error).__name__})") from error
        body = _json_object(response)
        if response.status_code != 200 or body is None:
            raise _discovery_failed(url, f"its {what} answered HTTP {response.status_code}"
                                         + ("" if body is not None else ", not a JSON object"))
        return body

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._http is not None:
            yield self._http
            return
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
            yield http


def _discovery_failed(url: str, why: str) -> SsoRefused:
    return SsoRefused(SsoRefusal.DISCOVERY_FAILED, f"The single sign-on provider could not be used: {url}: {why}.")


def _endpoint(document: Mapping[str, Any], name: str, url: str) -> str:
    """An endpoint of the discovery document, held to the same rule as the issuer (https,
    http only on this machine): a provider may not send codes or tokens in the clear."""
    value = document.get(name)
    if not isinstance(value, str) or not value:
        raise _discovery_failed(url, f"it names no {name}")
    parsed = urlparse(value)
    if not parsed.hostname or not (parsed.scheme == "https" or parsed.scheme == "http" and is_loopback_host(parsed.hostname)):
        raise _discovery_failed(url, f"its {name} {value!r} is not https (http only for a provider on this machine)")
    return value


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _provider_said(body: Mapping[str, Any] | None) -> str | None:
    """An OAuth error answer's `error: error_description`, as the provider put it."""
    if not body or not isinstance(body.get("error"), str):
        return None
    description = body.get("error_description")
    return str(body["error"]) + (f": {description}" if isinstance(description, str) and description else "")


def _role_values(claim: Any) -> list[str]:
    """The role claim's values: one string, or the strings of a list (others ignored)."""
    if isinstance(claim, str):
        return [claim]
    if isinstance(claim, list):
        return [value for value in claim if isinstance(value, str)]
    return []


def _name(claims: Mapping[str, Any]) -> str | None:
    """The name the provider shares: `name`, else given and family names, else None."""
    name = claims.get("name")
    if isinstance(name, str) and name.strip():
        return str(name)
    parts = [claims.get(key) for key in ("given_name", "family_name")]
    joined = " ".join(part.strip() for part in parts if isinstance(part, str) and part.strip())
    return joined or None
