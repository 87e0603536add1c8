"""`handoff demo`: the whole story in a terminal, offline, with the real parts.

It runs a real server (app, SQLite file in a temporary folder, owner inbox channel, rules
agent) and drives it through the HTTP API the way an integrator would. Two people of the
directory, Olga Petrova (admin) and Sam Okafor (agent), each sign in to the inbox with a
session of their own, and their side goes through the inbox's own form posts (their session
cookie and its CSRF token, as their browsers send them): who replies, claims and approves is
a person, by name. Time is a manual clock, so the idle timeout at the end happens without
waiting 30 minutes.

The story itself is data: `SCENES` is a tuple of scenes, each a title and a row of beats
(who speaks, what is sent, what is shown, the narration), and `_story` walks it. Adding a
scene is adding a row; a beat's texts are templates over the facts earlier beats kept (the
conversation ids, the handoff ids, the team a handoff went to), so no row reaches into
another's variables.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import parse_qs, urlsplit

import httpx
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from sqlalchemy import select
from sqlmodel import col

from bot.config import Config, format_duration
from bot.desk import Desk
from bot.runtime.clock import ManualClock
from bot.runtime.logs import configure_logging
from bot.store.models import OutboxItem
from bot.web.app import create_app
from bot.web.inbox.owner import COOKIE
from channels.email.mailbox import LoopbackMailbox

ROLE_STYLE = {"subscriber": "bold cyan", "agent": "bold green", "human": "bold magenta", "system": "bold yellow"}


async def demo_refund(arguments: dict[str, Any]) -> dict[str, Any]:
    """The demo's `refund_order` action: what a shop's refund endpoint would answer."""
    return {"refund_id": "rf_demo_1", "order_id": arguments["order_id"], "amount": arguments["amount"], "status": "refunded"}


class Story:
    def __init__(self, console: Console, pause: float) -> None:
        self.console, self.pause = console, pause

    async def step(self, title: str) -> None:
        await asyncio.sleep(self.pause)
        self.console.rule(f"[bold]{title}")

    def say(self, role: str, who: str, text: str) -> None:
        self.console.print(Text.assemble((who, ROLE_STYLE.get(role, "bold")), ": ", text))

    def note(self, text: str) -> None:
        self.console.print(Text(text, style="dim"))

    def json(self, title: str, data: Any) -> None:
        self.console.print(Panel(Text(json.dumps(data, indent=2, ensure_ascii=False)), title=title, expand=False))

    def panel(self, title: str, text: str) -> None:
        self.console.print(Panel(Text(text), title=title, expand=False))


@dataclass(frozen=True)
class SignedInAs:
    """A person's inbox session, as their browser holds it: the cookie's token and the CSRF
    token of their forms."""

    name: str
    token: str
    csrf: str


@dataclass
class Stage:
    """What the beats play on: the running desk, its API, the clock, the mailbox the desk's
    e-mail lands in, and what earlier beats kept.

    `facts` holds the named values templates refer to (`{ana}`, `{sid}`, `{team}`…); `seen`
    holds, per conversation, the last message id already on screen, so a beat that catches up
    shows each message once; `people` the inbox sessions of the directory's people, by id.
    """

    story: Story
    desk: Desk
    client: httpx.AsyncClient
    clock: ManualClock
    began: datetime
    mailbox: LoopbackMailbox
    facts: dict[str, Any] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    people: dict[str, SignedInAs] = field(default_factory=dict)

    def fill(self, template: str, answer: Mapping[str, Any] | None = None) -> str:
        """A beat's text with the facts (and the fields of the beat's own answer) filled in."""
        return template.format_map({**self.facts, **(answer or {})})

    def answered(self, answer: Mapping[str, Any], keep: Mapping[str, str], note: str | None) -> None:
        """Keep the fields of an API answer that later beats name (`keep`: fact → field), then narrate it."""
        for name, key in keep.items():
            self.facts[name] = answer[key]
        if note:
            self.story.note(self.fill(note, answer))

    async def messages(self, conversation: str, after: int = 0) -> list[dict[str, Any]]:
        params = {"after": after} if after else None
        answer = await self.client.get(f"/api/conversations/{self.facts[conversation]}/messages", params=params)
        messages: list[dict[str, Any]] = answer.json()["messages"]
        return messages


class Beat(Protocol):
    """One row of a scene: it does its part on the stage and shows what it did."""

    async def play(self, stage: Stage) -> None: ...


View = Callable[[dict[str, Any]], Any]


def pick(*keys: str, under: str | None = None) -> View:
    """A view of an answer that shows only `keys` (of its `under` part, when given)."""
    def view(answer: dict[str, Any]) -> Any:
        part = answer[under] if under else answer
        return {key: part[key] for key in keys}
    return view


def _requested(answer: dict[str, Any]) -> Any:
    """The agent's `handoff_request` call, as the handoff's first event recorded it."""
    return next(e for e in answer["events"] if e["kind"] == "handoff_requested")["detail"]["request"]


def _votes(answer: dict[str, Any]) -> Any:
    """Who approved (a person counts once, whichever door), and what ran."""
    return {"votes": [f"{v['name']}: {v['voter']}" for v in answer["votes"]],
            "approvals_required": answer["approvals_required"], "run_state": answer["run_state"]}


def _ladder(answer: dict[str, Any]) -> Any:
    """Which step of its route a handoff is on, and every channel it notified so far."""
    return {"step": answer["step"] + 1, "notified": [
        f"{r['channel_label']} (step {r['step'] + 1})" for r in answer["recipients"]]}


def _offers(answer: dict[str, Any]) -> Any:
    """Whom a route offered the handoff to directly: each person, on which contact method, how it ended."""
    return [f"{r['person_name']} ({r['target']}, turn {r['turn'] + 1}) by {r['contact']}: {r['state']}, {r['result'] or 'open'}"
            for r in answer["recipients"] if r["person_id"]]


@dataclass(frozen=True)
class Open:
    """A subscriber opens a chat; the conversation id is kept as the fact `name`."""

    name: str
    subscriber: dict[str, Any]
    note: str | None = None

    async def play(self, stage: Stage) -> None:
        answer = await stage.client.post("/api/conversations", json={"subscriber": self.subscriber})
        stage.facts[self.name] = answer.json()["conversation_id"]
        stage.seen[self.name] = 0
        if self.note:
            stage.story.note(stage.fill(self.note))


@dataclass(frozen=True)
class Send:
    """The subscriber writes in the chat; the assistant's replies (if the AI still has it) follow."""

    conversation: str
    who: str
    text: str
    keep: Mapping[str, str] = field(default_factory=dict)
    note: str | None = None

    async def play(self, stage: Stage) -> None:
        stage.story.say("subscriber", self.who, self.text)
        answer = await stage.client.post(f"/api/conversations/{stage.facts[self.conversation]}/messages",
                                         json={"text": self.text})
        body: dict[str, Any] = answer.json()
        for reply in body["replies"]:
            stage.story.say(reply["role"], "Assistant", reply["text"])
        stage.seen[self.conversation] = max([body["message_id"], *(r["id"] for r in body["replies"])])
        stage.answered(body, self.keep, self.note)


