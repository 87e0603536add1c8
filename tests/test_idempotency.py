"""Idempotency keys (bot/domain/idempotency.py, bot/web/idempotency.py): a retried request
is answered with its first answer and stores nothing twice, across a restart too."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from bot.clients.client import DeskClient, RequestAppliedAnswerLost
from bot.config import ConfigError
from bot.domain.idempotency import Answered, AnswerLost, Claimed, IdempotencyKeys, InProgress, KeyedRequest, Reused
from bot.runtime.effects import committed_with
from bot.store.models import Conversation, IdempotencyKey
from bot.store.vocabulary import IdempotencyState
from bot.web.idempotency import caller_scope, fingerprint
from tests.approval_actions import refund_action
from tests.conftest import Harness, StartDesk, make_config
from tests.fakes import ScriptedChannel
from tests.test_cli import serving


async def post(harness: Harness, path: str, body: dict[str, Any], key: str | None, **headers: str) -> httpx.Response:
    """POST `body` as `json.dumps` writes it (so a test can fingerprint the same bytes)."""
    sent = {"content-type": "application/json", **({"Idempotency-Key": key} if key else {}), **headers}
    return await harness.client.post(path, content=json.dumps(body).encode(), headers=sent)


async def rows(harness: Harness, model: type[IdempotencyKey] | type[Conversation]) -> int:
    async with harness.desk.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def subscriber_texts(harness: Harness, cid: str) -> list[str]:
    return [m["text"] for m in await harness.messages(cid) if m["role"] == "subscriber"]


def keyed(path: str, route: str, body: dict[str, Any], key: str) -> KeyedRequest:
    """The request the API would key for a POST of `body` to `path` (route template `route`),
    sent without a bearer token: what a run of the server that was killed had begun."""
    raw = json.dumps(body).encode()
    return KeyedRequest(scope=caller_scope(f"POST {route}", None), key=key, fingerprint=fingerprint("POST", path, b"", raw))


async def test_a_retry_gets_the_first_answer_and_stores_nothing_twice(harness: Harness) -> None:
    first = await post(harness, "/api/conversations", {"subscriber": {"name": "Ana"}}, "create-1")
    again = await post(harness, "/api/conversations", {"subscriber": {"name": "Ana"}}, "create-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert await rows(harness, Conversation) == 1

    cid = first.json()["conversation_id"]
    said = await post(harness, f"/api/conversations/{cid}/messages", {"text": "Where is my order?"}, "say-1")
    resaid = await post(harness, f"/api/conversations/{cid}/messages", {"text": "Where is my order?"}, "say-1")
    assert said.status_code == 200
    assert resaid.content == said.content  # the agent's replies too, not a second turn
    assert await subscriber_texts(harness, cid) == ["Where is my order?"]
    assert len([m for m in await harness.messages(cid) if m["role"] == "agent"]) == 1


async def test_every_changing_route_replays_tool_calls_releases_and_user_actions_included(harness: Harness) -> None:
    cid = await harness.conversation()
    request = {"channel_id": 1, "summary": "Ana's order #1234 is a week late and she wants a person.",
               "expected_action": "Look up order #1234 and tell Ana when it arrives."}
    started = await post(harness, f"/api/conversations/{cid}/tools/handoff_request", request, "tool-1")
    restarted = await post(harness, f"/api/conversations/{cid}/tools/handoff_request", request, "tool-1")
    assert started.json()["ok"] is True
    assert restarted.content == started.content  # not `handoff_already_active`: the same handoff, told again
    sid = started.json()["handoff_session_id"]
    released = await post(harness, f"/api/handoffs/{sid}/release", {"outcome": "resolved"}, "release-1")
    rereleased = await post(harness, f"/api/handoffs/{sid}/release", {"outcome": "resolved"}, "release-1")
    assert released.status_code == rereleased.status_code == 200
    assert rereleased.json() == released.json()
    assert len([t for t in await harness.system_texts(cid) if t.startswith("[Bot resumed")]) == 1


async def test_an_approval_decision_is_made_and_run_once(start_desk: StartDesk, calls: list[dict[str, Any]]) -> None:
    harness = await start_desk(channels=[{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
                                         {"id": 2, "kind": "owner_inbox", "label": "Approvers"}],
                               actions=[refund_action(2)], adapters={2: ScriptedChannel})
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="A-1", amount=5)
    decided = await post(harness, f"/api/approvals/{aid}/decision", {"decision": "approve"}, "decide-1")
    await harness.desk.settle()
    redecided = await post(harness, f"/api/approvals/{aid}/decision", {"decision": "approve"}, "decide-1")
    assert decided.status_code == redecided.status_code == 200
    assert redecided.content == decided.content  # not `approval_not_pending`
    assert len(calls) == 1


async def test_an_error_answer_is_kept_and_replayed_too(harness: Harness) -> None:
    """A 4xx is the request's answer: the retry gets it again, even once the request would
    now succeed, so a client never sees one request both refused and done."""
    refused = await post(harness, "/api/handoffs/hs_nope/release", {}, "release-x")
    assert refused.status_code == 404
    invalid = await post(harness, "/api/conversations", {"subscriber": {"email": "nope"}}, "create-x")
    assert invalid.status_code == 422
    assert (await post(harness, "/api/conversations", {"subscriber": {"email": "nope"}}, "create-x")).content == invalid.content
    replayed = await post(harness, "/api/handoffs/hs_nope/release", {}, "release-x")
    assert (replayed.status_code, replayed.headers["idempotent-replayed"]) == (404, "true")
    assert replayed.json() == refused.json()


async def test_the_same_key_for_another_request_is_refused_naming_the_header(harness: Harness) -> None:
    cid = await harness.conversation()
    other = await harness.conversation()
    assert (await post(harness, f"/api/conversations/{cid}/messages", {"text": "one"}, "k-1")).status_code == 200
    for path, body in ((f"/api/conversations/{cid}/messages", {"text": "two"}),
                       (f"/api/conversations/{other}/messages", {"text": "one"})):
        reused = await post(harness, path, body, "k-1")
        assert reused.status_code == 422, path
        assert reused.json()["error"] == "idempotency_key_reused"
        assert "Idempotency-Key" in reused.json()["details"]["hint"]
    assert await subscriber_texts(harness, cid) == ["one"]
    assert await subscriber_texts(harness, other) == []
    # a key belongs to its route: the same key on another route is another request's own
    assert (await post(harness, "/api/conversations", {}, "k-1")).status_code == 201


async def test_keys_that_are_not_printable_ascii_up_to_255_are_refused_before_anything_runs(harness: Harness) -> None:
    for bad in (b"x" * 256, b"tab\there", "ключ".encode()):
        refused = await harness.client.post("/api/conversations", json={}, headers=[(b"Idempotency-Key", bad)])
        assert refused.status_code == 400, bad
        assert refused.json()["error"] == "invalid_idempotency_key"
        assert "Idempotency-Key" in refused.json()["details"]["hint"]
    empty = await harness.client.post("/api/conversations", json={}, headers=[("Idempotency-Key", "")])
    assert empty.status_code == 400
    assert await rows(harness, Conversation) == 0
    assert (await post(harness, "/api/conversations", {}, "~" * 255)).status_code == 201
    assert (await post(harness, "/api/conversations", {}, "a key with spaces, and !#$%")).status_code == 201


async def test_the_openapi_page_shows_the_header_on_the_changing_routes_only(harness: Harness) -> None:
    paths = (await harness.client.get("/api/openapi.json")).json()["paths"]

    def headers(operation: dict[str, Any]) -> list[str]:
        return [p["name"] for p in operation.get("parameters", []) if p["in"] == "header"]

    for path, method in (("/api/conversations/{cid}/messages", "post"), ("/api/approvals/{aid}/decision", "post"),
                           ("/api/user_actions/{uaid}/step", "post")):
        assert headers(paths[path][method]) == ["Idempotency-Key"], path
    assert headers(paths["/api/conversations/{cid}/messages"]["get"]) == []


async def test_requests_without_a_key_keep_nothing(harness: Harness) -> None:
    cid = await harness.conversation()
    await harness.say(cid, "hello")
    await harness.say(cid, "hello")
    assert await subscriber_texts(harness, cid) == ["hello", "hello"]
    assert await rows(harness, IdempotencyKey) == 0


async def test_two_callers_keys_never_meet(start_desk: StartDesk) -> None:
    """Without api.key any bearer passes, and each is its own caller: the same key sent by
    two of them is two requests. With api.key, an unauthorized call leaves no key behind."""
    open_desk = await start_desk()
    ana = await post(open_desk, "/api/conversations", {"subscriber": {"name": "Ana"}}, "k-1", authorization="Bearer one")
    bo = await post(open_desk, "/api/conversations", {"subscriber": {"name": "Bo"}}, "k-1", authorization="Bearer two")
    assert (ana.status_code, bo.status_code) == (201, 201)
    assert ana.json() != bo.json()

    guarded = await start_desk(api={"key": "k-123456"})  # on the same database
    wrong = await post(guarded, "/api/conversations", {}, "k-2", authorization="Bearer nope")
    assert wrong.status_code == 401
    assert await rows(guarded, IdempotencyKey) == 2  # Ana's and Bo's
    right = await post(guarded, "/api/conversations", {}, "k-2", authorization="Bearer k-123456")
    assert right.status_code == 201
    assert "idempotent-replayed" not in right.headers


async def test_a_retry_while_the_first_request_runs_is_told_to_wait(harness: Harness) -> None:
    cid = await harness.conversation()
    path = f"/api/conversations/{cid}/messages"
    running = await harness.desk.idempotency.begin(keyed(path, "/api/conversations/{cid}/messages", {"text": "hi"}, "k-1"))
    assert isinstance(running, Claimed)
    waiting = await post(harness, path, {"text": "hi"}, "k-1")
    assert waiting.status_code == 409
    assert waiting.json()["error"] == "idempotency_key_in_progress"
    assert waiting.headers["retry-after"] == "1"
    assert await subscriber_texts(harness, cid) == []


async def test_concurrent_copies_of_one_request_run_it_once(harness: Harness) -> None:
    cid = await harness.conversation()
    answers = await asyncio.gather(*(post(harness, f"/api/conversations/{cid}/messages", {"text": "hi"}, "k-1")
                                     for _ in range(4)))
    assert sorted(a.status_code for a in answers)[0] == 200
    assert {a.json().get("error") for a in answers if a.status_code != 200} <= {"idempotency_key_in_progress"}
    assert await subscriber_texts(harness, cid) == ["hi"]


async def test_a_server_error_before_any_change_lets_the_retry_run(harness: Harness) -> None:
    """A 5xx invites a retry, so its key is dropped, not kept: here the database refuses the
    message (a trigger standing in for a full disk), then takes it."""
    cid = await harness.conversation()
    path = f"/api/conversations/{cid}/messages"
    await _refuse_messages(harness, "subscriber")
    with pytest.raises(Exception, match="disk full"):  # unhandled: a 500 from the server
        await post(harness, path, {"text": "hi"}, "k-1")
    assert await rows(harness, IdempotencyKey) == 0
    await _accept_messages(harness)
    assert (await post(harness, path, {"text": "hi"}, "k-1")).status_code == 200
    assert await subscriber_texts(harness, cid) == ["hi"]


async def test_a_server_error_after_the_change_tells_the_retry_it_took_effect(harness: Harness) -> None:
    """The subscriber's message is stored (the key is marked applied with it), then storing
    the agent's reply fails: the retry must not store the message again, and is told so."""
    cid = await harness.conversation()
    path = f"/api/conversations/{cid}/messages"
    await _refuse_messages(harness, "agent")
    with pytest.raises(Exception, match="disk full"):
        await post(harness, path, {"text": "hi"}, "k-1")
    await _accept_messages(harness)
    retried = await post(harness, path, {"text": "hi"}, "k-1")
    assert retried.status_code == 409
    assert retried.json()["error"] == "request_applied_answer_lost"
    assert retried.json()["details"]["ids"] == {"conversation_id": cid}
    assert await subscriber_texts(harness, cid) == ["hi"]


