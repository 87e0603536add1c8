"""Request bodies over the size a surface takes are refused with 413 before a route reads them.

Without a bound, one client can make a route buffer a body as large as it likes: Starlette
reads a JSON or form body whole into memory before any validation runs. Each surface gets the
size its real callers need (`server.max_body` for `/api/`, the web chat's API and provider
webhooks; `server.max_form_body` for every other path, which takes only form posts from pages):

- a declared `Content-Length` above the limit is answered at once, and nothing of the body
  is read;
- a body sent without a length (chunked) is counted as it arrives, and the 413 goes out as
  soon as it passes the limit; the route is told the client went away, so it never sees the
  rest, and whatever it answers after that is dropped.

The answer is the API's usual error body, `{"error": "body_too_large", "details": {"hint"}}`,
with `Connection: close`, since the rest of the body is not worth reading.

This is pure ASGI, not Starlette's BaseHTTPMiddleware: it runs on every request, and a request
without a body (no `Content-Length`, not chunked: HTTP/1.1, which is all uvicorn speaks, frames
a body only so) or with a declared length within the limit goes through untouched, at the cost
of one look at its headers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.config import format_size
from bot.errors import error_body

# Paths whose callers are programs sending JSON (or a provider's form-encoded call); every
# other path is a page, which takes form posts only.
PROGRAM_SURFACES = ("/api/", "/webhooks/", "/chat/api/")


@dataclass(frozen=True)
class Surface:
    """What one kind of path takes: its largest body, and the 413 body that says so."""

    most: int
    refusal: bytes

    @classmethod
    def of(cls, most: int, what: str, key: str) -> Surface:
        hint = f"the request body is larger than {format_size(most)}, the most {what} takes ({key})"
        return cls(most, json.dumps(error_body("body_too_large", hint)).encode())

    async def refuse(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(self.refusal)).encode()),
            (b"connection", b"close"),
        ]})
        await send({"type": "http.response.body", "body": self.refusal})


class BodyLimit:
    """The ASGI middleware; `max_body` bounds the program surfaces, `max_form_body` the pages."""

    def __init__(self, app: ASGIApp, *, max_body: int, max_form_body: int) -> None:
        self.app = app
        self.programs = Surface.of(max_body, "/api/, the web chat's API or a webhook", "server.max_body")
        self.pages = Surface.of(max_form_body, "a form post", "server.max_form_body")

    def surface_for(self, path: str) -> Surface:
        return self.programs if path.startswith(PROGRAM_SURFACES) else self.pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: bytes | None = None
        chunked = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
            elif name == b"transfer-encoding":
                chunked = True
        if declared is None and not chunked:
            await self.app(scope, receive, send)  # no body
            return
        surface = self.surface_for(scope["path"])
        if declared is not None and not chunked:
            if declared.isdigit() and int(declared) > surface.most:
                await surface.refuse(send)
            else:  # the server hands over no more than it declared (and refuses a length that is no number)
                await self.app(scope, receive, send)
            return
        await _Counted(self.app, surface, receive, send).run(scope)


class _Counted:
    """One request whose body arrives without a length: counted as the route reads it."""

    def __init__(self, app: ASGIApp, surface: Surface, receive: Receive, send: Send) -> None:
        self.app, self.surface, self._receive, self._send = app, surface, receive, send
        self.received = 0
        self.refused = False  # the body was cut off: the route's answer is dropped
        self.started = False  # the route began its answer (then no 413 can go out)

    async def run(self, scope: Scope) -> None:
        try:
            await self.app(scope, self.receive, self.send)
        except Exception:
            if not self.refused:
                raise
            # The route failed on the body we cut off (a parse error, a disconnect): the client
            # has its 413 already.

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.surface.most:
                self.refused = True
                if not self.started:
                    await self.surface.refuse(self._send)
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        self.started = True
        await self._send(message)