@dataclass(frozen=True)
class Line:
    """A line shown as said, without sending it (the agent acts on it through a tool call)."""

    role: str
    who: str
    text: str

    async def play(self, stage: Stage) -> None:
        stage.story.say(self.role, self.who, self.text)


@dataclass(frozen=True)
class Note:
    """The narrator's aside."""

    text: str

    async def play(self, stage: Stage) -> None:
        stage.story.note(stage.fill(self.text))


@dataclass(frozen=True)
class Settle:
    """Let the desk finish what it queued (deliveries, the agent's turn)."""

    async def play(self, stage: Stage) -> None:
        await stage.desk.settle()


SETTLE = Settle()


@dataclass(frozen=True)
class Catch:
    """What the conversation's subscriber was told since the last look (their own lines are on screen)."""

    conversation: str

    async def play(self, stage: Stage) -> None:
        messages = await stage.messages(self.conversation, after=stage.seen[self.conversation])
        for message in messages:
            if message["role"] != "subscriber":
                who = message.get("author") or ("System" if message["role"] == "system" else "Assistant")
                stage.story.say(message["role"], who, message["text"])
        if messages:
            stage.seen[self.conversation] = int(messages[-1]["id"])


@dataclass(frozen=True)
class Stored:
    """How the desk stored the subscriber's last message (`{text}` in the note)."""

    conversation: str
    note: str

    async def play(self, stage: Stage) -> None:
        mine = [m for m in await stage.messages(self.conversation) if m["role"] == "subscriber"]
        stage.story.note(stage.fill(self.note, {"text": mine[-1]["text"]}))


