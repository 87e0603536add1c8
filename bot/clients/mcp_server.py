"""`handoff mcp`: the desk's tools over the Model Context Protocol, for Claude Desktop and
any other MCP client.

This is a bridge, not a second desk: every tool call goes through `DeskClient` to a running
desk's HTTP API, so the desk validates, audits and dispatches exactly as it does for any
other agent, and several desk instances on one database need nothing new. What the bridge
guards against:

- a stale channel list: tool schemas are fetched from the desk on every `tools/list`
  (never cached by the client: `ttl_ms=0`), so `channel_id` stays the enum of the channels
  that can deliver now;
- a model that fakes progress: a desk tool's result is handed back as the desk wrote it
  (plus the conversation id); tool-level errors come back with `isError` and the desk's hint,
  so the model can correct itself;
- the recipient's form link reaching the model: `handoff_status` returns the state and the
  returned data, never the signed `form_url` that only the recipient may use;
- a silent misconfiguration: a refused API key or an unreachable desk is an error that names
  `--url` / `--api-key`, not an empty tool list.

Each MCP session is one desk conversation, created on first use: the stdio process serves one
client, and on streamable HTTP each `Mcp-Session-Id` gets its own. Requests without a session
(stateless 2026-era HTTP clients) get a fresh conversation per call and should pass back the
`conversation_id` every result carries. Any tool also takes an optional `conversation_id` to
act on an existing conversation, e.g. a sibling agent serving a handoff.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import httpx
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.clients.client import DeskApiError, DeskClient
from bot.errors import error_body
from bot.runtime.bounded import BoundedDict
from bot.tools import errors_result, model_schema

# Tool names and ids become URL path segments of the desk's API: one segment each, or a name
# such as "../../handoffs/h_1/release" would reach an endpoint the bridge never offers.
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
CONVERSATION_ID_SCHEMA = {
    "type": "string", "pattern": ID_PATTERN,
    "description": "Optional: act on this existing desk conversation instead of this session's own "
    "(e.g. the conversation a sibling agent serves, or the conversation_id an earlier result returned).",
}
MAX_SESSIONS = 10_000  # remembered session → conversation pairs (oldest forgotten first)
STATELESS = ""  # session key of a request that belongs to no MCP session

# Returned by handoff_status: everything the agent may know. Not form_url (the recipient's
# signed link), nor the recipient-facing summary fields it wrote itself.
STATUS_FIELDS = (
    "handoff_session_id", "conversation_id", "state", "channel_id", "channel_label", "estimated_response",
    "release_reason", "outcome", "note", "returned", "missing_required", "failure",
)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class HandoffStatusInput(_Input):
    handoff_session_id: str = Field(pattern=ID_PATTERN, description="The handoff_session_id handoff_request returned.")


class ConversationMessagesInput(_Input):
    after: int = Field(default=0, ge=0, description="Only messages with a larger id (the last id you have seen).")
    wait: float = Field(default=0, ge=0, le=30, description="Wait up to this many seconds for a new message (long poll).")
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN, description=CONVERSATION_ID_SCHEMA["description"])


BRIDGE_TOOLS: dict[str, tuple[type[_Input], str]] = {
    "handoff_status": (HandoffStatusInput, (
        "The state of a handoff you requested: dispatching, active (a person has the conversation), released "
        "or failed; once released, why (form, release_token, agent, owner, idle_timeout), the outcome, the data "
        "the person returned and any required fields they left missing."
    )),
    "conversation_messages": (ConversationMessagesInput, (
        "The messages of this conversation (roles: subscriber, agent, human, system), oldest first. During a "
        "handoff, read the person's replies here; after release, the [Bot resumed — …] system message carries "
        "the returned data. Pass `after` = the last id you have seen to get only new ones."
    )),
}

INSTRUCTIONS = (
    "Handoff Desk: hand this conversation to a person (or a sibling agent) and get their answer back. "
    "Call handoff_request when the user needs a human; its channel_id must be one of the listed channels. "
    "While the handoff is active the person answers in the conversation: read it with conversation_messages "
    "and check handoff_status until it is released, then continue with the returned data."
)


def _server_version() -> str:
    try:
        return version("handoff-desk")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0"


class McpBridge:
    """One MCP server in front of one desk. `desk` is a `DeskClient`; `url` only names the
    desk in error messages."""

    def __init__(
        self, desk: DeskClient, *, url: str, subscriber_name: str | None = None, subscriber_email: str | None = None,
    ) -> None:
        self.desk, self.url = desk, url
        self.subscriber_name, self.subscriber_email = subscriber_name, subscriber_email
        self._conversations: BoundedDict[str, str] = BoundedDict(MAX_SESSIONS, refresh_on_read=True)
        self._creating = anyio.Lock()
        self._schemas: dict[str, dict[str, Any]] = {}
        self.server: Server[Any] = Server(
            "handoff-desk", version=_server_version(), title="Handoff Desk", instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools, on_call_tool=self._call_tool, get_tool_input_schema=self._schemas.get,
        )

    # ------------------------------------------------------------------ conversations

    @staticmethod
    def _session_key(ctx: ServerRequestContext[Any]) -> str:
        request = ctx.request  # the HTTP request (streamable HTTP), None on stdio
        if request is None:
            return "local"  # stdio (or in-process): this server serves exactly one client
        return str(request.headers.get("mcp-session-id") or STATELESS)

    async def _conversation(self, ctx: ServerRequestContext[Any], *, listing: bool = False) -> str:
        """This session's conversation, created on first use. A request outside any session
        shares one conversation for listing tools, and gets a new one to act in."""
        key = self._session_key(ctx)
        if key == STATELESS and not listing:
            return await self._create_conversation()
        async with self._creating:
            cid = self._conversations.get(key)
            if cid is None:
                cid = self._conversations[key] = await self._create_conversation()
            return cid

    async def _create_conversation(self) -> str:
        return await self.desk.create_conversation(name=self.subscriber_name, email=self.subscriber_email)

    # ------------------------------------------------------------------ tools/list

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        try:
            specs = await self.desk.tools(await self._conversation(ctx, listing=True), format="plain")
        except (DeskApiError, httpx.HTTPError) as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=self._desk_problem(exc)) from None
        tools = [types.Tool(name=s["name"], description=s["description"], input_schema=_with_conversation_id(s["input_schema"]))
                 for s in specs]
        for name, (model, description) in BRIDGE_TOOLS.items():
            tools.append(types.Tool(name=name, description=description, input_schema=model_schema(model)))
        self._schemas.clear()
        self._schemas.update({tool.name: tool.input_schema for tool in tools})
        # The channel list changes as channels go up and down: never serve it from a cache.
        return types.ListToolsResult(tools=tools, ttl_ms=0, cache_scope="private")

    # ------------------------------------------------------------------ tools/call

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:
            if params.name in BRIDGE_TOOLS:
                return await self._bridge_tool(ctx, params.name, arguments)
            if not SAFE_ID.fullmatch(params.name):
                return _result(error_body("unknown_tool", f"no tool named {params.name!r}; list the tools to see the names"))
            cid = arguments.pop("conversation_id", None)
            if cid is not None and not (isinstance(cid, str) and SAFE_ID.fullmatch(cid)):
                return _result(error_body("invalid_input", "conversation_id: must be a conversation id such as c_…",
                                          fields={"conversation_id": "must be a conversation id such as c_…"}))
            cid = cid or await self._conversation(ctx)
            result = await self.desk.call_tool(cid, params.name, arguments)
            return _result({**result, "conversation_id": result.get("conversation_id", cid)})
        except (DeskApiError, httpx.HTTPError) as exc:
            return _result(error_body("desk_unavailable" if isinstance(exc, httpx.HTTPError) else exc.code,
                                      self._desk_problem(exc)))

    async def _bridge_tool(self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        model, _ = BRIDGE_TOOLS[name]
        try:
            args = model.model_validate(arguments)
        except ValidationError as exc:
            return _result(errors_result(exc.errors(include_url=False, include_input=False)))
        if isinstance(args, HandoffStatusInput):
            view = (await self.desk.handoff(args.handoff_session_id)).model_dump(mode="json")
            return _result({key: view.get(key) for key in STATUS_FIELDS})
        assert isinstance(args, ConversationMessagesInput)
        if args.conversation_id is None and self._session_key(ctx) == STATELESS:
            hint = "conversation_id: required without an MCP session; pass the conversation_id an earlier result returned"
            return _result(error_body("invalid_input", hint, fields={"conversation_id": "is required without an MCP session"}))
        cid = args.conversation_id or await self._conversation(ctx)
        messages = await self.desk.messages(cid, after=args.after, wait=args.wait or None)
        last_id = messages[-1].id if messages else args.after
        return _result({"conversation_id": cid, "messages": [m.model_dump(mode="json") for m in messages],
                        "last_id": last_id})

    def _desk_problem(self, exc: DeskApiError | httpx.HTTPError) -> str:
        if isinstance(exc, httpx.HTTPError):
            return (f"cannot reach the desk at {self.url} ({type(exc).__name__}: {exc}); "
                    "check --url and that `handoff serve` is running there")
        if exc.status == 401:
            return (f"the desk at {self.url} refused the API key ({exc.hint}); "
                    "pass the desk's api.key with --api-key or the HANDOFF_API_KEY environment variable")
        return f"the desk at {self.url} answered {exc.status} {exc.code}: {exc.hint}"


def _with_conversation_id(schema: dict[str, Any]) -> dict[str, Any]:
    """The desk tool's schema plus the bridge's optional `conversation_id` (a name the bridge
    reserves: it is taken off the arguments before the desk sees them)."""
    return {**schema, "properties": {**schema.get("properties", {}), "conversation_id": CONVERSATION_ID_SCHEMA}}


def _result(data: dict[str, Any]) -> types.CallToolResult:
    """A tool result as JSON text (what every client shows the model) and structured content."""
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(data, ensure_ascii=False))],
        structured_content=data, is_error="error" in data,
    )


# --------------------------------------------------------------------------- running


async def serve_stdio(bridge: McpBridge) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await bridge.server.run(read_stream, write_stream, bridge.server.create_initialization_options())


def http_app(bridge: McpBridge, *, host: str = "127.0.0.1") -> Any:
    """The streamable-HTTP MCP endpoint at /mcp (a Starlette app; its lifespan runs the sessions).
    On a loopback host the SDK also checks Host and Origin (DNS-rebinding protection)."""
    return bridge.server.streamable_http_app(streamable_http_path="/mcp", host=host)
