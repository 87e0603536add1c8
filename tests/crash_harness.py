"""Real `handoff serve` processes under load, killed with SIGKILL, and what reached whom.

tests/test_crash.py drives these parts: desks as subprocesses on loopback ports, each with
its own config file; the recipient channel the real Slack SDK against tests/fake_slack.py,
served from an event loop in a thread of its own so the test and its client threads stay
plain blocking code; subscribers posting over the HTTP API from several threads; and the
people's replies arriving as signed Events API callbacks, each POSTed twice with one event
id, as Slack redelivers a callback it thinks was lost.

A crash is judged from outside, as the provider and the client see it: from what the fake
recorded and what the API answered, never from the desk's tables or its code. Every check
returns its findings as sentences that name the message, how many times it arrived and how
late, so a failing test says what went wrong rather than that something did.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

import httpx

from bot.config import DeliverySettings
from tests.fake_slack import FakeSlack, message_event, signed_headers

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
SLACK_TOKEN = "xoxb-crash-token"
SIGNING_SECRET = "crash-signing-secret"
SLACK_CHANNEL = "C0CRASH"
SLACK_CHANNEL_ID = 1  # the desk's id of the Slack channel: its callbacks go to /webhooks/1
HUMAN_USER, HUMAN_NAME = "U0SAM", "Sam"
SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."

# Generous where a slow, shared CI machine only makes things slower; the bounds the tests
# assert (how soon delivery resumes) are their own and tight.
READY_TIMEOUT = 90.0  # a `handoff serve` starting Python, the migrations and the Slack channel
REQUEST_TIMEOUT = 30.0  # one API call or callback
SETTLE_TIMEOUT = 20.0  # after the load: acknowledged work still on its way

# An instance not heard from for `delivery.heartbeat` is dead; the PostgreSQL test sets it to
# one second so that two heartbeats stay short.
HEARTBEAT = 1.0

_TOKEN = re.compile(r"\bc(\d+)-k(\d+)\b")  # a subscriber message's mark in the text relayed to Slack


def heartbeat_settings() -> dict[str, str]:
    """The `delivery` section that sets the heartbeat to `HEARTBEAT`, once the desk has that
    key: a config naming a key the desk does not know is refused."""
    return {"heartbeat": f"{HEARTBEAT:g}s"} if "heartbeat" in DeliverySettings.model_fields else {}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Callable[[], bool], *, timeout: float, interval: float = 0.05) -> bool:
    """Poll `condition()` until it is truthy or `timeout` seconds have passed; whether it became true."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --------------------------------------------------------------------------- the fake Slack


class Posted(NamedTuple):
    """One message the fake Slack stored: its ts, the thread it went into (None at top level),
    its text and when it was stored (time.monotonic())."""

    ts: str
    thread_ts: str | None
    text: str
    stored_at: float


class SlackInThread:
    """The fake Slack on an event loop of its own thread, for a test whose desks are other
    processes and whose clients are threads: nothing of the test has to be async."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-slack", daemon=True)
        self.fake = FakeSlack(token=SLACK_TOKEN, channels=(SLACK_CHANNEL,), users={HUMAN_USER: HUMAN_NAME})

    def __enter__(self) -> SlackInThread:
        self._thread.start()
        self._run(self.fake.start())
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        try:
            self._run(self.fake.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=30)

    @property
    def url(self) -> str:
        return self.fake.url

    def posts(self) -> list[Posted]:
        """Every message in the channel, in the order stored, read on the fake's own loop."""
        async def snapshot() -> list[Posted]:
            return [Posted(m["ts"], m.get("thread_ts"), m["text"], self.fake.stored_at[m["ts"]])
                    for m in self.fake.messages[SLACK_CHANNEL]]

        return self._run(snapshot())


# --------------------------------------------------------------------------- desks


