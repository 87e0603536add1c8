"""The typed client against the desk's served OpenAPI document (/api/openapi.json), so the
two cannot drift: every call the client makes is a route with those parameters and body
fields; every model has exactly the fields of the answer the route declares (nested models
too); and the desk's real answers, from one story that calls every route, validate against
the declared answers."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from bot.clients import DeskClient, operations
from bot.clients.client import _Base, _Method
from bot.clients.models import (
    Approval,
    Handoff,
    HandoffEvent,
    Message,
    Person,
    PostedMessage,
    Released,
    UserAction,
    UserActionAnswer,
)
from bot.clients.protocol import Call
from bot.config.people import Role
from bot.web.app import create_app
from tests.approval_actions import refund_action
from tests.conftest import Harness, StartDesk
from tests.fakes import ScriptedChannel

OWNER = "owner-token-0123456789abcdef"
KEY = "k-123456789012345678901234"
NOW = "2030-01-01T00:00:00+00:00"

# Each method of the client, called with every optional argument it has (so every query
# parameter and body field it can send is checked).
SAMPLES: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "create_conversation": ((), {"name": "Ana", "email": "ana@example.com", "external_id": "u1",
                                 "serves_handoff_session_id": "hs_1", "background": True, "idempotency_key": "k"}),
    "say": (("c_1", "hi"), {"idempotency_key": "k"}),
    "messages": (("c_1",), {"after": 3, "wait": 1.0, "limit": 10}),
    "tools": (("c_1",), {"format": "openai"}),
    "call_tool": (("c_1", "handoff_request", {"channel_id": 1}), {"idempotency_key": "k"}),
    "handoff": (("hs_1",), {"wait": 1.0}),
    "handoffs": ((), {"state": "active", "limit": 5}),
    "handoff_events": (("hs_1",), {}),
    "release": (("hs_1",), {"outcome": "resolved", "note": "n", "return_values": {"a": 1}, "idempotency_key": "k"}),
    "wait_handoff": (("hs_1",), {"timeout": 5}),
    "approval": (("ap_1",), {"wait": 1.0}),
    "approvals": ((), {"state": "pending", "limit": 5}),
    "decide_approval": (("ap_1", "approve"), {"reason": "ok", "always_allow": True, "decided_by": "Kim", "token": "t"}),
    "wait_approval": (("ap_1",), {"timeout": 5}),
    "user_action": (("ua_1",), {"wait": 1.0}),
    "user_action_step": (("ua_1", "next"), {}),
    "respond_user_action": (("ua_1", "done"), {}),
    "wait_user_action": (("ua_1",), {"timeout": 5}),
    "people": ((), {}),
    "person": (("olga",), {}),
    "set_availability": (("olga",), {"away": True, "note": "lunch", "until": None}),
}

# The answer model of each method, and where in the answer it sits ("messages": a list under that key).
ANSWERS: dict[str, tuple[type[BaseModel], str | None]] = {
    "say": (PostedMessage, None), "messages": (Message, "messages"), "handoff": (Handoff, None),
    "handoffs": (Handoff, "handoffs"), "handoff_events": (HandoffEvent, "events"), "release": (Released, None),
    "wait_handoff": (Handoff, None), "approval": (Approval, None), "approvals": (Approval, "approvals"),
    "decide_approval": (Approval, None), "wait_approval": (Approval, None), "user_action": (UserAction, None),
    "user_action_step": (UserAction, None), "respond_user_action": (UserActionAnswer, None),
    "wait_user_action": (UserAction, None), "people": (Person, "people"), "person": (Person, None),
    "set_availability": (Person, None),
}
NOT_MODELLED = {"create_conversation": "conversation_id", "tools": "tools", "call_tool": None}  # plain values


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
async def document(harness: Harness) -> dict[str, Any]:
    served = await harness.client.get("/api/openapi.json")
    assert served.status_code == 200
    return dict(served.json())


def methods() -> list[str]:
    return [name for name, value in vars(_Base).items() if isinstance(value, _Method)]


def first_call(name: str) -> Call:
    args, kwargs = SAMPLES[name]
    call = next(getattr(operations, name)(*args, **kwargs))
    assert isinstance(call, Call)
    return call


def route_of(document: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]]:
    """The declared operation that serves `method path`: (its path template, the operation)."""
    for template, operations_of in document["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in operations_of:
            return template, operations_of[method.lower()]
    raise AssertionError(f"{method} {path}: no such route in the served OpenAPI document")


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The object schema behind a $ref, an optional (anyOf with null) or both."""
    if "$ref" in schema:
        return resolve(document, document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    options = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
    return resolve(document, options[0]) if len(options) == 1 else schema


def success_schema(document: dict[str, Any], operation: dict[str, Any]) -> dict[str, Any]:
    status = next(s for s in operation["responses"] if s.startswith("2"))
    return dict(operation["responses"][status]["content"]["application/json"]["schema"])


def test_every_method_is_checked() -> None:
    assert sorted(SAMPLES) == sorted(methods())
    assert set(ANSWERS) | set(NOT_MODELLED) == set(methods()) and not set(ANSWERS) & set(NOT_MODELLED)


async def test_every_call_is_a_route_with_those_parameters_and_body_fields(document: dict[str, Any]) -> None:
    for name in methods():
        call = first_call(name)
        _, operation = route_of(document, call.method, call.path)
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert set(call.params) <= declared, f"{name}: query {set(call.params) - declared} not declared"
        if call.method == "POST":
            assert call.key, f"{name}: a change goes with an Idempotency-Key"
            assert "Idempotency-Key" in {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
            if name == "call_tool":
                continue  # a tool's input is the tool's own schema (GET …/tools), not the route's
            body = resolve(document, operation["requestBody"]["content"]["application/json"]["schema"])
            assert set(call.body or {}) <= set(body["properties"]), f"{name}: body {set(call.body or {}) - set(body['properties'])}"


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, in an optional, or in a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (typing.Union, list):
        for inner in typing.get_args(annotation):
            found = model_of(inner)
            if found is not None:
                return found
    return None


def assert_same_fields(document: dict[str, Any], model: type[BaseModel], schema: dict[str, Any], where: str) -> None:
    declared = resolve(document, schema)
    properties = declared.get("properties", {})
    assert set(model.model_fields) == set(properties), (
        f"{where} ({model.__name__}): only in the client {set(model.model_fields) - set(properties)}, "
        f"only in the document {set(properties) - set(model.model_fields)}")
    needed = {name for name, field in model.model_fields.items() if field.is_required()}
    assert needed <= set(declared.get("required", [])), f"{where}: the client requires {needed - set(declared.get('required', []))}"
    for name, field in model.model_fields.items():
        inner = model_of(field.annotation)
        if inner is not None:
            held = resolve(document, properties[name])
            assert_same_fields(document, inner, held.get("items", held), f"{where}.{name}")


async def test_the_models_have_the_fields_of_the_declared_answers(document: dict[str, Any]) -> None:
    for name, (model, key) in ANSWERS.items():
        call = first_call(name)
        template, operation = route_of(document, call.method, call.path)
        answer = resolve(document, success_schema(document, operation))
        if key is not None:
            answer = resolve(document, answer["properties"][key])["items"]
        assert_same_fields(document, model, answer, f"{call.method} {template}")
    for name, key in NOT_MODELLED.items():
        call = first_call(name)
        _, operation = route_of(document, call.method, call.path)
        if key is not None:
            assert key in resolve(document, success_schema(document, operation))["properties"]


class Recorder(httpx.AsyncBaseTransport):
    """The wire to the real app, keeping every successful answer (method, path, JSON)."""

    def __init__(self, app: httpx.ASGITransport) -> None:
        self.app = app
        self.answers: list[tuple[str, str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.app.handle_async_request(request)
        await response.aread()
        if response.status_code < 300:
            self.answers.append((request.method, request.url.path, response.json()))
        return response


async def test_the_desk_answers_as_its_document_declares(start_desk: StartDesk) -> None:
    """One story through every route the client calls, each answer validated against the
    answer its route declares; every declared answer gets at least one real one."""
    harness = await start_desk(
        channels=[{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}, {"id": 2, "kind": "owner_inbox", "label": "Approvers"}],
        actions=[{**refund_action(2, policy="ask_always"), "run": {"by": "agent"}}], adapters={2: ScriptedChannel},
        owner={"token": OWNER}, api={"key": KEY})
    await harness.desk.people.add(pid="olga", name="Olga", email="olga@example.com", role=Role.ADMIN, source="cli", actor="cli")
    wire = Recorder(httpx.ASGITransport(app=create_app(harness.desk, manage_desk=False)))
    async with DeskClient("http://desk.test", api_key=KEY, transport=wire) as desk, \
            DeskClient("http://desk.test", api_key=OWNER, transport=wire) as owner:
        cid = await desk.create_conversation(name="Ana", email="ana@example.com")
        await desk.say(cid, "Where is my order?")
        await desk.messages(cid)
        await desk.tools(cid)
        sid = (await desk.call_tool(cid, "handoff_request", {
            "channel_id": 1, "summary": "Ana wants a refund for order 1234.", "expected_action": "Decide on the refund.",
            "expected_return": [{"name": "decision", "type": "string"}]}))["handoff_session_id"]
        await desk.handoffs(state="active")
        await desk.release(sid, return_values={"decision": "refund"})
        await desk.wait_handoff(sid, timeout=5)
        await desk.handoff_events(sid)
        aid = (await desk.call_tool(cid, "refund_order", {"order_id": "1234", "amount": 20}))["approval_id"]
        await desk.approvals()
        await owner.decide_approval(aid, "approve", decided_by="Kim")
        await desk.wait_approval(aid, timeout=5)
        uaid = (await desk.call_tool(cid, "request_user_action", {
            "reason": "verification_code", "details": "Enter the code we sent to your phone.",
            "steps": [{"instruction": "Open the bank's app"}, {"instruction": "Type the code"}]}))["user_action_id"]
        await desk.user_action_step(uaid, "next")
        await desk.respond_user_action(uaid, "done")
        await desk.wait_user_action(uaid, timeout=5)
        await owner.people()
        await owner.person("olga")
        await owner.set_availability("olga", away=True, note="At lunch")
    document = (await harness.client.get("/api/openapi.json")).json()
    answered: set[tuple[str, str]] = set()
    for method, path, body in wire.answers:
        template, operation = route_of(document, method, path)
        schema = success_schema(document, operation)
        problems = [e.message for e in Draft202012Validator({**schema, "components": document["components"]}).iter_errors(body)]
        assert problems == [], f"{method} {template}: {problems}"
        answered.add((method, template))
    declared = {(method.upper(), path) for path, ops in document["paths"].items() for method, op in ops.items()
                if path.startswith("/api/") and any("$ref" in str(r.get("content", {})) for s, r in op["responses"].items() if s.startswith("2"))}
    assert declared - answered == set()