async def test_after_a_restart_a_request_that_never_took_effect_runs_and_one_that_did_is_not_repeated(
    start_desk: StartDesk,
) -> None:
    """What a run killed by SIGKILL leaves: a key started but its change never committed, and
    a key applied with its change but never answered. The next run takes the first over and
    runs it, and tells the second's retry what it changed."""
    before = await start_desk()
    cid = await before.conversation()
    path, route = f"/api/conversations/{cid}/messages", "/api/conversations/{cid}/messages"
    killed = before.desk.idempotency
    never_ran = await killed.begin(keyed(path, route, {"text": "first"}, "k-started"))
    took_effect = await killed.begin(keyed(path, route, {"text": "second"}, "k-applied"))
    assert isinstance(never_ran, Claimed) and isinstance(took_effect, Claimed)
    with committed_with(killed.mark(took_effect, {"conversation_id": cid})) as effect:
        await before.desk.router.subscriber_message(cid, "second")
    assert effect.applied
    await before.desk.stop()  # neither was answered: the process is gone

    after = await start_desk(url=before.desk.config.database_url)
    ran = await post(after, path, {"text": "first"}, "k-started")
    assert ran.status_code == 200
    lost = await post(after, path, {"text": "second"}, "k-applied")
    assert lost.status_code == 409
    assert lost.json()["error"] == "request_applied_answer_lost"
    assert "took effect before a restart" in lost.json()["details"]["hint"]
    assert lost.json()["details"]["ids"] == {"conversation_id": cid}
    assert await subscriber_texts(after, cid) == ["second", "first"]
    assert (await post(after, path, {"text": "first"}, "k-started")).content == ran.content


