"""The ASGI application: the API, the owner inbox, webhooks, health and metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Match

from bot.desk import Desk
from bot.errors import DeskError, error_body
from bot.tools import errors_result
from bot.web.api import ApiError, api, invalid_json, public
from bot.web.approval_pages import router as approval_pages
from bot.web.body_limit import BodyLimit
from bot.web.chat import chat_api
from bot.web.chat import router as chat_page_routes
from bot.web.contract import DeskApi
from bot.web.inbox import inbox, install_inbox_errors
from bot.web.people_api import people_api
from bot.web.reports_page import reports_page
from bot.web.tokens_page import router as tokens_page
from forms.routes import router as form_pages


def create_app(desk: Desk, *, manage_desk: bool = True) -> FastAPI:
    """Build the app around a desk. With `manage_desk` the app starts and stops it."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if manage_desk:
            await desk.start()
        try:
            yield
        finally:
            if manage_desk:
                await desk.stop()

    app = DeskApi(
        title="Handoff Desk",
        version="0.1.0",
        description="Hand a conversation from an AI agent to a person and back.",
        lifespan=lifespan,
        docs_url="/api/docs",
        openapi_url="/api/openapi.json",
        redoc_url=None,
    )
    app.state.desk = desk
    server = desk.config.server
    # The last added runs first: a foreign Host is refused before the body's size is looked at.
    app.add_middleware(BodyLimit, max_body=server.max_body, max_form_body=server.max_form_body)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=server.trusted_hosts())
    # A request tries the routers in the order they are included, and every route of each
    # router before its own (a few µs each), so the hot paths come first: provider webhooks and
    # the health check, the return form, then the API, whose first routes are the conversation
    # and tool calls an agent makes. No two routers share a path, so the order changes nothing
    # else.
    app.include_router(public)
    app.include_router(form_pages)
    app.include_router(api)
    app.include_router(people_api)
    app.include_router(approval_pages)
    app.include_router(chat_api)
    app.include_router(chat_page_routes)
    app.include_router(inbox)
    app.include_router(reports_page)
    app.include_router(tokens_page)
    install_inbox_errors(app)

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(DeskError)
    async def _desk_error(_request: Request, exc: DeskError) -> JSONResponse:
        return JSONResponse(exc.to_json(), status_code=exc.status, headers=exc.headers())

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        broken = next((e for e in exc.errors() if e["type"] == "json_invalid"), None)
        if broken is not None:  # not a wrong value but no JSON at all: 400, as everywhere a body is read
            return invalid_json(f"{broken['ctx']['error']} at position {broken['loc'][-1]}").response()
        # FastAPI prefixes locations with body/query/path; people want the field name.
        errors = [{**e, "loc": tuple(e["loc"][1:]) or tuple(e["loc"])} for e in exc.errors()]
        return JSONResponse(errors_result(errors, code="invalid_request"), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, UnicodeDecodeError):  # FastAPI's 400 for a JSON body that is not UTF-8
            return invalid_json(str(exc.__cause__)).response()
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = {"Allow": allowed_methods(request)} if exc.status_code == 405 else exc.headers
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers)

    return app


METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> str:
    """The `Allow` of a 405 (RFC 9110 asks for it): every method some route takes at this path.
    Starlette's own names only the first route whose path matched, and one path often has a
    route per method (GET and POST …/messages). Each method is asked of the app's router as a
    request would be (through included routers too); only a 405 pays for it."""
    def taken(method: str) -> bool:
        scope = {**request.scope, "method": method}
        return any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes)

    return ", ".join(method for method in METHODS if taken(method))
