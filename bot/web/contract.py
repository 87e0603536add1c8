"""The API's contract as its OpenAPI document states it (`/api/openapi.json`, committed as
docs/openapi.json): every answer a route can give, in one vocabulary.

Clients are generated from that document (openapi-generator, Kiota, openapi-python-client) and
the typed client is checked against it, so a route must not answer anything the document does
not say. The refusals are declared once, here, and attached to the routes by their route class
(`DocumentedRoute`, the base of every /api router's routes) from what the route is: every /api
route can refuse a caller (401, 403) and a malformed parameter (422); one with an id in its
path can find nothing (404); a POST reads a JSON body, so it can get a broken one (400), an
oversized one (413) or one of another type (415). A route adds only what is its own
(`refusals(HANDOFF_NOT_ACTIVE)` in its decorator), and the two merge into one entry per status
whose description lists each `error` code with when it happens.

Every refusal has the same body, `ErrorAnswer`: `{"error": <code>, "details": {"hint": …}}`,
with `error` one of `ErrorCode` (tests/test_contract.py checks that every code the desk's
errors and routes use is a member). Who may call a route is declared by its own dependency
(`ApiNeeds`, bot/web/api.py), which names its security schemes (`SECURED_BY`); the schemes
themselves are `SECURITY_SCHEMES`, put in the document by `DeskApi.openapi`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from bot.runtime.text import CleanStr


# The web layer's own refusals, and the codes of the core's typed errors (DeskError and its
# subclasses), which the app's error handler answers with as they are; tests/test_contract.py
# checks that none is missing. The docstring is the schema's description in the document.
class ErrorCode(StrEnum):
    """Every `error` code the desk answers with: branch on it, and show `details.hint`."""

    # Who is calling (bot/web/api.py)
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    APPROVAL_NEEDS_IDENTITY = "approval_needs_identity"
    APPROVAL_NEEDS_A_PERSON = "approval_needs_a_person"
    # What was sent
    INVALID_JSON = "invalid_json"
    INVALID_REQUEST = "invalid_request"
    INVALID_INPUT = "invalid_input"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    BODY_TOO_LARGE = "body_too_large"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    HTTP_ERROR = "http_error"
    RATE_LIMITED = "rate_limited"
    # Retrying safely (bot/web/idempotency.py)
    INVALID_IDEMPOTENCY_KEY = "invalid_idempotency_key"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    IDEMPOTENCY_KEY_IN_PROGRESS = "idempotency_key_in_progress"
    REQUEST_APPLIED_ANSWER_LOST = "request_applied_answer_lost"
    # The state of what the request names
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    HANDOFF_NOT_ACTIVE = "handoff_not_active"
    HANDOFF_ALREADY_ACTIVE = "handoff_already_active"
    APPROVAL_NOT_PENDING = "approval_not_pending"
    APPROVAL_ALREADY_COUNTED = "approval_already_counted"
    USER_ACTION_PENDING = "user_action_pending"
    USER_ACTION_NOT_PENDING = "user_action_not_pending"
    INVALID_RETURN_VALUES = "invalid_return_values"
    INVALID_AVAILABILITY = "invalid_availability"
    INVALID_OVERRIDE = "invalid_override"
    INVALID_PERSON = "invalid_person"
    INVALID_NAME = "invalid_name"
    CHANGE_REFUSED = "change_refused"
    LINKS_UNAVAILABLE = "links_unavailable"
    FORM_LINK_UNAVAILABLE = "form_link_unavailable"
    NOBODY_AVAILABLE = "nobody_available"
    DISPATCH_FAILED = "dispatch_failed"
    ACTION_FAILED = "action_failed"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    # People signing in (the inbox's pages answer these; listed because the handler is the same)
    INVALID_TOKEN = "invalid_token"
    INVALID_PASSWORD = "invalid_password"
    INVALID_TOTP_CODE = "invalid_totp_code"
    SIGN_IN_REFUSED = "sign_in_refused"
    SSO_REFUSED = "sso_refused"
    LINK_NOT_VALID = "link_not_valid"
    LINK_REFUSED = "link_refused"
    # The server
    SHUTTING_DOWN = "shutting_down"
    ERROR = "error"


# The API's request text: `CleanStr` (no NUL character, which PostgreSQL cannot store), with its
# rule in the document too, so a client knows before sending. Not on CleanStr itself: the
# tools' input schemas, which the model reads at every turn, stay as short as they are.
ApiText = Annotated[CleanStr, Field(json_schema_extra={"pattern": r"^[^\x00]*$"})]


class ErrorDetails(BaseModel):
    """What went wrong, for a person (`hint`) and for a program (the other keys, which depend
    on the code: `fields`, `needed`, `state`, `ids`, …)."""

    model_config = ConfigDict(extra="allow")

    hint: str = Field(description="What went wrong and how to correct it, in a sentence.")
    fields: dict[str, str] | None = Field(
        default=None, description="Each offending field (a dotted path) and what was expected of it.")


class ErrorAnswer(BaseModel):
    """The body of every refusal: branch on `error`, show `details.hint`."""

    error: ErrorCode
    details: ErrorDetails


@dataclass(frozen=True)
class Refusal:
    """One way a route can refuse: its status, its `error` code, when it happens, and the
    response headers it carries."""

    status: int
    code: ErrorCode
    when: str
    headers: tuple[str, ...] = ()


HEADERS: dict[str, dict[str, Any]] = {
    "WWW-Authenticate": {"description": "`Bearer`: the scheme the API takes.", "schema": {"type": "string"}},
    "Retry-After": {"description": "Seconds to wait before trying again.", "schema": {"type": "integer", "minimum": 0}},
    "Idempotent-Replayed": {
        "description": "`true` when this is the kept answer of an earlier request with the same `Idempotency-Key`.",
        "schema": {"type": "string", "enum": ["true"]},
    },
}

UNAUTHORIZED = Refusal(401, ErrorCode.UNAUTHORIZED, "no credential, or one the desk does not know (revoked, "
                       "its person disabled)", ("WWW-Authenticate",))
FORBIDDEN = Refusal(403, ErrorCode.FORBIDDEN, "a known credential that may not call this route; `details.needed` "
                    "names the role, or `api.key`")
NOT_FOUND = Refusal(404, ErrorCode.NOT_FOUND, "what the path (or the body) names does not exist")
INVALID_JSON = Refusal(400, ErrorCode.INVALID_JSON, "the body is not JSON")
BODY_TOO_LARGE = Refusal(413, ErrorCode.BODY_TOO_LARGE, "the body is larger than `server.max_body`")
UNSUPPORTED_MEDIA_TYPE = Refusal(415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, "the request is not sent as "
                                 "`Content-Type: application/json`")
INVALID_REQUEST = Refusal(422, ErrorCode.INVALID_REQUEST, "a parameter or body field is missing, unknown or "
                          "wrong; `details.fields` names each")
SHUTTING_DOWN = Refusal(503, ErrorCode.SHUTTING_DOWN, "the server is stopping; poll again (it, once restarted, "
                        "or another instance answers)", ("Retry-After",))
# Retrying safely: the answers of a POST sent with Idempotency-Key (bot/web/idempotency.py)
INVALID_IDEMPOTENCY_KEY = Refusal(400, ErrorCode.INVALID_IDEMPOTENCY_KEY, "the `Idempotency-Key` is not 1–255 "
                                  "printable ASCII characters")
IDEMPOTENCY_KEY_REUSED = Refusal(422, ErrorCode.IDEMPOTENCY_KEY_REUSED, "the `Idempotency-Key` was used for "
                                 "another path or body")
IDEMPOTENCY_KEY_IN_PROGRESS = Refusal(409, ErrorCode.IDEMPOTENCY_KEY_IN_PROGRESS, "the first request with this "
                                      "`Idempotency-Key` is still running", ("Retry-After",))
REQUEST_APPLIED_ANSWER_LOST = Refusal(409, ErrorCode.REQUEST_APPLIED_ANSWER_LOST, "the first request with this "
                                      "`Idempotency-Key` took effect and its answer was lost; `details.ids` names "
                                      "what it changed: read it, do not send it again")
# A route's own (declared in its decorator with `refusals(…)`)
HANDOFF_NOT_ACTIVE = Refusal(409, ErrorCode.HANDOFF_NOT_ACTIVE, "the handoff is not active (`details.state`)")
INVALID_RETURN_VALUES = Refusal(422, ErrorCode.INVALID_RETURN_VALUES, "a returned value does not fit its field, "
                                "or names a field the handoff never asked for")
APPROVAL_NOT_PENDING = Refusal(409, ErrorCode.APPROVAL_NOT_PENDING, "the approval was decided already, expired "
                               "or was cleared")
APPROVAL_ALREADY_COUNTED = Refusal(409, ErrorCode.APPROVAL_ALREADY_COUNTED, "this person's vote is counted already")
APPROVAL_NEEDS_IDENTITY = Refusal(403, ErrorCode.APPROVAL_NEEDS_IDENTITY, "two people must approve, and the "
                                  "agent's key counts as nobody")
APPROVAL_NEEDS_A_PERSON = Refusal(403, ErrorCode.APPROVAL_NEEDS_A_PERSON, "the action needs a person's vote")
USER_ACTION_NOT_PENDING = Refusal(409, ErrorCode.USER_ACTION_NOT_PENDING, "the user action is over")
INVALID_AVAILABILITY = Refusal(422, ErrorCode.INVALID_AVAILABILITY, "the availability asked for cannot be set "
                               "(an `until` that has passed)")

EVERY_ROUTE = (UNAUTHORIZED, FORBIDDEN, INVALID_REQUEST)
NAMED_IN_PATH = (NOT_FOUND,)
READS_A_BODY = (INVALID_JSON, BODY_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE)
KEYED = (INVALID_IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_REUSED, IDEMPOTENCY_KEY_IN_PROGRESS, REQUEST_APPLIED_ANSWER_LOST)

Responses = dict[int | str, dict[str, Any]]


def refusals(*found: Refusal) -> Responses:
    """FastAPI's `responses=` for these refusals: one entry per status, the `ErrorAnswer` body,
    a description listing each code with when it happens, and the headers any of them carries."""
    answers: Responses = {}
    for status in sorted({r.status for r in found}):
        these = [r for r in found if r.status == status]
        headers = {name: HEADERS[name] for r in these for name in r.headers}
        answers[status] = {
            "model": ErrorAnswer,
            "description": "; ".join(f"`{r.code}`: {r.when}" for r in these) + ".",
            **({"headers": headers} if headers else {}),
        }
    return answers


def json_refusals(*found: Refusal) -> Responses:
    """`refusals` for a route whose own answer is not JSON (/metrics): FastAPI would file the
    `ErrorAnswer` under the route's media type, and the refusals are JSON all the same."""
    json_body = {"application/json": {"schema": {"$ref": f"#/components/schemas/{ErrorAnswer.__name__}"}}}
    return {status: {**{k: v for k, v in answer.items() if k != "model"}, "content": json_body}
            for status, answer in refusals(*found).items()}


