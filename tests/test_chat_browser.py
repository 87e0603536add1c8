"""The web chat in a real browser, next to the owner inbox: two pages, two people.

A subscriber asks for a person on /chat; the owner sees the handoff in /inbox and answers;
the answer appears live on the subscriber's page; the owner releases and the subscriber
sees the assistant back. Everything runs under the pages' strict CSP (no violations).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from bot.desk import Desk
from tests.conftest import CHROMIUM, shot

if not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does)", allow_module_level=True)

API_KEY = "chat-browser-api-key-0123456789"


@pytest.fixture
def served_config() -> dict[str, Any]:
    return {"fronts": [{"kind": "web", "title": "Acme help", "greeting": "Hi! Ask us anything."}], "api": {"key": API_KEY}}


async def test_a_subscriber_and_the_owner_side_by_side(served: tuple[Desk, str], page: Any) -> None:
    desk, base = served
    subscriber = page
    owner = await page.context.new_page()
    owner.problems = []
    owner.on("pageerror", lambda exc: owner.problems.append(str(exc)))

    await subscriber.set_viewport_size({"width": 420, "height": 820})
    await subscriber.goto(f"{base}/chat")
    await subscriber.wait_for_selector("text=Hi! Ask us anything.")
    assert API_KEY not in await subscriber.content()

    async def say(text: str) -> None:
        await subscriber.fill("#text", text)
        await subscriber.press("#text", "Enter")
        await subscriber.wait_for_selector(f".msg.subscriber >> text={text}")

    await say("Hi!")
    await subscriber.wait_for_selector(".msg.agent >> text=I'm Assistant")
    await say("My parcel is late. Can I talk to a person?")
    await subscriber.wait_for_selector(".msg.agent >> text=I've asked our team to join")
    # nobody has joined yet: the banner says who is awaited and how soon
    await subscriber.wait_for_selector("#person >> text=Waiting for our team to join — usually within 1 business day.")
    assert await subscriber.locator(".msg.agent >> text=I've asked our team to join").count() == 1  # once, not per poll

    await owner.goto(f"{base}/inbox")
    await owner.click(".card a")
    await owner.wait_for_selector("#transcript >> text=Can I talk to a person?")
    await owner.fill("#reply-text", "Hi, Sam here. Your parcel left the depot this morning.")
    await owner.click(".reply button[type=submit]")
    await subscriber.wait_for_selector(".msg.human >> text=Sam here", timeout=15_000)  # live, no reload
    author = await subscriber.inner_text(".msg.human .author")  # whatever name the inbox signs replies with
    await subscriber.wait_for_selector(f"#person >> text={author} has joined the conversation.")
    await shot(subscriber, "chat-handoff")

    await say("Thank you!")
    await owner.wait_for_selector("#transcript >> text=Thank you!", timeout=15_000)
    await owner.select_option("#outcome", "resolved")
    await owner.click(".release button[type=submit]")
    await owner.wait_for_selector("text=Released; the assistant has the conversation again.")
    await desk.settle()
    await subscriber.wait_for_selector(".msg.agent >> text=has handed the conversation back to the assistant.", timeout=15_000)
    assert await subscriber.locator("#person").is_hidden()
    assert await subscriber.locator(".msg >> text=[Bot resumed").count() == 0  # written for the agent only

    await subscriber.reload()  # the conversation survives a reload
    await subscriber.wait_for_selector(".msg.human >> text=Sam here")
    assert await subscriber.locator(".msg.subscriber").count() == 3
    assert API_KEY not in await subscriber.content()
    assert subscriber.problems == []
    assert owner.problems == []


@pytest.mark.parametrize("served_config", [{"fronts": [{"kind": "web", "max_messages_per_minute": 1}]}])
async def test_over_the_limit_the_page_says_so_and_keeps_the_text(served: tuple[Desk, str], page: Any) -> None:
    _desk, base = served
    await page.goto(f"{base}/chat")
    await page.fill("#text", "Hi!")
    await page.press("#text", "Enter")
    await page.wait_for_selector(".msg.agent >> text=I'm Assistant")
    await page.fill("#text", "Hello again")
    await page.press("#text", "Enter")
    await page.wait_for_selector("#error >> text=That's a lot of messages in a short time. Please wait 60 seconds, then send it again.")
    assert await page.input_value("#text") == "Hello again"  # nothing lost: send it again later
    assert await page.locator(".msg.subscriber").count() == 1
    # the browser logs the refused request itself; nothing else went wrong
    assert all("429" in problem for problem in page.problems), page.problems


# --------------------------------------------------------------------------- on a phone

LAYOUT = """() => {
  const box = (element) => element.getBoundingClientRect().toJSON();
  const log = document.getElementById("log");
  return {
    scrollWidth: document.documentElement.scrollWidth, innerWidth, innerHeight,
    messagesHeight: log.scrollHeight, log: box(log),
    last: box([...log.querySelectorAll(".msg")].pop()), composer: box(document.getElementById("form")),
    banner: box(document.getElementById("person")), header: box(document.querySelector(".top")),
  };
}"""
NEWEST_IN_VIEW = """() => {
  const log = document.getElementById("log").getBoundingClientRect();
  const last = [...document.querySelectorAll("#log .msg")].pop().getBoundingClientRect();
  const composer = document.getElementById("form").getBoundingClientRect();
  return last.bottom <= composer.top && last.bottom <= log.bottom + 1 && composer.bottom <= innerHeight;
}"""


def assert_phone_layout(layout: dict[str, Any], when: str) -> None:
    last, composer, log = layout["last"], layout["composer"], layout["log"]
    assert layout["scrollWidth"] <= layout["innerWidth"], f"{when}: the page scrolls sideways: {layout}"
    assert layout["messagesHeight"] > layout["innerHeight"], f"{when}: too few messages to scroll; this proves nothing: {layout}"
    assert last["bottom"] <= composer["top"], f"{when}: the newest message ends under the composer: {layout}"
    assert log["top"] <= last["top"], f"{when}: the newest message is not in view: {layout}"
    assert last["bottom"] <= log["bottom"] + 1, f"{when}: the newest message is not in view: {layout}"
    assert composer["bottom"] <= layout["innerHeight"], f"{when}: the composer is below the screen: {layout}"
    assert layout["header"]["top"] == 0, f"{when}: the header or the banner scrolled away: {layout}"
    assert layout["banner"]["top"] >= layout["header"]["bottom"], f"{when}: the header or the banner scrolled away: {layout}"
    assert layout["banner"]["bottom"] <= log["top"], f"{when}: the banner covers messages: {layout}"


async def test_on_a_phone_the_newest_message_stays_above_the_composer(served: tuple[Desk, str], page: Any) -> None:
    from sqlalchemy import select

    from bot.store.models import HandoffSession

    desk, base = served
    await page.set_viewport_size({"width": 375, "height": 812})
    await page.goto(f"{base}/chat")
    await page.fill("#text", "My parcel is late. Can I talk to a person?")
    await page.press("#text", "Enter")
    await page.wait_for_selector("#person >> text=Waiting for our team to join — usually within 1 business day.")
    async with desk.db.read() as session:
        handoff = (await session.scalars(select(HandoffSession))).one()
    conversation = [
        "Hi, Sam here. Let me look up your order.", "Thanks! It's order 1234.",
        "Found it: it left the depot this morning.", "Great, when will it arrive?",
        "Tomorrow before noon. Tracking: https://carrier.example/track/" + "A1B2C3D4" * 12,  # one long unbreakable word
        "Can I change the address?", "Yes — what's the new one?", "12 Harbour Street, flat 3.",
        "Done: the driver has the new address.", "Perfect, thank you so much!",
        "You're welcome! Anything else I can help with?",
    ]
    for n, text in enumerate(conversation):
        if n % 2:
            await desk.router.subscriber_message(handoff.conversation_id, text)
        else:
            await desk.handoffs.recipient_message(handoff.id, text, author="Sam", via="test")
    await page.wait_for_selector(f".msg.human >> text={conversation[-1]}")
    await page.wait_for_selector("#person >> text=Sam has joined the conversation.")
    await page.wait_for_function(NEWEST_IN_VIEW)
    assert_phone_layout(await page.evaluate(LAYOUT), "375x812")
    await shot(page, "chat-phone")

    # the on-screen keyboard: the composer has focus and the viewport gets shorter
    await page.focus("#text")
    await page.set_viewport_size({"width": 375, "height": 420})
    await page.wait_for_function(NEWEST_IN_VIEW)
    assert_phone_layout(await page.evaluate(LAYOUT), "375x420, keyboard open")
    assert page.problems == []


# The subscriber's place in the transcript while messages arrive: at (or near) the bottom they
# follow the newest message; scrolled up to read, they stay where they are.

RENDERED = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"
FROM_THE_BOTTOM = """() => { const log = document.getElementById("log");
  return log.scrollHeight - log.scrollTop - log.clientHeight; }"""


async def an_overflowing_chat(desk: Desk, base: str, page: Any) -> str:
    """A chat on a phone, longer than the screen, its newest message in view: the conversation's id."""
    from sqlalchemy import select

    from bot.store.models import Conversation

    await page.set_viewport_size({"width": 375, "height": 812})
    await page.goto(f"{base}/chat")
    await send(page, "Hi!")
    await page.wait_for_selector(".msg.agent >> text=I'm Assistant")
    async with desk.db.read() as session:
        cid = str((await session.scalars(select(Conversation.id))).one())
    for n in range(6):
        await desk.router.subscriber_message(cid, f"Earlier question {n}: " + "and a few more words " * 4)
    await page.wait_for_function("() => document.querySelectorAll('#log .msg.agent').length === 8")  # greeting, 1 + 6 answers
    await page.wait_for_function(NEWEST_IN_VIEW)
    layout = await page.evaluate(LAYOUT)
    assert layout["messagesHeight"] > layout["innerHeight"], f"too few messages to scroll; this proves nothing: {layout}"
    return cid


