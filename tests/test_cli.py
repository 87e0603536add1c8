"""The `handoff` command line, run as a user would run it (a subprocess of the installed script)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def handoff(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}, cwd=cwd or ROOT,
    )


def test_help_lists_the_commands() -> None:
    result = handoff("--help")
    assert result.returncode == 0
    for command in ("serve", "check-config", "db", "demo"):
        assert command in result.stdout


def test_check_config_accepts_the_example() -> None:
    result = handoff("check-config", "config.example.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("config.example.yaml: OK (1 channel(s), 1 front(s), agent: rules, database: sqlite)")
    assert "  fronts[0] (web): http://127.0.0.1:8000/chat, widget http://127.0.0.1:8000/widget.js" in result.stdout
    assert "warning: secret_key: using the development default" in result.stdout


def test_check_config_prints_warnings_apart_from_problems_and_exits_0(tmp_path: Path) -> None:
    module = f"desk_hooks_{tmp_path.name}"
    (tmp_path / f"{module}.py").write_text("def lookup(arguments):\n    return {}\n")
    path = tmp_path / "desk.yaml"
    path.write_text("agent: {kind: openai, model: gpt-4o-mini}\n"
                    "channels: [{id: 1, kind: owner_inbox, label: Inbox}]\n"
                    f"actions: [{{id: lookup, description: Look an order up, policy: none, run: {{callable: '{module}:lookup'}}}}]\n")
    result = handoff("check-config", str(path))  # the callable beside the config is found: no problem
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    head, warnings = result.stdout.split(f"{path}: 4 warning(s):\n")
    assert head.startswith(f"{path}: OK (1 channel(s), 0 front(s), agent: openai")
    assert warnings.splitlines()[-1].startswith("  warning: agent.base_url: not set, so the agent calls OpenAI's hosted API")


def test_check_config_shows_the_yaml_line_and_the_likely_cause(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server:\n  host: 127.0.0.1\n port: 8000\n")
    result = handoff("check-config", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines()[1:] == [
        f"  {path} is not valid YAML: line 3, column 2: expected <block end>, but found '<block mapping start>'; "
        "probably indentation: the keys of one mapping start in the same column, a nested key further right than its parent",
        "      1 | server:",
        "        | ^ started here",
        "      2 |   host: 127.0.0.1",
        "      3 |  port: 8000",
        "        |  ^",
    ]


def test_check_config_names_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "secret_key: 0123456789abcdef0123\n"
        "handoff: {idle_timeout: forever}\n"
        "channels:\n"
        "  - {id: 1, kind: owner_inbox, label: Inbox}\n"
        "  - {id: 2, kind: slak, label: Sales, bot_token: xoxb-SECRET}\n"
    )
    result = handoff("check-config", str(path))
    assert result.returncode == 2
    assert "2 problem(s)" in result.stderr
    assert "  handoff.idle_timeout: expected a duration such as 30m, 90s or 24h, got 'forever'" in result.stderr
    assert "  channels[1].kind: unknown channel kind 'slak'" in result.stderr
    assert "xoxb-SECRET" not in result.stderr + result.stdout


def test_check_config_probe_reports_each_channel() -> None:
    result = handoff("check-config", "config.example.yaml", "--probe")
    assert result.returncode == 0, result.stderr
    assert "channels[0] (owner_inbox 'Owner inbox'): ok, nothing to check" in result.stdout


def test_serve_refuses_a_bad_config(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server: {host: 0.0.0.0}\n")
    result = handoff("serve", "--config", str(path))
    assert result.returncode == 2
    assert "owner.token: required when server.host (0.0.0.0) is reachable from other machines" in result.stderr


def test_db_upgrade_creates_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    result = handoff("db", "upgrade", "--database-url", f"sqlite:///{db}")
    assert result.returncode == 0, result.stderr
    tables = {row[0] for row in sqlite3.connect(db).execute("select name from sqlite_master where type='table'")}
    assert {"conversations", "messages", "handoff_sessions", "handoff_events", "outbox", "inbound_events", "alembic_version"} <= tables
    again = handoff("db", "upgrade", "--database-url", f"sqlite:///{db}")  # idempotent
    assert again.returncode == 0


def test_db_upgrade_with_an_empty_url_and_no_config_says_what_to_give() -> None:
    result = handoff("db", "upgrade", "--database-url", "", env={"HANDOFF_DATABASE_URL": ""})
    assert result.returncode == 2
    assert "give --config FILE or --database-url URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_tells_the_whole_story() -> None:
    result = handoff("demo", "--pause", "0")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    steps = ["Olga Petrova (role: admin) is added to the directory", "Sam Okafor (role: agent) too",
             "Ana opens the chat", "tool call: handoff_request", "What the support team receives", "routed_to: human",
             "Sam Okafor: Hi Ana", "[Bot resumed — the owner released the conversation. Outcome: resolved.",
             "Returned data:", "handoff_request on a route", "Still looking for someone", '"On-call (step 2)"',
             "Olga Petrova claimed it in the inbox", "Olga Petrova from our billing team has joined the conversation.",
             "Olga Petrova: Hi Ben", '"claimed_by": "Olga Petrova"', "the handoff ended after 30 minutes without activity",
             "APPROVAL_PENDING", "Approval needed: may the assistant run refund_order for Ana?", "Needs two people",
             "Olga Petrova presses Approve in the inbox", "waiting for a second person",
             "already counted and counts once", "Sam Okafor approves too, a second person", "[Approval — refund_order was approved and ran",
             "person:olga", "person:sam",
             "HUMAN_HANDOFF_REQUESTED", "I've hidden what looked like a code", "It's [hidden]",
             "[User action — verification_code: the user says it is done", "relayed_to_subscriber    Sam Okafor",
             "handoff_released", "Reports (the figures of /inbox/reports)", "(2 reached, 0 not)", "idle timeout 1, owner 1",
             "not linked to a person"]
    positions = [out.find(step) for step in steps]
    assert all(p >= 0 for p in positions), [s for s, p in zip(steps, positions, strict=True) if p < 0]
    assert positions == sorted(positions)
    report = out[out.find("Reports (the figures of /inbox/reports)"):]
    assert "Olga Petrova" in report and "Sam Okafor" in report  # a row per person of the directory


def test_serve_refuses_a_public_host_given_on_the_command_line() -> None:
    result = handoff("serve", "--config", "config.example.yaml", "--host", "0.0.0.0")
    assert result.returncode == 2
    assert "refusing to serve on 0.0.0.0:" in result.stderr
    assert "owner.token: required when server.host (0.0.0.0)" in result.stderr
    assert "secret_key: the development default is public" in result.stderr


def test_serve_believes_forwarded_addresses_only_from_trusted_proxies(tmp_path: Path) -> None:
    from bot.cli import server_options
    from tests.conftest import make_config

    url = f"sqlite:///{tmp_path / 'desk.db'}"
    default = server_options(make_config(url))
    assert default["proxy_headers"] is True
    assert default["forwarded_allow_ips"] == ["127.0.0.1/32", "::1/128"]
    behind = server_options(make_config(url, server={"trusted_proxies": ["10.0.0.0/8"]}))
    assert behind["forwarded_allow_ips"] == ["10.0.0.0/8"]
    assert server_options(make_config(url, server={"trusted_proxies": []}))["proxy_headers"] is False


class Served:
    """A `handoff serve` subprocess and what it printed (read by threads, so it never blocks)."""

    def __init__(self, process: subprocess.Popen[str], base_url: str) -> None:
        self.process, self.base_url = process, base_url
        self.started = threading.Event()
        self.output: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.readers = [threading.Thread(target=self._read, args=(name,), daemon=True) for name in self.output]
        for reader in self.readers:
            reader.start()

    def _read(self, name: str) -> None:
        for line in getattr(self.process, name):
            self.output[name].append(line)
            # uvicorn prints this once it listens; "Application startup complete" comes before
            # the bind, while the desk's start-up sweeps may still hold the loop.
            if "Uvicorn running on" in line:
                self.started.set()

    def printed(self, name: str) -> str:
        for reader in self.readers:
            reader.join(timeout=10)
        return "".join(self.output[name])


@contextmanager
def serving(tmp_path: Path, port: int | None = None) -> Iterator[Served]:
    """`handoff serve` on the database in `tmp_path`, on `port` (a restart keeps its address)
    or a free one."""
    if port is None:
        with socket.socket() as probe:  # a free port
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    config = tmp_path / "desk.yaml"
    config.write_text(f"server: {{host: 127.0.0.1, port: {port}}}\n"
                      f"database_url: sqlite:///{tmp_path / 'desk.db'}\n"
                      "fronts: [{kind: web}]\n"
                      "channels: [{id: 1, kind: owner_inbox, label: Owner inbox}]\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve", "--config", str(config)], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"},
    )
    served = Served(process, f"http://127.0.0.1:{port}")
    try:
        assert served.started.wait(60), f"the server did not start: {served.output['stderr']}"
        yield served
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
async def test_serve_answers_open_long_polls_and_stops_cleanly(tmp_path: Path, stop: signal.Signals) -> None:
    with serving(tmp_path) as served:
        async with httpx.AsyncClient(base_url=served.base_url, timeout=30) as client:
            cid = (await client.post("/api/conversations", json={})).json()["conversation_id"]
            token = (await client.post("/chat/api/conversations", json={})).json()["token"]
            version = (await client.get("/inbox/updates", params={"wait": 0})).json()["version"]  # an open inbox
            polls = [
                asyncio.create_task(client.get(f"/api/conversations/{cid}/messages", params={"after": 10**6, "wait": 25})),
                asyncio.create_task(client.get("/chat/api/messages", params={"after": 10**6, "wait": 25},
                                               headers={"X-Chat-Token": token})),
                asyncio.create_task(client.get("/inbox/updates", params={"since": version, "wait": 25})),
            ]
            async with asyncio.timeout(20):  # the three requests parked on the server's bus
                while "handoff_long_polls_waiting 3.0" not in (await client.get("/metrics")).text:
                    await asyncio.sleep(0.05)
            stopped_at = time.monotonic()
            served.process.send_signal(stop)
            async with asyncio.timeout(3):  # 25 s were left: answered at once, not held or cut off
                answers = await asyncio.gather(*polls)
        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "2"
            assert answer.json()["error"] == "shutting_down"
        assert served.process.wait(10) == 0
        assert time.monotonic() - stopped_at < 5, "the shutdown waited for something"
    stderr = served.printed("stderr")
    assert "Traceback" not in stderr + served.printed("stdout")
    assert "graceful shutdown exceeded" not in stderr
    assert " 500 " not in stderr
    assert "Application shutdown complete" in stderr


def test_check_config_knows_the_sibling_agent_kind(tmp_path: Path) -> None:
    """The sibling's kind is registered by its own layer; the command line loads it before the config."""
    path = tmp_path / "desk.yaml"
    path.write_text("channels: [{id: 1, kind: owner_inbox, label: Inbox}, {id: 7, kind: agent, label: Orders, agent: {kind: rules}}]\n")
    result = handoff("check-config", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{path}: OK (2 channel(s)")