@dataclass(frozen=True)
class Wait:
    """Time passes on the manual clock (`by`, or just past the idle timeout), then the sweep runs."""

    note: str
    by: timedelta | Literal["idle timeout"]

    async def play(self, stage: Stage) -> None:
        idle = stage.desk.config.handoff.idle_timeout + timedelta(seconds=1)
        stage.clock.advance(idle if self.by == "idle timeout" else self.by)
        stage.story.note(stage.fill(self.note))
        await stage.desk.timers.sweep()
        await stage.desk.settle()


@dataclass(frozen=True)
class Api:
    """A call to the HTTP API, as an integrator makes it: a GET, or a POST when there is a `body`.

    The body is shown first under `sent`, the answer (`view` of it) after under `answer`; either
    panel is left out when its title is.
    """

    path: str
    body: dict[str, Any] | None = None
    sent: str | None = None
    answer: str | None = None
    view: View = lambda answer: answer
    keep: Mapping[str, str] = field(default_factory=dict)
    note: str | None = None

    async def play(self, stage: Stage) -> None:
        if self.sent:
            stage.story.json(stage.fill(self.sent), self.body)
        path = stage.fill(self.path)
        response = await (stage.client.get(path) if self.body is None else stage.client.post(path, json=self.body))
        answer: dict[str, Any] = response.json()
        if self.answer:
            stage.story.json(stage.fill(self.answer), self.view(answer))
        stage.answered(answer, self.keep, self.note)


@dataclass(frozen=True)
class Outbox:
    """What the desk queued to a channel for a handoff or an approval, as the channel receives it."""

    about: str
    title: str
    purpose: str | None = None
    keep: str | None = None

    async def play(self, stage: Stage) -> None:
        query = select(OutboxItem).where(col(OutboxItem.handoff_session_id) == stage.fill(self.about))
        if self.purpose:
            query = query.where(col(OutboxItem.purpose) == self.purpose)
        async with stage.desk.db.transaction() as session:
            items = (await session.scalars(query)).all()
        # A handoff's dispatch is one item (a second would be a double send); an approval's
        # prompt is the first item about it.
        assert items and (self.purpose != "dispatch" or len(items) == 1), f"{len(items)} items for {self.title!r}"
        item = items[0]
        if self.keep:
            stage.facts[self.keep] = item.payload
        stage.story.panel(stage.fill(self.title), item.payload["text"])


@dataclass(frozen=True)
class Mail:
    """The newest message the desk mailed to `to`, as that person's mail app shows it."""

    to: str
    title: str

    async def play(self, stage: Stage) -> None:
        await stage.desk.settle()
        delivered = stage.mailbox.to(self.to)
        assert delivered, f"no mail to {self.to}"
        newest = delivered[-1]
        stage.story.panel(stage.fill(self.title), f"Subject: {newest.message['subject']}\n\n{newest.text.strip()}")