async def test_an_instance_taken_over_can_not_apply_its_change(harness: Harness) -> None:
    """An instance wrongly taken for dead loses its key to the one that took it over: its mark
    fails inside the transaction of its change, which rolls back, so the change is made once."""
    cid = await harness.conversation()
    request = keyed(f"/api/conversations/{cid}/messages", "/api/conversations/{cid}/messages", {"text": "hi"}, "k-1")
    slow = IdempotencyKeys(harness.desk.db, harness.desk.clock, instance_id="in_slow", dead_after=lambda: 3.0)
    claim = await slow.begin(request)
    assert isinstance(claim, Claimed)
    assert isinstance(await harness.desk.idempotency.begin(request), Claimed)  # in_slow never beat: dead to it
    with pytest.raises(Exception, match="took this Idempotency-Key over"):
        with committed_with(slow.mark(claim, {})):
            await harness.desk.router.subscriber_message(cid, "hi")
    assert await subscriber_texts(harness, cid) == []


async def test_the_service_answers_each_state_of_a_key(harness: Harness) -> None:
    keys = harness.desk.idempotency
    request = KeyedRequest(scope="POST /api/x", key="k", fingerprint="f" * 64)
    claim = await keys.begin(request)
    assert isinstance(claim, Claimed)
    assert isinstance(await keys.begin(request), InProgress)
    assert isinstance(await keys.begin(KeyedRequest(scope="POST /api/x", key="k", fingerprint="0" * 64)), Reused)
    await keys.answer(claim, 201, '{"ok":true}')
    assert await keys.begin(request) == Answered(201, '{"ok":true}')
    other = await keys.begin(KeyedRequest(scope="POST /api/x", key="k2", fingerprint="f" * 64))
    assert isinstance(other, Claimed)
    await keys.forget(other)
    assert isinstance(await keys.begin(KeyedRequest(scope="POST /api/x", key="k2", fingerprint="f" * 64)), Claimed)
    async with harness.desk.db.read() as session:
        states = sorted((await session.scalars(select(IdempotencyKey.state))).all())
    assert states == [IdempotencyState.ANSWERED, IdempotencyState.STARTED]
    abandoned = await keys.begin(KeyedRequest(scope="POST /api/x", key="k3", fingerprint="f" * 64))
    assert isinstance(abandoned, Claimed)
    with committed_with(keys.mark(abandoned, {"approval_id": "ap_1"})):
        async with harness.desk.db.transaction(effect=True):
            pass
    await keys.abandon(abandoned)
    assert await keys.begin(KeyedRequest(scope="POST /api/x", key="k3", fingerprint="f" * 64)) == AnswerLost({"approval_id": "ap_1"})