async def scroll_to(page: Any, from_the_bottom: float) -> None:
    """The subscriber scrolls the transcript with the mouse wheel until it is this far from its end."""
    log = await page.locator("#log").bounding_box()
    await page.mouse.move(log["x"] + log["width"] / 2, log["y"] + log["height"] / 2)
    await page.mouse.wheel(0, await page.evaluate(FROM_THE_BOTTOM) - from_the_bottom)
    await page.wait_for_function(f"() => Math.abs(({FROM_THE_BOTTOM})() - {from_the_bottom}) < 1")


async def assert_newest_above_the_composer(page: Any, text: str, when: str) -> None:
    await page.wait_for_selector(f"#log .msg:last-child >> text={text}")
    await page.evaluate(RENDERED)  # the frame after it, where scrolling and resizes have run
    layout = await page.evaluate(LAYOUT)
    last, composer = layout["last"], layout["composer"]
    assert last["bottom"] <= composer["top"], f"{when}: the newest message ends under the composer: {layout}"
    assert last["bottom"] <= layout["innerHeight"], f"{when}: the newest message ends below the screen: {layout}"
    assert last["top"] >= layout["log"]["top"], f"{when}: the newest message is not in view: {layout}"


async def test_on_a_phone_the_newest_message_stays_in_view_as_messages_arrive(served: tuple[Desk, str], page: Any) -> None:
    from sqlalchemy import select

    from bot.store.models import HandoffSession

    desk, base = served
    await an_overflowing_chat(desk, base, page)
    await scroll_to(page, 0)

    # the subscriber's message, the assistant's answer and the banner that appears with it
    await send(page, "My parcel is late. Can I talk to a person?")
    await page.wait_for_selector("#person >> text=Waiting for our team to join")
    await assert_newest_above_the_composer(page, "I've asked our team to join", "the handoff starts")

    async with desk.db.read() as session:
        handoff = (await session.scalars(select(HandoffSession))).one()
    await scroll_to(page, 40)  # near the end, not quite at it
    reply = "Hi, Sam here. Let me look that up for you — one moment please, I'm checking with the depot."
    await desk.handoffs.recipient_message(handoff.id, reply, author="Sam", via="test")
    await page.wait_for_selector("#person >> text=Sam has joined the conversation.")
    await assert_newest_above_the_composer(page, reply, "a person's reply, 40 px from the end")

    await scroll_to(page, 0)
    reply = "Found it: it left the depot this morning and arrives tomorrow before noon."
    await desk.handoffs.recipient_message(handoff.id, reply, author="Sam", via="test")
    await assert_newest_above_the_composer(page, reply, "a person's reply, at the end")

    await page.focus("#text")  # the on-screen keyboard opens: the page gets shorter
    await page.set_viewport_size({"width": 375, "height": 420})
    await page.evaluate(RENDERED)
    reply = "Anything else I can help with?"
    await desk.handoffs.recipient_message(handoff.id, reply, author="Sam", via="test")
    await assert_newest_above_the_composer(page, reply, "a person's reply, keyboard open")
    assert page.problems == []