def write_config(path: Path, *, port: int, database_url: str, slack_url: str, delivery: dict[str, str] | None = None) -> Path:
    """A desk's config (JSON is YAML) serving on 127.0.0.1:`port` with one Slack channel."""
    config = {
        "server": {"host": "127.0.0.1", "port": port, "public_url": f"http://127.0.0.1:{port}"},
        "secret_key": "crash-secret-key-0123456789",
        "database_url": database_url,
        "handoff": {"idle_timeout": "2h"},  # no release in the middle of a run
        "delivery": delivery or {},
        "logging": {"level": "warning", "format": "console"},
        "channels": [{"id": SLACK_CHANNEL_ID, "kind": "slack", "label": "Support", "bot_token": SLACK_TOKEN,
                      "signing_secret": SIGNING_SECRET, "channel": SLACK_CHANNEL, "api_base_url": slack_url}],
    }
    path.write_text(json.dumps(config, indent=2))
    return path


class DeskProcess:
    """One `handoff serve` subprocess; its output is drained by a thread so it never blocks,
    and kept to show when a test fails."""

    def __init__(self, name: str, config: Path, port: int) -> None:
        self.name, self.base_url = name, f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--config", str(config)], cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, name=f"desk-{name}-output", daemon=True)
        self._reader.start()
        self.ready_at = 0.0  # time.monotonic() of the first healthy answer
        self.killed_at = 0.0

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines[-60:])

    def wait_ready(self) -> float:
        """Block until /healthz answers 200; when that was (time.monotonic())."""
        deadline = time.monotonic() + READY_TIMEOUT
        with httpx.Client(base_url=self.base_url, timeout=2) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise AssertionError(f"desk {self.name} exited with {self.process.returncode}:\n{self.output()}")
                try:
                    if client.get("/healthz").status_code == 200:
                        self.ready_at = time.monotonic()
                        return self.ready_at
                except httpx.TransportError:
                    pass  # not listening yet
                time.sleep(0.02)
        raise AssertionError(f"desk {self.name} was not ready within {READY_TIMEOUT:.0f} s:\n{self.output()}")

    def kill(self) -> float:
        """SIGKILL: no shutdown, nothing flushed; returns when the process is gone (time.monotonic())."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.killed_at = time.monotonic()
        return self.killed_at

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)
        self._reader.join(timeout=10)


@dataclass(frozen=True)
class Conversation:
    """A subscriber's conversation with an active handoff into its own Slack thread, and the
    desk instance its share of the load goes to."""

    index: int
    cid: str
    thread_ts: str
    instance: str


def open_handoffs(base_url: str, instances: list[str], count: int) -> list[Conversation]:
    """`count` conversations, each handed off to the Slack channel through the API as the
    agent would; their load is dealt to `instances` in turn."""
    opened = []
    with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT) as client:
        for index in range(count):
            answer = client.post("/api/conversations", json={"subscriber": {"name": f"Subscriber {index}"}})
            assert answer.status_code == 201, answer.text
            cid = answer.json()["conversation_id"]
            result = client.post(f"/api/conversations/{cid}/tools/handoff_request",
                                 json={"channel_id": SLACK_CHANNEL_ID, "summary": SUMMARY, "expected_action": ACTION}).json()
            assert result.get("ok") and result.get("channel_message_id"), result
            opened.append(Conversation(index, cid, str(result["channel_message_id"]), instances[index % len(instances)]))
    return opened


class Gateway:
    """Where each instance's share of the load goes, as a load balancer would send it: to
    the instance while it is up, nowhere while it is down (clients wait for it), or to a
    survivor once it is gone for good."""

    def __init__(self, urls: dict[str, str]) -> None:
        self._urls: dict[str, str | None] = dict(urls)
        self._changed = threading.Condition()

    def url(self, instance: str) -> str:
        with self._changed:
            if not self._changed.wait_for(lambda: self._urls[instance] is not None, timeout=READY_TIMEOUT * 2):
                raise AssertionError(f"instance {instance} stayed unreachable")
            url = self._urls[instance]
            assert url is not None
            return url

    def route(self, instance: str, url: str | None) -> None:
        with self._changed:
            self._urls[instance] = url
            self._changed.notify_all()


# --------------------------------------------------------------------------- the load


class Answer(StrEnum):
    ACKNOWLEDGED = "acknowledged"  # a 2xx came back
    UNANSWERED = "unanswered"  # the connection broke or timed out: it may or may not have been taken
    APPLIED = "applied, answer lost"  # 409 request_applied_answer_lost: a retry of a request that took effect
    REFUSED = "refused"  # any other answer that is not 2xx


@dataclass
class SubscriberMessage:
    conversation: Conversation
    k: int  # its place in the conversation: the subscriber sends k = 0, 1, 2, … in turn
    idempotency_key: str | None
    answer: Answer = Answer.UNANSWERED
    status: int | None = None
    body: dict[str, Any] = field(default_factory=dict)
    answered_at: float = 0.0
    retries: int = 0  # sent again with its key after going unanswered

    @property
    def text(self) -> str:
        return f"crash message c{self.conversation.index}-k{self.k}"

    @property
    def took_effect(self) -> bool:
        """The desk said it stored this message (so it must arrive exactly once)."""
        return self.answer in (Answer.ACKNOWLEDGED, Answer.APPLIED)

    @property
    def name(self) -> str:
        return f"conversation {self.conversation.index}'s message k{self.k}"


@dataclass
class HumanReply:
    conversation: Conversation
    r: int
    statuses: list[int | None] = field(default_factory=list)  # one per POST of the callback; None: unanswered
    acknowledged_at: float = 0.0  # time.monotonic() of the first 2xx

    @property
    def text(self) -> str:
        return f"crash reply c{self.conversation.index}-r{self.r}"

    @property
    def event_id(self) -> str:
        return f"EvCRASH{self.r:06d}"

    @property
    def acknowledged(self) -> bool:
        return any(s is not None and 200 <= s < 300 for s in self.statuses)


class Load:
    """Subscribers posting over the API from several threads (each conversation in order,
    by one thread) and people replying in the Slack threads from others, each callback
    POSTed twice with one event id. A message whose connection breaks is recorded as
    unanswered; the thread carries on once the gateway has somewhere to send it. With
    `idempotent`, each message carries an `Idempotency-Key` and an unanswered one is sent
    again with it before the next, as a client that retries connection errors does."""

    RETRIES = 3  # per message, each once the gateway has somewhere to send it

    def __init__(self, gateway: Gateway, conversations: list[Conversation], *, messages_each: int, replies: int,
                 subscriber_threads: int = 4, reply_threads: int = 2, idempotent: bool = False) -> None:
        self.gateway, self.conversations = gateway, conversations
        self.idempotent = idempotent
        self.messages = [SubscriberMessage(c, k, uuid.uuid4().hex if idempotent else None)
                         for k in range(messages_each) for c in conversations]
        self.replies = [HumanReply(conversations[r % len(conversations)], r) for r in range(replies)]
        self._acknowledged = 0
        self._progress = threading.Condition()
        self._errors: list[BaseException] = []
        self._threads = [threading.Thread(target=self._guarded, args=(self._subscriber, t, subscriber_threads),
                                          name=f"subscribers-{t}", daemon=True) for t in range(subscriber_threads)]
        self._threads += [threading.Thread(target=self._guarded, args=(self._replier, t, reply_threads),
                                           name=f"replies-{t}", daemon=True) for t in range(reply_threads)]

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=READY_TIMEOUT * 3)
            assert not thread.is_alive(), f"{thread.name} did not finish"
        assert not self._errors, f"a load thread failed: {self._errors[0]!r}"

    def wait_acknowledged(self, count: int) -> None:
        """Block until `count` requests in all (messages and first acknowledgements of replies) were acknowledged."""
        with self._progress:
            reached = self._progress.wait_for(lambda: self._acknowledged >= count or self._errors, timeout=READY_TIMEOUT)
        assert reached and not self._errors, f"the load stalled at {self._acknowledged} of {count} acknowledged: {self._errors}"

    def _count(self) -> None:
        with self._progress:
            self._acknowledged += 1
            self._progress.notify_all()

    def _guarded(self, work: Any, t: int, threads: int) -> None:
        try:
            work(t, threads)
        except BaseException as error:  # reported by join() and wait_acknowledged(), not lost in a thread
            with self._progress:
                self._errors.append(error)
                self._progress.notify_all()

    def _subscriber(self, t: int, threads: int) -> None:
        with httpx.Client(timeout=REQUEST_TIMEOUT) as client:
            for message in self.messages:
                if message.conversation.index % threads == t:
                    self.post(client, message)
                    while self.idempotent and message.answer is Answer.UNANSWERED and message.retries < self.RETRIES:
                        message.retries += 1
                        self.post(client, message)

    def post(self, client: httpx.Client, message: SubscriberMessage) -> None:
        """Send (or send again) one subscriber message and record how it was answered."""
        url = f"{self.gateway.url(message.conversation.instance)}/api/conversations/{message.conversation.cid}/messages"
        headers = {"Idempotency-Key": message.idempotency_key} if message.idempotency_key else {}
        try:
            response = client.post(url, json={"text": message.text}, headers=headers)
        except httpx.TransportError:
            message.answer, message.status = Answer.UNANSWERED, None
            return
        message.status, message.answered_at = response.status_code, time.monotonic()
        message.body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if response.is_success:
            message.answer = Answer.ACKNOWLEDGED
            self._count()
        elif response.status_code == 409 and message.body.get("error") == "request_applied_answer_lost":
            message.answer = Answer.APPLIED
        else:
            message.answer = Answer.REFUSED

    def _replier(self, t: int, threads: int) -> None:
        with httpx.Client(timeout=REQUEST_TIMEOUT) as client:
            for reply in self.replies[t::threads]:
                body = message_event(channel=SLACK_CHANNEL, text=reply.text, user=HUMAN_USER,
                                     thread_ts=reply.conversation.thread_ts, ts=f"{1_800_000_000 + reply.r}.000200",
                                     event_id=reply.event_id)
                for retry_num in (None, 1):  # the callback, then Slack's redelivery of it
                    url = f"{self.gateway.url(reply.conversation.instance)}/webhooks/{SLACK_CHANNEL_ID}"
                    try:
                        status: int | None = client.post(url, content=body, headers=signed_headers(
                            SIGNING_SECRET, body, retry_num=retry_num)).status_code
                    except httpx.TransportError:
                        status = None
                    first = not reply.acknowledged
                    reply.statuses.append(status)
                    if first and reply.acknowledged:
                        reply.acknowledged_at = time.monotonic()
                        self._count()


# --------------------------------------------------------------------------- what arrived


@dataclass(frozen=True)
class ApiMessage:
    role: str
    text: str
    created_at: float  # seconds since the epoch


def conversation_messages(base_url: str, cid: str) -> list[ApiMessage]:
    """Every message of the conversation, as GET /api/conversations/{cid}/messages pages them."""
    found: list[ApiMessage] = []
    after = 0
    with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT) as client:
        while True:
            answer = client.get(f"/api/conversations/{cid}/messages", params={"after": after, "limit": 500})
            assert answer.status_code == 200, answer.text
            page = answer.json()["messages"]
            if not page:
                return found
            found += [ApiMessage(m["role"], m["text"], _epoch(m["created_at"])) for m in page]
            after = max(int(m["id"]) for m in page)


def _epoch(stamp: str) -> float:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def relays_in(posts: list[Posted], thread_ts: str) -> list[Posted]:
    """The replies the desk posted into one thread, in order."""
    return [p for p in posts if p.thread_ts == thread_ts and p.ts != thread_ts]


def relayed_marks(posts: list[Posted], thread_ts: str) -> list[tuple[int, int]]:
    """(conversation, k) of each subscriber message relayed into the thread, in order."""
    return [(int(c), int(k)) for p in relays_in(posts, thread_ts) for c, k in _TOKEN.findall(p.text)]


class Findings:
    """What a run found wrong, by check; `assert_none()` fails naming every check that found
    something, with its first sentences."""

    SHOWN = 15  # sentences shown per check

    def __init__(self, summary: str) -> None:
        self.summary = summary
        self.problems: dict[str, list[str]] = {}

    def add(self, check: str, problems: list[str]) -> None:
        if problems:
            self.problems.setdefault(check, []).extend(problems)

    def assert_none(self) -> None:
        parts = [self.summary]
        for check, problems in self.problems.items():
            parts.append(f"{check}: {len(problems)} problem(s)")
            parts += [f"  {p}" for p in problems[:self.SHOWN]]
            if len(problems) > self.SHOWN:
                parts.append(f"  … and {len(problems) - self.SHOWN} more")
        assert not self.problems, "\n".join(parts)


def _ranges(numbers: list[int], prefix: str) -> str:
    """[3, 4, 5, 9] -> "k3-k5, k9" (prefix "k")."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{prefix}{a}" if a == b else f"{prefix}{a}-{prefix}{b}" for a, b in spans)


