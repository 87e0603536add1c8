"""The `Idempotency-Key` header of the API's POST routes: a retry gets the first answer again.

`keyed_routes(guard_of)` is the route class of a router whose POSTs create or change
something; `guard_of(route)` is the check of who may call that route (bot/web/api.py's
`declared_needs`: the route's own `api_needs`). A request without the header runs exactly as
before (one header lookup more). With it, the request is checked by the route's guard (the
caller and body type, as the route itself would), then:

- a key that is not 1–255 printable ASCII characters: 400 naming the header;
- its first use: the route runs under `committed_with`, so the key is marked applied in the
  very transaction of the route's change (bot/domain/idempotency.py says why that is what
  makes a retry after a crash safe); then its answer is kept. A 5xx, which invites a retry,
  is not kept: the key is dropped (or, when the change had committed, left saying so);
- a retry with the same method, path and body: the kept answer, byte for byte, with
  `Idempotent-Replayed: true`;
- the same key for another request: 422 `idempotency_key_reused`;
- the first request still running: 409 `idempotency_key_in_progress`, `Retry-After: 1`;
- the first request took effect but the instance running it stopped before answering:
  409 `request_applied_answer_lost`, with the ids the change named.

The scope of a key is the route's template, its method and a digest of the caller's bearer
token, so two clients' keys never meet and a key never crosses routes.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from bot.domain.idempotency import (
    Answered,
    AnswerLost,
    Claimed,
    IdempotencyKeys,
    InProgress,
    KeyedRequest,
    Reused,
)
from bot.errors import error_body
from bot.runtime.effects import committed_with
from bot.web.contract import HEADERS, KEYED, DocumentedRoute, merged, refusals
from bot.web.deps import idempotency_of

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
# The API's path parameters (bot/web/api.py) under the names its answers give them.
_ID_NAMES = {"cid": "conversation_id", "sid": "handoff_session_id", "aid": "approval_id", "uaid": "user_action_id",
             "name": "tool"}

_HEADER_PARAMETER = {
    "name": HEADER, "in": "header", "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH, "pattern": "^[ -~]+$"},
    "description": "A new value per request (a UUID); a retry with the same key and body gets the first answer again.",
}

Guard = Callable[[Request], Awaitable[object]]  # raises the refusal (an ApiError) of a caller it refuses
Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def keyed_routes(guard_of: Callable[[APIRoute], Guard]) -> type[APIRoute]:
    """The route class of a router whose routes are each guarded by `guard_of(route)`: its POST
    routes take `Idempotency-Key`, and their documents say so (the header, the refusals above,
    `Idempotent-Replayed` on a replayed answer)."""

    class KeyedRoute(DocumentedRoute):
        def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
            if "POST" in (options.get("methods") or ()):  # shown on the OpenAPI page (/api/docs)
                extra = dict(options.get("openapi_extra") or {})
                extra["parameters"] = [*extra.get("parameters", []), _HEADER_PARAMETER]
                options["openapi_extra"] = extra
                success = options.get("status_code") or 200
                own = options.get("responses") or {}
                replayed = {success: {**own.get(success, {}), "headers": {REPLAYED: HEADERS[REPLAYED]}}}
                options["responses"] = merged(refusals(*KEYED), {**own, **replayed})
            super().__init__(path, endpoint, **options)

        def get_route_handler(self) -> Handler:
            run = super().get_route_handler()
            if "POST" not in (self.methods or ()):
                return run
            scope = f"POST {self.path}"
            guard = guard_of(self)

            async def handle(request: Request) -> Response:
                key = request.headers.get(HEADER)
                if key is None:
                    return await run(request)
                return await _keyed(request, key, scope, guard, run)

            return handle

    return KeyedRoute


def valid_key(key: str) -> bool:
    return 0 < len(key) <= MAX_KEY_LENGTH and all(" " <= c <= "~" for c in key)


def fingerprint(method: str, path: str, query: bytes, body: bytes) -> str:
    """What makes two requests the same one: method, path (with its query) and raw body."""
    digest = hashlib.sha256(f"{method} {path}?".encode())
    digest.update(query + b"\n" + body)
    return digest.hexdigest()


def caller_scope(route: str, authorization: str | None) -> str:
    """The route and, when the caller sent a bearer token, a digest of it (never the token)."""
    if not authorization:
        return route
    return f"{route} caller:{hashlib.sha256(authorization.encode()).hexdigest()[:16]}"


async def _keyed(request: Request, key: str, route: str, guard: Guard, run: Handler) -> Response:
    if not valid_key(key):
        return _refusal(400, "invalid_idempotency_key",
                        f"the {HEADER} header must be 1 to {MAX_KEY_LENGTH} printable ASCII characters")
    await guard(request)  # refused callers leave no key behind
    keys = await idempotency_of(request)
    body = await request.body()  # kept by the request: the route reads it again for free
    begun = await keys.begin(KeyedRequest(
        scope=caller_scope(route, request.headers.get("authorization")), key=key,
        fingerprint=fingerprint(request.method, request.scope["path"], request.scope["query_string"], body),
    ))
    if isinstance(begun, Claimed):
        return await _first_run(request, keys, begun, run)
    if isinstance(begun, Answered):
        return Response(begun.response, begun.status, headers={REPLAYED: "true"}, media_type="application/json")
    if isinstance(begun, Reused):
        return _refusal(422, "idempotency_key_reused",
                        f"this {HEADER} was already used for a different request (another path or body); "
                        "send a new key for a new request")
    if isinstance(begun, InProgress):
        return _refusal(409, "idempotency_key_in_progress",
                        f"the first request with this {HEADER} is still running; retry in a moment",
                        headers={"Retry-After": "1"})
    assert isinstance(begun, AnswerLost)
    return _refusal(409, "request_applied_answer_lost",
                    "this request took effect before a restart, and its answer was not kept: do not send it "
                    "again; read the current state instead (the ids below name what it changed)", ids=begun.ids)


async def _first_run(request: Request, keys: IdempotencyKeys, claim: Claimed, run: Handler) -> Response:
    ids = {_ID_NAMES.get(name, name): str(value) for name, value in request.path_params.items()}
    with committed_with(keys.mark(claim, ids)) as effect:
        try:
            response = await _answer_of(request, run)
        except BaseException:
            await keys.let_go(claim, applied=effect.applied)
            raise
    body = getattr(response, "body", None)
    if response.status_code >= 500 or not isinstance(body, bytes):
        await keys.let_go(claim, applied=effect.applied)
    else:
        await keys.answer(claim, response.status_code, body.decode())
    return response


async def _answer_of(request: Request, run: Handler) -> Response:
    """The route's answer, errors included: the app's exception handlers turn what the route
    raised into the answer the client gets (and a retry must get again). What no handler
    takes propagates, a 500."""
    try:
        return await run(request)
    except Exception as error:
        handlers = request.app.exception_handlers
        handler = next((handlers[kind] for kind in type(error).__mro__ if kind in handlers), None)
        if handler is None:
            raise
        response = handler(request, error)
        answer: Response = await response if inspect.isawaitable(response) else response
        return answer


def _refusal(status: int, code: str, hint: str, *, headers: dict[str, str] | None = None, **details: Any) -> JSONResponse:
    return JSONResponse(error_body(code, hint, **details), status, headers=headers)