@dataclass(frozen=True)
class Teammate:
    """A person of the directory (the config's `people:`, applied when the desk starts) signs
    in to the inbox: a server-side session of their own, kept for the beats that act as them
    (`pid`)."""

    pid: str
    note: str

    async def play(self, stage: Stage) -> None:
        desk = stage.desk
        person = await desk.people.get(self.pid)
        token, session = await desk.sessions.open(person, via="password")
        stage.people[self.pid] = SignedInAs(person.name, token, session.csrf(desk.config.secret_key.get_secret_value()))
        stage.story.note(stage.fill(self.note, {"name": person.name, "role": person.role}))


@dataclass(frozen=True)
class Inbox:
    """A person signed in to the inbox sends one of its forms (reply, claim, approve …): a
    POST with their session cookie and the form's CSRF token, as their browser sends it. The
    note may name the page's answer (`{notice}`)."""

    who: str
    path: str
    form: Mapping[str, str] = field(default_factory=dict)
    note: str | None = None

    async def play(self, stage: Stage) -> None:
        signed = stage.people[self.who]
        response = await stage.client.post(
            stage.fill(self.path), data={**{k: stage.fill(v) for k, v in self.form.items()}, "csrf": signed.csrf},
            headers={"Cookie": f"{COOKIE}={signed.token}"},
        )
        assert response.status_code == 303, f"{self.path}: {response.status_code} {response.text[:200]}"
        notice = parse_qs(urlsplit(response.headers["location"]).query).get("notice", [""])[0]
        if self.note:
            stage.story.note(stage.fill(self.note, {"name": signed.name, "notice": notice}))


@dataclass(frozen=True)
class Audit:
    """A handoff's audit trail: each event's time, kind and actor (of the kinds in `only`, when given)."""

    handoff: str
    only: tuple[str, ...] = ()

    async def play(self, stage: Stage) -> None:
        answer = await stage.client.get(f"/api/handoffs/{stage.fill(self.handoff)}/events")
        for event in answer.json()["events"]:
            if self.only and event["kind"] not in self.only:
                continue
            detail = event.get("detail") or {}
            offered = f" → the {detail.get('layer')} layer's person, by {detail.get('contact')}" if (
                event["kind"] == "handoff_offered") else ""
            stage.story.console.print(Text.assemble(
                f"  {event['created_at'][11:23]}  ", (f"{event['kind']:<24}", "bold"), f" {event['actor']}{offered}"))


@dataclass(frozen=True)
class Report:
    """The summary behind the Reports page, over everything the demo did."""

    async def play(self, stage: Stage) -> None:
        summary = await stage.desk.reports.summary(stage.began, stage.clock.now() + timedelta(seconds=1))
        reached, lasted, endings = summary.time_to_person, summary.duration, summary.endings
        table = Table(title="Reports (the figures of /inbox/reports)", show_header=False, box=None, padding=(0, 2))
        table.add_row("handoffs", str(summary.handoffs))
        table.add_row("time to a person", f"p50 {_seconds(reached.p50)}, max {_seconds(reached.max)}"
                                          f" ({reached.count} reached, {reached.missing} not)")
        table.add_row("duration", f"p50 {_seconds(lasted.p50)}, max {_seconds(lasted.max)} ({lasted.count} ended)")
        table.add_row("ended by", ", ".join(f"{t.word.replace('_', ' ')} {t.count}" for t in endings.by_reason) or "—")
        table.add_row("handled without a person", f"{summary.containment.contained} of {summary.containment.conversations}"
                                                  " conversations")
        for row in summary.people:
            table.add_row(f"  {row.name}", f"handled {row.handled}, time to claim p50 {_seconds(row.p50)}")
        stage.story.console.print(table)
        stage.story.note("The Reports page draws these as charts, per day, per channel or route and per person, "
                         "with a CSV of the rows.")


def _seconds(value: float | None) -> str:
    return "—" if value is None else format_duration(timedelta(seconds=round(value)))