def relay_problems(load: Load, posts: list[Posted]) -> list[str]:
    """Every acknowledged subscriber message in its own thread exactly once, in the order sent;
    an unanswered one at most once; nothing in a thread that is not its conversation's."""
    problems = []
    for conversation in load.conversations:
        marks = relayed_marks(posts, conversation.thread_ts)
        strays = sorted({c for c, _ in marks if c != conversation.index})
        if strays:
            problems.append(f"conversation {conversation.index}'s thread got messages of conversation(s) {strays}")
        ks = [k for c, k in marks if c == conversation.index]
        times = Counter(ks)
        mine = [m for m in load.messages if m.conversation is conversation]
        missing = [m.k for m in mine if m.took_effect and not times[m.k]]
        if missing:
            problems.append(f"conversation {conversation.index}: {len(missing)} acknowledged message(s) not in its Slack "
                            f"thread {SETTLE_TIMEOUT:g} s after the load's end: {_ranges(missing, 'k')}")
        problems += [f"{m.name} ({m.answer}) reached its Slack thread {times[m.k]} times" for m in mine if times[m.k] > 1]
        firsts = list(dict.fromkeys(ks))
        if firsts != sorted(firsts):
            problems.append(f"conversation {conversation.index}'s thread got its messages out of order: k{firsts}")
    return problems


