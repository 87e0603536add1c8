"""A fake OpenAI-compatible server on 127.0.0.1: `POST /v1/chat/completions`.

It stands in for the model provider (the far side of the real `openai` client). Each test
scripts the answers — a reply, tool calls, or an HTTP error with headers — and reads back
every request the client sent. It is strict where servers are: the bearer key, the request
shape (`model`, `messages`, well-formed `tools`), and tool results that answer a call.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fake_server import LocalHttpServer


@dataclass
class Failure:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "Rate limit reached"


class FakeOpenAI(LocalHttpServer):
    def __init__(self, *, api_key: str | None = "sk-test-key", model: str = "test-model") -> None:
        super().__init__()
        self.api_key, self.model = api_key, model
        self.requests: list[dict[str, Any]] = []
        self._script: deque[dict[str, Any] | Failure] = deque()
        self._ids = itertools.count(1)
        self.base_url = ""

    async def start(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        port = await self._serve(app)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        await self._stop_serving()

    # ------------------------------------------------------------------ scripting

    def reply(self, text: str) -> None:
        self._script.append({"content": text})

    def call(self, name: str, arguments: dict[str, Any] | str, content: str | None = None) -> None:
        """The model calls one tool (arguments as a dict, or a raw string to send broken JSON)."""
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        self._script.append({"content": content, "tool_calls": [
            {"id": f"call_{next(self._ids)}", "type": "function", "function": {"name": name, "arguments": raw}},
        ]})

    def calls(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        """The model calls several tools at once (parallel tool calls)."""
        self._script.append({"content": None, "tool_calls": [
            {"id": f"call_{next(self._ids)}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for name, args in calls
        ]})

    def fail(self, status: int, **headers: str) -> None:
        self._script.append(Failure(status, headers))

    def tool_results(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]

    # ------------------------------------------------------------------ the API

    async def _completions(self, request: web.Request) -> web.Response:
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided", "invalid_api_key")
        body = await request.json()
        self.requests.append(body)
        problem = _malformed(body)
        if problem:
            return _error(400, problem, "invalid_request_error")
        if not self._script:
            return _error(500, "the test did not script an answer", "server_error")
        step = self._script.popleft()
        if isinstance(step, Failure):
            return _error(step.status, step.message, "rate_limit_exceeded", step.headers)
        calls = step.get("tool_calls")
        return web.json_response({
            "id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion", "created": 1_800_000_000,
            "model": body["model"],
            "choices": [{
                "index": 0, "finish_reason": "tool_calls" if calls else "stop",
                "message": {"role": "assistant", "content": step.get("content"), **({"tool_calls": calls} if calls else {})},
            }],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })


def _malformed(body: dict[str, Any]) -> str | None:
    if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return "model and messages are required"
    for tool in body.get("tools", []):
        function = tool.get("function", {})
        if tool.get("type") != "function" or not function.get("name") or function.get("parameters", {}).get("type") != "object":
            return f"invalid tool definition: {tool!r}"
    answered = {m.get("tool_call_id") for m in body["messages"] if m.get("role") == "tool"}
    asked = {c["id"] for m in body["messages"] if m.get("role") == "assistant" for c in m.get("tool_calls", [])}
    if asked != answered:
        return "every tool call needs exactly one tool message answering it"
    return None


def _error(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": code, "code": code}}, status=status, headers=headers)