async def test_keys_are_kept_for_the_retry_window_then_pruned(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"idempotency_ttl": "48h"})
    first = await post(harness, "/api/conversations", {}, "k-1")
    harness.desk.clock.advance(timedelta(hours=47))
    assert (await harness.desk.retention.prune())["idempotency_keys"] == 0
    assert (await post(harness, "/api/conversations", {}, "k-1")).content == first.content
    harness.desk.clock.advance(timedelta(hours=2))
    assert (await harness.desk.retention.prune())["idempotency_keys"] == 1
    assert (await post(harness, "/api/conversations", {}, "k-1")).json() != first.json()  # a new request now


def test_the_retry_window_is_at_least_a_day(sqlite_url: str) -> None:
    assert make_config(sqlite_url).api.idempotency_ttl == timedelta(hours=24)
    with pytest.raises(ConfigError) as caught:
        make_config(sqlite_url, api={"idempotency_ttl": "1h"})
    assert [str(p) for p in caught.value.problems] == [
        "api.idempotency_ttl: must be at least 24h: a client may retry a request for up to a day",
    ]


async def test_retries_after_a_sigkill_store_every_message_once(tmp_path: Any) -> None:
    """`handoff serve` as a real process, four clients sending keyed messages, SIGKILL once a
    random number of them were answered; then, against the restarted server, every message
    whose answer did not arrive is sent again with its key. Each is stored exactly once:
    answered ones are replayed, ones that took effect are reported lost, ones that never
    took effect run now."""
    texts = [f"message {n}" for n in range(60)]
    kill_after = random.randint(5, 40)
    answered: dict[str, int] = {}
    with serving(tmp_path) as served:
        async with DeskClient(served.base_url, retries=0) as desk:
            cid = await desk.create_conversation(name="Ana")
            queue = list(texts)
            killed = asyncio.Event()

            async def sender() -> None:
                while queue and not killed.is_set():
                    text = queue.pop(0)
                    try:
                        answered[text] = (await desk.say(cid, text, idempotency_key=text)).message_id
                    except (httpx.HTTPError, OSError):
                        return  # the server is gone; this message is retried below
                    if len(answered) >= kill_after and not killed.is_set():
                        killed.set()
                        served.process.kill()

            await asyncio.gather(*(sender() for _ in range(4)))
    with serving(tmp_path) as restarted:
        async with DeskClient(restarted.base_url, retries=5, backoff=0.05) as desk:
            for text in texts:
                try:
                    said = await desk.say(cid, text, idempotency_key=text)
                except RequestAppliedAnswerLost as lost:
                    assert text not in answered and lost.ids == {"conversation_id": cid}, text
                    continue
                if text in answered:
                    assert said.message_id == answered[text], text  # the first answer, replayed
            stored = [m.text for m in await desk.messages(cid) if m.role == "subscriber"]
    assert sorted(stored) == sorted(texts), f"killed after {kill_after} answers"