def reply_problems(load: Load, seen: dict[str, list[ApiMessage]]) -> list[str]:
    """Every acknowledged reply in its conversation exactly once as a human message; an
    unacknowledged one at most once."""
    problems = []
    for conversation in load.conversations:
        texts = Counter(m.text for m in seen[conversation.cid] if m.role == "human")
        mine = [r for r in load.replies if r.conversation is conversation]
        missing = [r.r for r in mine if r.acknowledged and not texts[r.text]]
        if missing:
            problems.append(f"conversation {conversation.index}: {len(missing)} acknowledged human reply(ies) not in "
                            f"the conversation {SETTLE_TIMEOUT:g} s after the load's end: {_ranges(missing, 'r')}")
        problems += [f"conversation {conversation.index}'s human reply r{r.r} (event {r.event_id}, callbacks answered "
                     f"{r.statuses}) reached the subscriber {texts[r.text]} times" for r in mine if texts[r.text] > 1]
    return problems


@dataclass
class Crash:
    """Which instance died and when, when delivery could resume after it (both time.monotonic()),
    what the fake Slack held by then, and the bound delivery had to resume within."""

    dead: str
    killed_at: float
    resumable_at: float  # the restarted instance's readiness, or the kill when a survivor takes over
    posts_at_kill: list[Posted]
    bound: float
    since: str  # what `resumable_at` was, for the messages
    replies_bound: bool = True  # whether the people's replies pending at the kill are held to `bound` too
    wall_offset: float = field(default_factory=lambda: time.time() - time.monotonic())


