"""Single sign-on pages: `GET /inbox/sso` sends the browser to the provider, and
`GET /inbox/sso/callback` signs the person in when it comes back (bot/domain/people/oidc.py
checks everything the provider said).

Where the sign-in waits. `begin`'s state, nonce and PKCE verifier ride in a signed,
HttpOnly cookie that lives ten minutes and is deleted by the callback, so an answer is
accepted only in the browser that started it, and only once. The cookie is SameSite=Lax, not
Strict like the session's: the provider's redirect back is a cross-site navigation, on which
a Strict cookie would not be sent. The callback is a GET because OpenID Connect's redirect
is; what it changes (a new session, on a first sign-in a new person) happens only for a
state this browser holds.

Who signs in: the person linked to the provider's (issuer, subject), else the person with
the verified address (then the subject is linked to them), else — when `create_people` —
a new person with the role the claims map to. A disabled person is refused. When the
config maps a claim to roles, each sign-in brings the person's role in line with it, so the
provider stays the source of truth for roles. Every refusal is a page saying what was wrong,
and nothing is created.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from bot.config import Config
from bot.domain.people import Actor, IdentityTaken
from bot.domain.people.oidc import OidcSignIn, SsoIdentity, SsoRefusal, SsoRefused, SsoStart
from bot.store.models import Person
from bot.web.deps import app_desk
from bot.web.inbox.owner import page, redirect, set_session_cookie

COOKIE = "handoff_sso"
COOKIE_MAX_AGE = 600
CALLBACK = "/inbox/sso/callback"
router = APIRouter(include_in_schema=False)


def _serializer(config: Config) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(config.signing_keys, salt="handoff-desk.sso-start.v1")


def _relying_party(request: Request) -> OidcSignIn | None:
    """The app's relying party (made once: it caches the provider's discovery document)."""
    desk = app_desk(request)
    sso = desk.config.sign_in.sso
    if sso is None:
        return None
    party: OidcSignIn | None = getattr(request.app.state, "sso", None)
    if party is None:
        party = request.app.state.sso = OidcSignIn(sso, now=desk.clock.now)
    return party


def _refused(request: Request, message: str, status: int = 403) -> Response:
    response = page(app_desk(request).renderer, "inbox/error.html", status=status, title="Single sign-on refused",
                    message=f"{message} Nobody was signed in.")
    response.delete_cookie(COOKIE, path="/inbox/sso")
    return response


@router.get("/inbox/sso", include_in_schema=False)
async def start(request: Request, next: str = "/inbox") -> Response:
    party = _relying_party(request)
    if party is None:
        return _refused(request, "Single sign-on is not configured (sign_in.sso).", status=404)
    config = app_desk(request).config
    try:
        begun = await party.begin(config.public_url + CALLBACK)
    except SsoRefused as exc:
        return _refused(request, exc.message, exc.status)
    response = redirect(begun.url)
    held = {"state": begun.state, "nonce": begun.nonce, "verifier": begun.code_verifier, "next": _safe_next(next)}
    response.set_cookie(COOKIE, _serializer(config).dumps(held), max_age=COOKIE_MAX_AGE, path="/inbox/sso",
                        httponly=True, samesite="lax", secure=config.public_url.startswith("https://"))
    return response


@router.get(CALLBACK, include_in_schema=False)
async def callback(request: Request) -> Response:
    party = _relying_party(request)
    if party is None:
        return _refused(request, "Single sign-on is not configured (sign_in.sso).", status=404)
    desk = app_desk(request)
    try:
        held: dict[str, Any] = _serializer(desk.config).loads(request.cookies.get(COOKIE, ""), max_age=COOKIE_MAX_AGE)
    except BadSignature:
        return _refused(request, "This sign-in was not started in this browser, or took longer than ten minutes. "
                                 "Start again from the sign-in page.")
    begun = SsoStart(url="", state=str(held["state"]), nonce=str(held["nonce"]), code_verifier=str(held["verifier"]))
    try:
        identity = await party.finish(begun, redirect_uri=desk.config.public_url + CALLBACK, params=dict(request.query_params))
        person = await _person_for(request, identity)
    except SsoRefused as exc:
        return _refused(request, exc.message, exc.status)
    token, _session = await desk.sessions.open(person, via="sso")
    response = redirect(_safe_next(str(held.get("next", "/inbox"))))
    response.delete_cookie(COOKIE, path="/inbox/sso")
    set_session_cookie(desk.config, response, token)
    return response


async def _person_for(request: Request, identity: SsoIdentity) -> Person:
    """The person this identity is: linked, found by address, or created; SsoRefused when
    none may sign in. Nothing is written before every check has passed."""
    desk = app_desk(request)
    sso = desk.config.sign_in.sso
    assert sso is not None
    people, subject = desk.people, f"{identity.issuer} {identity.subject}"
    person = await people.owner_of("sso", subject) or await people.by_email(identity.email)
    if person is not None and person.disabled_at is not None:
        raise SsoRefused(SsoRefusal.PERSON_DISABLED, "Your account is disabled; ask an admin.")
    if person is not None:
        try:
            await people.link(person.id, "sso", subject, verified_via="sso", actor=f"{person.name} (sso)")
        except IdentityTaken:
            raise SsoRefused(SsoRefusal.IDENTITY_TAKEN, f"The address {identity.email} belongs to a person who signs in "
                             "through another account of this provider.") from None
    else:
        if not sso.create_people:
            raise SsoRefused(SsoRefusal.NOT_A_PERSON, f"{identity.email} is not a person of this desk; ask an admin to add you.")
        person = await people.add(pid=await _free_id(request, identity.email), name=identity.name or identity.email,
                                  email=identity.email, role=identity.role, source="sso", actor="single sign-on")
        await people.link(person.id, "sso", subject, verified_via="sso", actor=Actor.of_person(person, "sso").label)
        return person
    if sso.role_claim and person.role != identity.role:
        person = await people.update(person.id, role=identity.role, actor="single sign-on (role claim)")
    return person


async def _free_id(request: Request, email: str) -> str:
    """A person id from the address's local part ("olga.p@…" → "olga-p"), numbered when taken."""
    base = re.sub(r"[^a-z0-9_-]+", "-", email.split("@", 1)[0].lower()).strip("-")[:36] or "person"
    base = base if base[0].isalpha() else f"p-{base}"[:36]
    people = app_desk(request).people
    candidate, number = base, 2
    while await people.find(candidate) is not None:
        candidate, number = f"{base}-{number}", number + 1
    return candidate


def _safe_next(target: str) -> str:
    return target if target.startswith("/inbox") and "//" not in target and "\\" not in target else "/inbox"


def login_link(config: Config, next: str) -> str | None:
    """The sign-in page's single-sign-on link, when one is configured."""
    return f"/inbox/sso?next={quote(_safe_next(next))}" if config.sign_in.sso else None