@dataclass(frozen=True)
class Scene:
    """A numbered chapter of the story: its title rule, then its beats in order."""

    title: str
    beats: tuple[Beat, ...]


INTRO = (
    "Handoff Desk demo: an AI agent hands a conversation to a person and takes it back.\n"
    "Everything below runs locally: the real server, a SQLite file, the owner inbox channel and the built-in rules agent."
)
OUTRO = "\nNext: [bold]handoff serve --config config.example.yaml[/bold], then open /inbox and drive the API (see README)."

SCENES: tuple[Scene, ...] = (
    Scene("1. The team: two people of the directory sign in to the inbox", (
        Teammate("olga", "{name} (role: {role}) is in the directory (the config's people:) and signs in "
                         "to the inbox, a session of her own"),
        Teammate("sam", "{name} (role: {role}) too: what each does there is theirs, by name"),
    )),
    Scene("2. Ana opens the chat", (
        Open("ana", {"name": "Ana", "email": "ana@example.com"}, note="POST /api/conversations → {ana}"),
        Send("ana", "Ana", "Hi!"),
    )),
    Scene("3. Ana asks for a person; the agent calls handoff_request", (
        Send("ana", "Ana", "My order #1234 was due Monday and still hasn't arrived. Can I talk to a person?",
             keep={"sid": "handoff_session_id"}),
        Api("/api/handoffs/{sid}/events", answer="tool call: handoff_request", view=_requested),
        Api("/api/handoffs/{sid}", answer="handoff session",
            view=pick("handoff_session_id", "state", "channel_label", "idle_deadline"), keep={"team": "channel_label"}),
    )),
    Scene("4. What the support team receives", (
        Outbox("{sid}", "dispatch to {team}", purpose="dispatch"),
    )),
    Scene("5. The AI is bypassed: messages relay both ways", (
        Send("ana", "Ana", "The tracking page just says 'label created'.",
             note="routed_to: {routed_to} (the agent did not see it)"),
        SETTLE,
        Wait("… two minutes later Sam Okafor opens it in the inbox …", by=timedelta(minutes=2)),
        Inbox("sam", "/inbox/handoffs/{sid}/reply",
              {"text": "Hi Ana, the parcel was stuck at the depot; I've re-shipped it with express delivery today."},
              note="{name} answers from the inbox; Ana sees his name, never a provider handle:"),
        SETTLE,
        Catch("ana"),
        Send("ana", "Ana", "Great, thank you!"),
        SETTLE,
    )),
    Scene("6. The handoff is released with the data the agent asked for", (
        Api("/api/handoffs/{sid}/release", {
            "outcome": "resolved",
            "note": "Re-shipped express.",
            "return_values": {"resolution": "Re-shipped order #1234 with express delivery; arrives Thursday.",
                              "follow_up_needed": False},
        }, sent="POST /api/handoffs/{{sid}}/release"),
        SETTLE,
        Catch("ana"),
    )),
    Scene("7. Later: Ben asks about an invoice; the agent hands to the Invoices route", (
        Open("ben", {"name": "Ben"}),
        Line("subscriber", "Ben", "Can I speak to someone about my invoice?"),
        Api("/api/conversations/{ben}/tools/handoff_request", {
            "channel_id": 20, "summary": "Ben has a question about his latest invoice and wants a person.",
            "expected_action": "Answer Ben's invoice question.",
        }, answer="handoff_request on a route", view=pick("channel_kind", "channels_notified", "estimated_response"),
            keep={"ben_sid": "handoff_session_id"}),
        SETTLE,
        Catch("ben"),
        Wait("… 5 minutes pass and nobody on Support or Billing claims it; the ladder's sweep runs …",
             by=timedelta(minutes=5)),
        Catch("ben"),
        Api("/api/handoffs/{ben_sid}", answer="the handoff now", view=_ladder),
        Inbox("olga", "/inbox/handoffs/{ben_sid}/claim", note="{name} claimed it in the inbox: \"{notice}\""),
        Inbox("olga", "/inbox/handoffs/{ben_sid}/reply", {"text": "Hi Ben, which invoice number is it?"}),
        SETTLE,
        Catch("ben"),
        Api("/api/handoffs/{ben_sid}", answer="claimed", view=pick("claimed_by", "claimed_via", "step")),
        Note("Everyone the route asked is told it is taken by Olga Petrova; Ben's messages now go only to her."),
        Wait("… Ben never answers; {idle} pass and the idle sweep runs …", by="idle timeout"),
        Catch("ben"),
    )),
    Scene("8. The agent wants to refund Ana: two people must approve that exact call", (
        Api("/api/conversations/{ana}/tools/refund_order", {"order_id": "1234", "amount": 24.9},
             sent="tool call: refund_order", answer="result", view=pick("status", "approval_id", "expires_at"),
             keep={"approval": "approval_id"}),
        SETTLE,
        Outbox("{approval}", "approval prompt to the Support team"),
        Inbox("olga", "/inbox/approvals/{approval}/decision", {"decision": "approve"},
              note="{name} presses Approve in the inbox: \"{notice}\""),
        Inbox("olga", "/inbox/approvals/{approval}/decision", {"decision": "approve"},
              note="She presses it again (another tab, or Slack once her identity is linked): \"{notice}\""),
        Inbox("sam", "/inbox/approvals/{approval}/decision", {"decision": "approve"},
              note="{name} approves too, a second person: \"{notice}\""),
        SETTLE,
        Catch("ana"),
        Api("/api/approvals/{approval}", answer="each person's vote, for the owner only", view=_votes),
    )),
    Scene("9. A step only Ana can do: the agent asks her to enter a code herself", (
        Api("/api/conversations/{ana}/tools/request_user_action", {
            "reason": "verification_code", "details": "Your bank sent a 6-digit code to confirm the refund to your card.",
            "suggested_action": "Enter the code on your bank's page",
        }, note="request_user_action → {status}"),
        Catch("ana"),
        Send("ana", "Ana", "It's 482913"),
        Stored("ana", "stored, relayed and shown to the agent as: {text!r} (the code never reaches them)"),
        Send("ana", "Ana", "done"),
        SETTLE,
        Catch("ana"),
    )),
    Scene("10. At night: the person on call, then the next when she sleeps through it", (
        Note("Route 21 (Night support) offers a handoff to whoever is on call on the 'nights' schedule, one layer "
             "at a time: Olga Petrova (primary), then Sam Okafor (secondary), 10 minutes each, by e-mail."),
        Open("carl", {"name": "Carl"}),
        Line("subscriber", "Carl", "My card was charged twice tonight and my account is locked. Is anyone there?"),
        Api("/api/conversations/{carl}/tools/handoff_request", {
            "channel_id": 21, "summary": "Carl was charged twice tonight and his account is locked.",
            "expected_action": "Unlock Carl's account and refund the double charge.", "urgency": "high",
        }, answer="handoff_request on the on-call route", view=pick("people_offered", "channels_notified", "human_notified"),
            keep={"carl_sid": "handoff_session_id"}),
        Mail("olga@example.com", "the mail on Olga's phone (her first contact method)"),
        Wait("… 10 minutes pass: Olga sleeps through it, so the ladder offers it to the next layer …",
             by=timedelta(minutes=10)),
        Mail("sam@example.com", "the mail on Sam's phone"),
        Inbox("sam", "/inbox/handoffs/{carl_sid}/claim", note="{name} opens it from his mail and claims it: \"{notice}\""),
        SETTLE,
        Catch("carl"),
        Api("/api/handoffs/{carl_sid}", answer="who was offered it, on what, and how each offer ended", view=_offers),
        Audit("{carl_sid}", only=("handoff_offered", "recipient_notified", "handoff_escalated", "handoff_claimed")),
    )),
    Scene("11. The audit trail of Ana's handoff", (
        Audit("{sid}"),
    )),
    Scene("12. The report: time to a person, how handoffs ended, who handled them", (
        Report(),
    )),
)