def resumption_problems(load: Load, posts: list[Posted], seen: dict[str, list[ApiMessage]], crash: Crash) -> tuple[list[str], list[str]]:
    """How long after `crash.resumable_at` the work pending at the kill was delivered: problems,
    and every delay measured (to print).

    Bound by `crash.bound`, for the dead instance's conversations: the relays into Slack that
    were not delivered at the kill (an outbox stream keeps its order, so nothing of it moves
    before what the dead instance left in it does: its first delivery after the kill) and, with `crash.replies_bound`, the people's replies
    acknowledged before the kill (in no order: the last of them). A survivor's own
    conversations are measured only; whether each reply arrived exactly once is
    `reply_problems`'s check."""
    problems: list[str] = []
    delays: list[str] = []
    for conversation in load.conversations:
        bound = problems if conversation.instance == crash.dead else []
        delivered = Counter(k for c, k in relayed_marks(crash.posts_at_kill, conversation.thread_ts) if c == conversation.index)
        # Acknowledged before the kill or after it: either way the stream has to move past
        # whatever the dead instance left in it (an unanswered message it had claimed, say).
        pending = [m for m in load.messages if m.conversation is conversation and m.took_effect and not delivered[m.k]]
        if pending:
            after = [p.stored_at for p in relays_in(posts, conversation.thread_ts) if p.stored_at > crash.killed_at]
            _measure(bound, delays, f"conversation {conversation.index}'s relays into Slack ({len(pending)} to deliver "
                     f"after the kill, from k{pending[0].k}; the first of them)", after, crash)
        replies = [r for r in load.replies if r.conversation is conversation and r.acknowledged
                   and 0 < r.acknowledged_at < crash.killed_at]
        kill_wall = crash.killed_at + crash.wall_offset
        stored = {m.text: m.created_at for m in seen[conversation.cid] if m.role == "human"}
        waiting = [r for r in replies if stored.get(r.text, float("inf")) > kill_wall]
        if waiting:  # in no order: the last of them tells when all had come
            arrivals = [stored.get(r.text) for r in waiting]
            after = [] if None in arrivals else [max(a for a in arrivals if a is not None) - crash.wall_offset]
            held = crash.replies_bound
            _measure(bound if held else [], delays, f"conversation {conversation.index}'s human replies ({len(waiting)} "
                     f"pending: {_ranges([r.r for r in waiting], 'r')}; the last of them{'' if held else ', not bound'})",
                     after, crash)
    return problems, delays


