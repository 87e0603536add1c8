"""`handoff demo`: the whole story in a terminal, offline, with the real parts.

It runs a real server (app, SQLite file in a temporary folder, owner inbox channel, rules
agent) and drives it through the HTTP API the way an integrator would; the owner's side
goes through the same inbox path a person's browser uses. Time is a manual clock, so the
idle timeout at the end happens without waiting 30 minutes.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

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
from channels.base import RecipientText

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


async def run_demo(pause: float = 0.4, console: Console | None = None) -> None:
    configure_logging(level="warning", fmt="console")
    console = console or Console()
    story = Story(console, pause)
    with tempfile.TemporaryDirectory(prefix="handoff-demo-") as folder:
        config = Config.from_mapping({
            "database_url": f"sqlite:///{Path(folder) / 'demo.db'}",
            "secret_key": "demo-secret-key-not-for-production",
            "channels": [
                {"id": 1, "kind": "owner_inbox", "label": "Support team", "estimated_response": "within a few minutes"},
                {"id": 2, "kind": "owner_inbox", "label": "Billing team", "estimated_response": "within a few minutes"},
                {"id": 3, "kind": "owner_inbox", "label": "On-call", "estimated_response": "within 15 minutes"},
            ],
            # A ladder: Support and Billing at once, then the on-call person if nobody claims it in 5 minutes
            "routes": [{
                "id": 20, "label": "Invoices", "public_name": "our billing team", "estimated_response": "within 10 minutes",
                "steps": [{"notify": [1, 2], "claim_within": "5m"}, {"notify": [3], "claim_within": "10m"}],
            }],
            "actions": [{
                "id": "refund_order", "description": "Refund an order to the original payment method", "risk": "high",
                "policy": "ask_always", "approval_channels": [1],
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
            await _story(story, desk, client, clock)


async def _story(story: Story, desk: Desk, client: httpx.AsyncClient, clock: ManualClock) -> None:
    console = story.console
    began = clock.now()
    console.print(Panel.fit(
        "Handoff Desk demo: an AI agent hands a conversation to a person and takes it back.\n"
        "Everything below runs locally: the real server, a SQLite file, the owner inbox channel and the built-in rules agent.",
        title="handoff demo",
    ))

    await story.step("1. Ana opens the chat")
    cid = (await client.post("/api/conversations", json={"subscriber": {"name": "Ana", "email": "ana@example.com"}})).json()["conversation_id"]
    story.note(f"POST /api/conversations → {cid}")

    async def ana(text: str) -> dict[str, Any]:
        story.say("subscriber", "Ana", text)
        body: dict[str, Any] = (await client.post(f"/api/conversations/{cid}/messages", json={"text": text})).json()
        for reply in body["replies"]:
            story.say(reply["role"], "Assistant", reply["text"])
        return body

    await ana("Hi!")

    async def tell_ben(ben: str, *, after: int) -> int:
        """What the desk and the people told Ben since message `after`; returns the last id."""
        messages = (await client.get(f"/api/conversations/{ben}/messages", params={"after": after})).json()["messages"]
        for message in messages:
            if message["role"] != "subscriber":
                story.say(message["role"], message.get("author") or "Assistant", message["text"])
        return int(messages[-1]["id"]) if messages else after

    await story.step("2. Ana asks for a person; the agent calls handoff_request")
    body = await ana("My order #1234 was due Monday and still hasn't arrived. Can I talk to a person?")
    sid = body["handoff_session_id"]
    events = (await client.get(f"/api/handoffs/{sid}/events")).json()["events"]
    request = next(e for e in events if e["kind"] == "handoff_requested")["detail"]["request"]
    story.json("tool call: handoff_request", request)
    handoff = (await client.get(f"/api/handoffs/{sid}")).json()
    story.json("handoff session", {k: handoff[k] for k in ("handoff_session_id", "state", "channel_label", "idle_deadline")})

    await story.step("3. What the support team receives")
    async with desk.db.transaction() as session:
        dispatch = (await session.scalars(
            select(OutboxItem).where(col(OutboxItem.handoff_session_id) == sid, col(OutboxItem.purpose) == "dispatch")
        )).one()
    console.print(Panel(Text(dispatch.payload["text"]), title=f"dispatch to {handoff['channel_label']}", expand=False))

    await story.step("4. The AI is bypassed: messages relay both ways")
    body = await ana("The tracking page just says 'label created'.")
    story.note(f"routed_to: {body['routed_to']} (the agent did not see it)")
    await desk.settle()
    await desk.inbound.submit_and_wait(1, RecipientText(
        thread_key=sid, author="Sam (support)",
        text="Hi Ana, Sam here. The parcel was stuck at the depot; I've re-shipped it with express delivery today.",
    ))
    last = (await client.get(f"/api/conversations/{cid}/messages")).json()["messages"][-1]
    story.say(last["role"], last["author"], last["text"])
    await ana("Great, thank you!")
    await desk.settle()

    await story.step("5. Sam releases the handoff with the data the agent asked for")
    release = {
        "outcome": "resolved",
        "note": "Re-shipped express.",
        "return_values": {"resolution": "Re-shipped order #1234 with express delivery; arrives Thursday.", "follow_up_needed": False},
    }
    story.json("POST /api/handoffs/{sid}/release", release)
    await client.post(f"/api/handoffs/{sid}/release", json=release)
    await desk.settle()
    for message in (await client.get(f"/api/conversations/{cid}/messages", params={"after": last["id"]})).json()["messages"]:
        if message["role"] in ("system", "agent"):
            story.say(message["role"], "System" if message["role"] == "system" else "Assistant", message["text"])

    await story.step("6. Later: Ben asks about an invoice; the agent hands to the Invoices route")
    ben = (await client.post("/api/conversations", json={"subscriber": {"name": "Ben"}})).json()["conversation_id"]
    story.say("subscriber", "Ben", "Can I speak to someone about my invoice?")
    call = {"channel_id": 20, "summary": "Ben has a question about his latest invoice and wants a person.",
            "expected_action": "Answer Ben's invoice question."}
    started = (await client.post(f"/api/conversations/{ben}/tools/handoff_request", json=call)).json()
    story.json("handoff_request on a route", {k: started[k] for k in ("channel_kind", "channels_notified", "estimated_response")})
    await desk.settle()
    await tell_ben(ben, after=0)
    seen = (await client.get(f"/api/conversations/{ben}/messages")).json()["messages"][-1]["id"]
    clock.advance(timedelta(minutes=5))
    story.note("… 5 minutes pass and nobody on Support or Billing claims it; the ladder's sweep runs …")
    await desk.timers.sweep()
    await desk.settle()
    seen = await tell_ben(ben, after=seen)
    handoff = (await client.get(f"/api/handoffs/{started['handoff_session_id']}")).json()
    story.json("the handoff now", {"step": handoff["step"] + 1, "notified": [
        f"{r['channel_label']} (step {r['step'] + 1})" for r in handoff["recipients"]]})
    on_call = next(r for r in handoff["recipients"] if r["channel_id"] == 3)
    thread = (await desk.handoffs.recipient_on(handoff["handoff_session_id"], on_call["channel_id"]))
    assert thread is not None and thread.thread_key is not None
    await desk.inbound.submit_and_wait(3, RecipientText(
        thread_key=thread.thread_key, author="Olga", text="Hi Ben, Olga here. Which invoice number is it?",
    ))
    await desk.settle()
    seen = await tell_ben(ben, after=seen)
    handoff = (await client.get(f"/api/handoffs/{started['handoff_session_id']}")).json()
    story.json("claimed", {k: handoff[k] for k in ("claimed_by", "claimed_via", "channel_label")})
    story.note("Support and Billing are told \"taken by Olga (On-call)\"; Ben's messages now go only to her.")
    clock.advance(desk.config.handoff.idle_timeout + timedelta(seconds=1))
    story.note(f"… Ben never answers; {format_duration(desk.config.handoff.idle_timeout)} pass and the idle sweep runs …")
    await desk.timers.sweep()
    await desk.settle()
    for message in (await client.get(f"/api/conversations/{ben}/messages", params={"after": seen})).json()["messages"]:
        story.say(message["role"], "System" if message["role"] == "system" else "Assistant", message["text"])

    await story.step("7. The agent wants to refund Ana: a person must approve that exact call")
    call = {"order_id": "1234", "amount": 24.9}
    story.json("tool call: refund_order", call)
    pending = (await client.post(f"/api/conversations/{cid}/tools/refund_order", json=call)).json()
    story.json("result", {k: pending[k] for k in ("status", "approval_id", "expires_at")})
    await desk.settle()
    async with desk.db.transaction() as session:
        prompt = (await session.scalars(
            select(OutboxItem).where(col(OutboxItem.handoff_session_id) == pending["approval_id"])
        )).first()
    assert prompt is not None
    console.print(Panel(Text(prompt.payload["text"]), title="approval prompt to the Support team", expand=False))
    page = prompt.payload["approval"]["decision_url"].removeprefix(desk.config.public_url)
    token = page.rsplit("/", 1)[1]
    story.note(f"Sam opens the link (GET shows, it decides nothing) and presses Approve: POST {page[:24]}…")
    await client.post(page, data={"token": token, "decision": "approve", "name": "Sam"})
    await desk.settle()
    for message in (await client.get(f"/api/conversations/{cid}/messages")).json()["messages"][-2:]:
        story.say(message["role"], "System" if message["role"] == "system" else "Assistant", message["text"])
    receipt = (await client.get(f"/api/approvals/{pending['approval_id']}")).json()["receipt"]
    story.json("the receipt, for the owner only", {k: receipt[k] for k in ("decided_by", "via", "arguments_hash")})

    await story.step("8. A step only Ana can do: the agent asks her to enter a code herself")
    asked = (await client.post(f"/api/conversations/{cid}/tools/request_user_action", json={
        "reason": "verification_code", "details": "Your bank sent a 6-digit code to confirm the refund to your card.",
        "suggested_action": "Enter the code on your bank's page",
    })).json()
    story.note(f"request_user_action → {asked['status']}")
    story.say("agent", "Assistant", (await client.get(f"/api/conversations/{cid}/messages")).json()["messages"][-1]["text"])
    await ana("It's 482913")
    stored = [m for m in (await client.get(f"/api/conversations/{cid}/messages")).json()["messages"] if m["role"] == "subscriber"]
    story.note(f"stored, relayed and shown to the agent as: {stored[-1]['text']!r} (the code never reaches them)")
    await ana("done")
    await desk.settle()
    for message in (await client.get(f"/api/conversations/{cid}/messages")).json()["messages"][-2:]:
        story.say(message["role"], "System" if message["role"] == "system" else "Assistant", message["text"])

    await story.step("9. The audit trail of Ana's handoff")
    for event in (await client.get(f"/api/handoffs/{sid}/events")).json()["events"]:
        console.print(Text.assemble(f"  {event['created_at'][11:23]}  ", (f"{event['kind']:<24}", "bold"), f" {event['actor']}"))
    await story.step("10. The owner's report: time to a person, how handoffs ended")
    await _report(story, desk, began, clock.now())
    console.print(
        "\nNext: [bold]handoff serve --config config.example.yaml[/bold], then open /inbox and drive the API "
        "(see README)."
    )


async def _report(story: Story, desk: Desk, start: datetime, end: datetime) -> None:
    """The summary behind the Reports page, over everything the demo did."""
    summary = await desk.reports.summary(start, end + timedelta(seconds=1))
    reached, lasted, endings = summary.time_to_person, summary.duration, summary.endings
    table = Table(title="Reports (the figures of /inbox/reports)", show_header=False, box=None, padding=(0, 2))
    table.add_row("handoffs", str(summary.handoffs))
    table.add_row("time to a person", f"p50 {_seconds(reached.p50)}, max {_seconds(reached.max)}"
                                      f" ({reached.count} reached, {reached.missing} not)")
    table.add_row("duration", f"p50 {_seconds(lasted.p50)}, max {_seconds(lasted.max)} ({lasted.count} ended)")
    table.add_row("ended by", ", ".join(f"{t.word.replace('_', ' ')} {t.count}" for t in endings.by_reason) or "—")
    table.add_row("handled without a person", f"{summary.containment.contained} of {summary.containment.conversations}"
                                              " conversations")
    story.console.print(table)
    story.note("The Reports page draws these as charts, per day and per channel or route, with a CSV of the rows.")


def _seconds(value: float | None) -> str:
    return "—" if value is None else format_duration(timedelta(seconds=round(value)))