async def test_on_a_phone_a_reply_leaves_a_subscriber_reading_history_where_they_are(
    served: tuple[Desk, str], page: Any,
) -> None:
    desk, base = served
    cid = await an_overflowing_chat(desk, base, page)
    await scroll_to(page, 300)  # up, to read an earlier message
    reading = await page.evaluate("() => document.getElementById('log').scrollTop")
    assert await page.locator("#news").is_hidden()

    await desk.router.subscriber_message(cid, "A message from another tab of mine.")
    await page.wait_for_selector("#log .msg.agent:last-child >> text=I've noted that", state="attached")
    await page.evaluate(RENDERED)
    assert await page.evaluate("() => document.getElementById('log').scrollTop") == reading, "the subscriber was moved"
    assert await page.evaluate(FROM_THE_BOTTOM) > 300, "the new messages did not lengthen the transcript"

    assert await page.locator("#news").is_visible(), "no sign of the new messages below"
    await page.click("#news >> text=New messages")  # the way down to them
    await assert_newest_above_the_composer(page, "I've noted that", "after New messages")
    await page.wait_for_selector("#news", state="hidden")
    assert page.problems == []


# --------------------------------------------------------------------------- the desk out of reach


async def subscriber_texts(desk: Desk, text: str) -> int:
    """How many times the desk stored this subscriber message."""
    from sqlalchemy import func, select

    from bot.store.models import Message

    async with desk.db.read() as session:
        return int(await session.scalar(
            select(func.count()).select_from(Message).where(Message.role == "subscriber", Message.text == text)) or 0)