async def run_demo(pause: float = 0.4, console: Console | None = None) -> None:
    configure_logging(level="warning", fmt="console")
    console = console or Console()
    story = Story(console, pause)
    mailbox = await LoopbackMailbox().start()
    try:
        await _run(story, mailbox)
    finally:
        await mailbox.stop()


async def _run(story: Story, mailbox: LoopbackMailbox) -> None:
    """The desk the story plays on: a SQLite file in a temporary folder, e-mail to `mailbox`."""
    with tempfile.TemporaryDirectory(prefix="handoff-demo-") as folder:
        config = Config.from_mapping({
            "database_url": f"sqlite:///{Path(folder) / 'demo.db'}",
            "secret_key": "demo-secret-key-not-for-production",
            "channels": [
                {"id": 1, "kind": "owner_inbox", "label": "Support team", "estimated_response": "within a few minutes"},
                {"id": 2, "kind": "owner_inbox", "label": "Billing team", "estimated_response": "within a few minutes"},
                {"id": 3, "kind": "owner_inbox", "label": "On-call", "estimated_response": "within 15 minutes"},
                # People's own e-mail, delivered to a mailbox on loopback that the story reads
                {"id": 4, "kind": "email", "label": "E-mail", "to": ["support@example.com"], "from_address": "desk@example.com",
                 "smtp": {"host": "127.0.0.1", "port": mailbox.port, "security": "none"}},
            ],
            # A ladder: Support and Billing at once, then the on-call person if nobody claims it in 5 minutes
            "routes": [{
                "id": 20, "label": "Invoices", "public_name": "our billing team", "estimated_response": "within 10 minutes",
                "steps": [{"notify": [1, 2], "claim_within": "5m"}, {"notify": [3], "claim_within": "10m"}],
            }, {
                # At night: the people on call, each by their own e-mail, layer after layer
                "id": 21, "label": "Night support", "public_name": "our on-call team", "estimated_response": "within 20 minutes",
                "steps": [{"notify": ["oncall:nights"], "claim_within": "10m"}],
            }],
            "people": [
                {"id": "olga", "name": "Olga Petrova", "email": "olga@example.com", "role": "admin", "contact": ["email"]},
                {"id": "sam", "name": "Sam Okafor", "email": "sam@example.com", "role": "agent", "contact": ["email"]},
            ],
            "oncall": [{"id": "nights", "label": "Nights", "timezone": "UTC", "layers": [
                {"name": "primary", "people": ["olga"], "shift": "7d", "handover": "09:00", "start": "2026-01-05"},
                {"name": "secondary", "people": ["sam"], "shift": "7d", "handover": "09:00", "start": "2026-01-05"},
            ]}],
            "actions": [{
                "id": "refund_order", "description": "Refund an order to the original payment method", "risk": "high",
                "policy": "ask_always", "approvals_required": 2, "approval_channels": [1],
                "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                                 "required": ["order_id", "amount"]},
                "run": {"callable": "bot.demo:demo_refund"},
            }],
        })
        clock = ManualClock()
        desk = Desk(config, clock=clock, run_timers=False)
        app = create_app(desk)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client:
            await _story(story, desk, client, clock, mailbox)


async def _story(story: Story, desk: Desk, client: httpx.AsyncClient, clock: ManualClock, mailbox: LoopbackMailbox) -> None:
    """Play `SCENES` in order, between the opening panel and the closing hint."""
    stage = Stage(story, desk, client, clock, began=clock.now(), mailbox=mailbox)
    stage.facts["idle"] = format_duration(desk.config.handoff.idle_timeout)
    story.console.print(Panel.fit(INTRO, title="handoff demo"))
    for scene in SCENES:
        await story.step(scene.title)
        for beat in scene.beats:
            await beat.play(stage)
    story.console.print(OUTRO)