def _measure(problems: list[str], delays: list[str], stream: str, deliveries: list[float], crash: Crash) -> None:
    if not deliveries:
        problems.append(f"{stream}: not within {SETTLE_TIMEOUT:g} s of the load's end (bound {crash.bound:g} s after {crash.since})")
        delays.append(f"{stream}: not delivered")
        return
    delay = min(deliveries) - crash.resumable_at
    delays.append(f"{stream}: {delay:+.2f} s after {crash.since}")
    if delay > crash.bound:
        problems.append(f"{stream}: {delay:.2f} s after {crash.since}, bound {crash.bound:g} s")


def settled(load: Load, slack: SlackInThread, base_url: str) -> tuple[list[Posted], dict[str, list[ApiMessage]]]:
    """Wait (up to SETTLE_TIMEOUT) until every acknowledged message is in Slack and every
    acknowledged reply in its conversation; what is there then, settled or not."""
    state: dict[str, Any] = {}

    def arrived() -> bool:
        state["posts"] = posts = slack.posts()
        state["seen"] = seen = {c.cid: conversation_messages(base_url, c.cid) for c in load.conversations}
        relayed = {mark for c in load.conversations for mark in relayed_marks(posts, c.thread_ts)}
        humans = {m.text for messages in seen.values() for m in messages if m.role == "human"}
        return (all((m.conversation.index, m.k) in relayed for m in load.messages if m.took_effect)
                and all(r.text in humans for r in load.replies if r.acknowledged))

    wait_until(arrived, timeout=SETTLE_TIMEOUT, interval=0.25)
    return state["posts"], state["seen"]


def summary(title: str, seed: int, kill_after: int, load: Load) -> str:
    """What a run did, to head its report: the seed, the kill point, how the requests were answered."""
    answers = ", ".join(f"{n} {answer}" for answer, n in Counter(m.answer for m in load.messages).items())
    retried = sum(1 for m in load.messages if m.retries)
    acknowledged_replies = sum(1 for r in load.replies if r.acknowledged)
    return (f"{title}: seed {seed} (HANDOFF_CRASH_SEED={seed} repeats it), killed after {kill_after} acknowledged requests; "
            f"subscriber messages: {answers}{f' ({retried} after a retry with their key)' if retried else ''}; "
            f"human replies acknowledged: {acknowledged_replies} of {len(load.replies)}")


@dataclass
class Desks:
    """The desk processes a test started, closed at its end whatever happened."""

    running: list[DeskProcess] = field(default_factory=list)

    def start(self, name: str, config: Path, port: int) -> DeskProcess:
        desk = DeskProcess(name, config, port)
        self.running.append(desk)
        desk.wait_ready()
        return desk

    def close(self) -> None:
        for desk in self.running:
            desk.close()

    def output(self) -> str:
        return "\n".join(f"--- desk {d.name} (exit {d.process.returncode})\n{d.output()}" for d in self.running)