def merged(common: Responses, own: Responses) -> Responses:
    """The route's own answers over the common ones; two refusals of one status are one entry
    whose description lists both."""
    answers = dict(common)
    for status, answer in own.items():
        before = answers.get(status)
        if before is None or "model" not in answer or before.get("model") is not answer.get("model"):
            answers[status] = {**(before or {}), **answer}
            continue
        answers[status] = {
            **before, **answer,
            "description": f"{before['description'][:-1]}; {answer['description']}",
            "headers": {**before.get("headers", {}), **answer.get("headers", {})},
        }
        if not answers[status]["headers"]:
            del answers[status]["headers"]
    return answers


class SecuredBy(ABC):
    """A route's dependency that decides who may call it, and says so in the document: the
    security requirements it accepts (alternatives, each `{scheme: []}`)."""

    @abstractmethod
    async def __call__(self, request: Request) -> object:
        """The check, as FastAPI runs a dependency: the caller, or the refusal it raises."""

    @abstractmethod
    def security(self) -> list[dict[str, list[str]]]: ...


class Scheme(StrEnum):
    """The credentials the desk takes, by their names in the document."""

    AGENT_KEY = "agentKey"
    OWNER_TOKEN = "ownerToken"
    PERSONAL_TOKEN = "personalToken"
    METRICS_TOKEN = "metricsToken"


SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    Scheme.AGENT_KEY: {
        "type": "http", "scheme": "bearer",
        "description": "`api.key`: the AI agent's side (the webhook bot, DeskClient, the MCP bridge). A desk without "
                       "`api.key` leaves the agent's routes open (fine on 127.0.0.1 only).",
    },
    Scheme.OWNER_TOKEN: {
        "type": "http", "scheme": "bearer",
        "description": "`owner.token`: the owner's service identity (admin role, not a person).",
    },
    Scheme.PERSONAL_TOKEN: {
        "type": "http", "scheme": "bearer", "bearerFormat": "hdp_…",
        "description": "A person's own API token, made at /inbox/tokens: that person, with the token's role.",
    },
    Scheme.METRICS_TOKEN: {
        "type": "http", "scheme": "bearer",
        "description": "`metrics.token`, asked by /metrics when one is set.",
    },
}


class DocumentedRoute(APIRoute):
    """The route class of the API's routers: declares the refusals every route of its kind can
    give (above), and the security its `SecuredBy` dependency accepts."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        methods = {m.upper() for m in options.get("methods") or ()}
        common = [*EVERY_ROUTE, *(NAMED_IN_PATH if "{" in path else ()), *(READS_A_BODY if "POST" in methods else ())]
        answers = merged(refusals(*common), options.get("responses") or {})
        options["responses"] = dict(sorted(answers.items(), key=lambda item: str(item[0])))
        super().__init__(path, endpoint, **options)
        security = [guard.security() for d in self.dependant.dependencies if isinstance(guard := d.call, SecuredBy)]
        if security:
            self.openapi_extra = {**(self.openapi_extra or {}), "security": security[0]}


def link(method: str, path: str, description: str, **parameters: str) -> dict[str, Any]:
    """An OpenAPI link to the operation `method path`, its parameters taken from this answer
    (runtime expressions such as `$response.body#/conversation_id`): how a client, and
    Schemathesis's stateful phase, goes from what was created to where it is read."""
    pointer = path.replace("~", "~0").replace("/", "~1")
    return {"operationRef": f"#/paths/{pointer}/{method.lower()}", "parameters": parameters, "description": description}


class DeskApi(FastAPI):
    """The app, whose OpenAPI document also carries the security schemes the routes name (FastAPI
    puts there only those of its own `Security` dependencies)."""

    def openapi(self) -> dict[str, Any]:
        fresh = self.openapi_schema is None
        document = super().openapi()
        if fresh:
            document.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
        return document