@pytest.mark.postgres
async def test_postgres_two_instances_answer_one_request_once(start_desk: StartDesk, database_url: str) -> None:
    """Two instances on one database, the same request sent to both at once: one runs it, the
    other waits or replays, and the message is stored once."""
    if not database_url.startswith("postgres"):
        pytest.skip("the two instances share a PostgreSQL database")
    one = await start_desk()
    two = await start_desk()
    cid = await one.conversation()
    path = f"/api/conversations/{cid}/messages"
    answers = await asyncio.gather(post(one, path, {"text": "hi"}, "k-1"), post(two, path, {"text": "hi"}, "k-1"))
    assert 200 in [a.status_code for a in answers]
    assert {a.json().get("error") for a in answers if a.status_code != 200} <= {"idempotency_key_in_progress"}
    assert await subscriber_texts(one, cid) == ["hi"]
    for desk in (one, two):  # each instance, whichever ran it, replays the one answer
        settled = await post(desk, path, {"text": "hi"}, "k-1")
        assert (settled.status_code, settled.headers["idempotent-replayed"]) == (200, "true")
    assert await subscriber_texts(two, cid) == ["hi"]


async def test_a_key_held_by_a_live_instance_waits_and_one_held_by_a_dead_one_is_taken_over(start_desk: StartDesk) -> None:
    """Whether the holder of a key lives is its heartbeat's word (bot/store/instances.py): a
    key of an instance beating now is in progress; once that instance has left, it runs here."""
    one = await start_desk()
    two = await start_desk()
    cid = await one.conversation()
    path = f"/api/conversations/{cid}/messages"
    held = await one.desk.idempotency.begin(keyed(path, "/api/conversations/{cid}/messages", {"text": "hi"}, "k-1"))
    assert isinstance(held, Claimed)
    assert (await post(two, path, {"text": "hi"}, "k-1")).json()["error"] == "idempotency_key_in_progress"
    await one.desk.stop()  # it leaves the instances: its started key never took effect
    assert (await post(two, path, {"text": "hi"}, "k-1")).status_code == 200
    assert await subscriber_texts(two, cid) == ["hi"]


async def _refuse_messages(harness: Harness, role: str) -> None:
    async with harness.desk.db.transaction() as session:
        if harness.desk.db.is_sqlite:
            await session.execute(text(
                f"CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.role = '{role}' "
                "BEGIN SELECT RAISE(ABORT, 'disk full'); END"))
            return
        await session.execute(text(
            "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN "
            f"IF NEW.role = '{role}' THEN RAISE EXCEPTION 'disk full'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql"))
        await session.execute(text("CREATE TRIGGER refuse BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION refuse()"))


async def _accept_messages(harness: Harness) -> None:
    async with harness.desk.db.transaction() as session:
        await session.execute(text("DROP TRIGGER refuse" if harness.desk.db.is_sqlite else "DROP TRIGGER refuse ON messages"))