async def send(page: Any, text: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")


async def chat_with_the_clock_paused(page: Any, base: str) -> None:
    """A started chat (one exchange) whose timers then stand still: a retry's backoff runs
    only when the test moves the page's clock, so nothing here waits for real seconds."""
    await page.clock.install()
    await page.goto(f"{base}/chat")
    await send(page, "Hi!")
    await page.wait_for_selector(".msg.agent >> text=I'm Assistant")
    await page.clock.pause_at(await page.evaluate("Date.now()") + 100)


def is_a_stored_check(request: Any) -> bool:
    """A retry's first step: reading the conversation (no long-poll wait) to see whether the
    unanswered attempt was stored after all."""
    return request.method == "GET" and "/chat/api/messages?after=" in request.url and "wait=" not in request.url


async def test_a_send_that_cannot_reach_the_desk_says_so_and_is_retried(served: tuple[Desk, str], page: Any) -> None:
    desk, base = served
    await chat_with_the_clock_paused(page, base)

    tried: list[str] = []

    async def down(route: Any) -> None:  # nothing reaches the desk
        tried.append(f"{route.request.method} {route.request.url.removeprefix(base)}")
        await route.abort("connectionrefused")

    await page.route("**/chat/api/**", down)
    text = "Is my parcel on its way?"
    await send(page, text)
    await page.wait_for_selector("#error >> text=Can't reach the desk — retrying…")
    assert "Failed to fetch" not in await page.inner_text("body")
    assert await page.input_value("#text") == text  # kept
    assert [t for t in tried if not t.endswith("&wait=25")] == ["POST /chat/api/messages"]  # the long-poll aside

    async with page.expect_request(is_a_stored_check):
        await page.clock.fast_forward(1000)  # the first backoff: it tries again on its own, looking first
    assert await page.locator("#retry").is_visible()

    await page.unroute("**/chat/api/**")
    await page.click("#retry")  # the desk is back: "Retry now" sends it
    await page.wait_for_selector(f".msg.subscriber >> text={text}")
    await page.wait_for_selector("#error-box", state="hidden")
    assert await page.input_value("#text") == ""
    assert await subscriber_texts(desk, text) == 1
    assert all("net::ERR_CONNECTION_REFUSED" in problem for problem in page.problems), page.problems


async def test_a_send_whose_answer_was_lost_is_not_stored_twice(served: tuple[Desk, str], page: Any) -> None:
    desk, base = served
    await chat_with_the_clock_paused(page, base)

    async def answer_lost(route: Any) -> None:  # the desk stores the message, then the connection breaks
        if route.request.method != "POST":
            await route.continue_()
            return
        await route.fetch()
        await route.abort("connectionreset")

    await page.route("**/chat/api/messages", answer_lost)
    text = "Please send it to my office instead."
    await send(page, text)
    await page.wait_for_selector("#error >> text=Can't reach the desk — retrying…")
    assert await subscriber_texts(desk, text) == 1  # it did arrive; the page cannot know
    async with page.expect_request(is_a_stored_check):
        await page.clock.fast_forward(1000)  # the retry finds it stored and does not send it again
    await page.wait_for_selector("#error-box", state="hidden")
    assert await page.input_value("#text") == ""
    assert await page.locator(f".msg.subscriber >> text={text}").count() == 1
    assert await subscriber_texts(desk, text) == 1
    assert all("net::ERR_CONNECTION_RESET" in problem for problem in page.problems), page.problems
