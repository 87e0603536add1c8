"""The API's contract (bot/web/contract.py): what the desk answers is what its OpenAPI document says.

- Schemathesis runs against a real `handoff serve --config config.example.yaml` (with an
  api.key, an owner token and a metrics token, as a deployed desk has them), every check and
  every phase, the stateful one following the document's links from a created conversation to
  its reads: no failure, and not one 5xx among the requests it sent.
- The committed docs/openapi.json is the document the desk serves, so a change to the API
  shows in review (refresh it with the command in docs/development.md).
- Every `error` code the desk's typed errors and its routes use is in the document's enum.
- A 405 names every method the path takes (`Allow`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import bot.desk  # noqa: F401  (imports every layer, so every DeskError subclass is defined)
import channels
from bot.errors import DeskError
from bot.web.contract import ErrorCode
from tests.conftest import Harness
from tests.test_docs_reference import hooks
from tests.test_readme import served_desk

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "docs" / "openapi.json"
SCHEMATHESIS_CONFIG = ROOT / "tests" / "schemathesis.toml"
SEED = 20261207
EXAMPLES = 20  # per operation and phase: about 1,200 requests, 20–30 s
CREDENTIALS = {
    "HANDOFF_API_KEY": "contract-agent-key-0123456789",
    "HANDOFF_OWNER_TOKEN": "contract-owner-token-0123456789",
    "HANDOFF_METRICS_TOKEN": "contract-metrics-token-0123456789",
}


def served_document() -> str:
    """The document as `handoff serve --config config.example.yaml` serves it, in the committed
    file's form (sorted keys, indented)."""
    return json.dumps(hooks().openapi_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_the_committed_document_is_the_served_one() -> None:
    assert COMMITTED.read_text() == served_document(), (
        "docs/openapi.json is not the API the desk serves: refresh it with "
        "`python -m tests.test_contract > docs/openapi.json` (docs/development.md) and review the change")


def test_every_error_code_the_desk_uses_is_in_the_enum() -> None:
    """The core's typed errors (every DeskError subclass, the channels' and forms' included)
    and every refusal the web layer words itself."""
    for kind in channels.known_kinds():
        channels.adapter_class(kind)  # each adapter module, with its errors
    subclasses: list[type[DeskError]] = [DeskError]
    for kind in subclasses:
        subclasses.extend(kind.__subclasses__())
    codes = {kind.code for kind in subclasses}
    written = ROOT / "bot" / "web"
    for path in [*written.rglob("*.py"), ROOT / "bot" / "errors.py"]:
        text = path.read_text()
        codes |= set(re.findall(r'ApiError\(\s*\d{3},\s*"([A-Za-z_]+)"', text))
        codes |= set(re.findall(r'(?:_refusal|super\(\).__init__)\(\s*\d{3},\s*"([A-Za-z_]+)"', text))
        codes |= set(re.findall(r'error_body\(\s*"([A-Za-z_]+)"', text))
        codes |= set(re.findall(r'\d{3}: "([a-z_]+)"', text))  # the handler's status → code table
    assert codes - {code.value for code in ErrorCode} == set()
    assert {"unauthorized", "body_too_large", "idempotency_key_reused", "method_not_allowed"} <= codes  # the scan reads


def test_every_route_of_the_document_declares_its_refusals_with_the_envelope() -> None:
    schema = hooks().openapi_schema()
    envelope = {"$ref": "#/components/schemas/ErrorAnswer"}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            answers = operation["responses"]
            if path.startswith("/api/"):
                assert {"401", "403", "422"} <= set(answers), (method, path)
                assert operation["security"], (method, path)
            if method == "post":
                assert {"400", "413", "415", "409"} <= set(answers), (method, path)
                assert operation["requestBody"]["required"] is True, (method, path)
                assert "Idempotent-Replayed" in answers[next(s for s in answers if s.startswith("2"))]["headers"]
            for status, answer in answers.items():
                if status.startswith(("4", "5")) and path != "/healthz":
                    assert answer["content"]["application/json"]["schema"] == envelope, (method, path, status)
    assert "/webhooks/{channel_id}" not in schema["paths"]  # left out on purpose (docs/api.md)
    assert set(schema["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    assert set(schema["components"]["securitySchemes"]) == {"agentKey", "ownerToken", "personalToken", "metricsToken"}
    codes = schema["components"]["schemas"]["ErrorAnswer"]["properties"]["error"]
    assert schema["components"]["schemas"][codes["$ref"].rsplit("/", 1)[-1]]["enum"] == [c.value for c in ErrorCode]


async def test_a_405_says_which_methods_the_path_takes(harness: Harness) -> None:
    cid = await harness.conversation()
    for method, path, allowed in [
        ("TRACE", f"/api/conversations/{cid}/messages", "GET, POST"),
        ("DELETE", "/api/conversations", "POST"),
        ("PUT", "/metrics", "GET"),
    ]:
        refused = await harness.client.request(method, path)
        assert (refused.status_code, refused.json()["error"]) == (405, "method_not_allowed"), (method, path)
        assert refused.headers["allow"] == allowed, (method, path)


def started_work(desk: str) -> dict[str, str]:
    """A handoff and a user action, started through the API as an agent starts them: their ids,
    for tests/schemathesis.toml's parameters."""
    with httpx.Client(base_url=desk, headers={"Authorization": f"Bearer {CREDENTIALS['HANDOFF_API_KEY']}"}) as api:
        def tool(name: str, arguments: dict[str, object]) -> dict[str, str]:
            cid = api.post("/api/conversations", json={}).json()["conversation_id"]
            answer = api.post(f"/api/conversations/{cid}/tools/{name}", json=arguments)
            assert answer.status_code == 200 and "error" not in answer.json(), answer.text
            return dict(answer.json())

        handoff = tool("handoff_request", {"channel_id": 1, "summary": "Ana's order #1234 is a week late; she wants a person.",
                                           "expected_action": "Look up order #1234 and tell Ana when it arrives."})
        action = tool("request_user_action", {"reason": "captcha", "details": "Solve the captcha on the checkout page"})
    return {"CONTRACT_HANDOFF": handoff["handoff_session_id"], "CONTRACT_USER_ACTION": action["user_action_id"]}


@pytest.mark.timeout(300)  # about half a minute alone; room for a loaded CI machine
def test_schemathesis_finds_nothing_against_a_served_desk(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HANDOFF_")}
    env.update(CREDENTIALS, HANDOFF_DATABASE_URL=f"sqlite:///{tmp_path / 'handoff.db'}", PYTHONPATH=str(ROOT),
               NO_COLOR="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    har = tmp_path / "requests.har"
    with served_desk(ROOT, env) as desk:
        env.update(started_work(desk))
        run = subprocess.run(
            [str(Path(sys.executable).parent / "schemathesis"), "--config-file", str(SCHEMATHESIS_CONFIG), "run",
             f"{desk}/api/openapi.json", "--checks", "all", "--seed", str(SEED), "--max-examples", str(EXAMPLES),
             "--workers", "1", "--no-color", "--report", "har", "--report-har-path", str(har)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)  # its cache stays in tmp_path
    summary = run.stdout[-6000:]
    assert run.returncode == 0, summary + run.stderr[-3000:]
    statuses = [entry["response"]["status"] for entry in json.loads(har.read_text())["log"]["entries"]]
    assert len(statuses) > 500, summary
    assert [s for s in statuses if s >= 500] == [], summary
    assert re.search(r"API Links:\s+(\d+) covered / \1 selected", run.stdout), summary  # the stateful phase followed every link
    assert "generated, " in summary and " passed" in summary


if __name__ == "__main__":  # `python -m tests.test_contract > docs/openapi.json`: refresh the committed document
    sys.stdout.write(served_document())
