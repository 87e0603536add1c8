"""Crash tests: real `handoff serve` processes under load, killed with SIGKILL at a random
point, then restarted (SQLite) or survived by a second instance (PostgreSQL).

What must hold, judged from what the fake Slack recorded and what the API answered: every
subscriber message the API acknowledged reached its Slack thread exactly once and in order
(one whose answer was lost in the crash at most once), every human reply Slack was
acknowledged for reached the subscriber exactly once although each callback came twice, and
each conversation's relays that were pending at the kill resumed soon: within 5 s of the
restarted desk being ready (its people's replies too), or within two heartbeats of the kill
when another instance takes over (there the replies' delays are measured and printed only,
as the bound is the relays': on PostgreSQL replies run a second or more behind under this
load even without a kill). A client that retries with its `Idempotency-Key` after the kill
stores nothing twice. A control run without a kill shows that the checks find nothing in a
run that went well.

The kill point is drawn from a seed printed with every run; HANDOFF_CRASH_SEED=<seed>
repeats a run's kill point. Counts are bounded (10 handoffs, 300 subscriber messages, 100
replies each POSTed twice) so each test stays well under a minute.
"""

from __future__ import annotations

import os
import random
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from tests.crash_harness import (
    HEARTBEAT,
    REQUEST_TIMEOUT,
    Answer,
    Crash,
    DeskProcess,
    Desks,
    Findings,
    Gateway,
    Load,
    SlackInThread,
    free_port,
    heartbeat_settings,
    open_handoffs,
    relay_problems,
    reply_problems,
    resumption_problems,
    settled,
    summary,
    write_config,
)

CONVERSATIONS = 10
MESSAGES_EACH = 30  # 300 subscriber messages
REPLIES = 100  # each POSTed twice with one event id
RESTART_BOUND = 5.0  # seconds from the restarted desk's readiness to each pending stream's first delivery

# Each test starts two or three Python processes and waits up to SETTLE_TIMEOUT for work still
# on its way: more than the suite's default timeout allows on a slow, shared machine.
pytestmark = pytest.mark.timeout(300)


def crash_seed() -> int:
    """The seed of this run's kill point: HANDOFF_CRASH_SEED, else a fresh one (printed)."""
    seed = int(os.environ.get("HANDOFF_CRASH_SEED") or random.SystemRandom().randrange(1_000_000))
    print(f"crash seed {seed}")
    return seed


def report(findings: Findings, delays: list[str], desks: Desks) -> None:
    """Print what the run measured (shown when the test fails, or with -s) and fail on any finding."""
    print(findings.summary)
    print("delivery after the kill, per stream that had work pending:\n  " + "\n  ".join(delays or ["(none pending)"]))
    print(desks.output())
    findings.assert_none()


def killed_and_restarted(config: Path, database_url: str, slack: SlackInThread, desks: Desks, kill_after: int, *,
                         messages_each: int, replies: int, idempotent: bool = False) -> tuple[Load, DeskProcess, Crash]:
    """One desk under a `Load`, SIGKILLed once `kill_after` requests were
    acknowledged, the clients waiting while it is down, then started again on the same port
    and database; returns when the load is done: the load, the restarted desk, the crash."""
    port = free_port()
    write_config(config, port=port, database_url=database_url, slack_url=slack.url)
    desk = desks.start("a", config, port)
    gateway = Gateway({"a": desk.base_url})
    running = Load(gateway, open_handoffs(desk.base_url, ["a"], CONVERSATIONS), messages_each=messages_each,
                   replies=replies, idempotent=idempotent).start()
    running.wait_acknowledged(kill_after)
    gateway.route("a", None)  # the clients wait for the desk to come back
    desk.kill()
    posts_at_kill = slack.posts()
    restarted = desks.start("a, restarted", config, port)
    gateway.route("a", restarted.base_url)
    crash = Crash(dead="a", killed_at=desk.killed_at, resumable_at=restarted.ready_at, posts_at_kill=posts_at_kill,
                  bound=RESTART_BOUND, since="the restarted desk was ready")
    running.join()
    return running, restarted, crash


def judge(findings: Findings, load: Load, crash: Crash, slack: SlackInThread, base_url: str, desks: Desks) -> None:
    """Once the work still on its way has come (or SETTLE_TIMEOUT passed): each message and
    reply exactly once, and what was pending at the kill delivered within the bound."""
    posts, seen = settled(load, slack, base_url)
    findings.add("subscriber messages into Slack", relay_problems(load, posts))
    findings.add("human replies to the subscriber", reply_problems(load, seen))
    late, delays = resumption_problems(load, posts, seen, crash)
    findings.add("delivery resumed", late)
    report(findings, delays, desks)


def test_a_run_without_a_kill_passes_every_check(tmp_path: Path, sqlite_url: str) -> None:
    """The control: the same load on a desk left running delivers everything once, in order,
    so what the crash tests report is the crash's doing, not the harness's."""
    port = free_port()
    with SlackInThread() as slack, closing(Desks()) as desks:
        config = write_config(tmp_path / "desk.yaml", port=port, database_url=sqlite_url, slack_url=slack.url)
        desk = desks.start("a", config, port)
        load = Load(Gateway({"a": desk.base_url}), open_handoffs(desk.base_url, ["a"], CONVERSATIONS),
                    messages_each=MESSAGES_EACH, replies=REPLIES).start()
        load.join()
        posts, seen = settled(load, slack, desk.base_url)

        findings = Findings(summary("SQLite, no kill", 0, 0, load))
        assert all(m.answer is Answer.ACKNOWLEDGED for m in load.messages), findings.summary
        assert all(r.statuses == [200, 200] for r in load.replies), findings.summary
        findings.add("subscriber messages into Slack", relay_problems(load, posts))
        findings.add("human replies to the subscriber", reply_problems(load, seen))
        report(findings, [], desks)


def test_sqlite_desk_killed_under_load_and_restarted_loses_and_repeats_nothing(tmp_path: Path, sqlite_url: str) -> None:
    seed = crash_seed()
    kill_after = random.Random(seed).randint(40, 300)  # of the 400 acknowledgements the load gets
    with SlackInThread() as slack, closing(Desks()) as desks:
        load, restarted, crash = killed_and_restarted(tmp_path / "desk.yaml", sqlite_url, slack, desks, kill_after,
                                                      messages_each=MESSAGES_EACH, replies=REPLIES)
        judge(Findings(summary("SQLite, one desk killed and restarted", seed, kill_after, load)), load, crash,
              slack, restarted.base_url, desks)


@pytest.mark.parametrize("database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_postgres_instance_killed_under_load_its_work_is_finished_by_the_survivor(tmp_path: Path, database_url: str) -> None:
    seed = crash_seed()
    kill_after = random.Random(seed).randint(40, 300)
    ports = {"a": free_port(), "b": free_port()}
    with SlackInThread() as slack, closing(Desks()) as desks:
        configs = {name: write_config(tmp_path / f"desk-{name}.yaml", port=port, database_url=database_url,
                                      slack_url=slack.url, delivery=heartbeat_settings()) for name, port in ports.items()}
        first = desks.start("a", configs["a"], ports["a"])  # one at a time: the first one migrates the database
        survivor = desks.start("b", configs["b"], ports["b"])
        gateway = Gateway({"a": first.base_url, "b": survivor.base_url})
        load = Load(gateway, open_handoffs(first.base_url, ["a", "b"], CONVERSATIONS), messages_each=MESSAGES_EACH,
                    replies=REPLIES).start()
        load.wait_acknowledged(kill_after)
        gateway.route("a", None)
        first.kill()
        crash = Crash(dead="a", killed_at=first.killed_at, resumable_at=first.killed_at, posts_at_kill=slack.posts(),
                      bound=2 * HEARTBEAT, since="the kill")
        gateway.route("a", survivor.base_url)  # the load balancer sends a's share to b
        load.join()
        judge(Findings(summary("PostgreSQL, one of two instances killed", seed, kill_after, load)), load, crash,
              slack, survivor.base_url, desks)


def test_retries_with_their_idempotency_keys_after_a_kill_store_nothing_twice(tmp_path: Path, sqlite_url: str) -> None:
    seed = crash_seed()
    kill_after = random.Random(seed).randint(20, 150)  # of 200 messages
    with SlackInThread() as slack, closing(Desks()) as desks:
        load, restarted, _ = killed_and_restarted(tmp_path / "desk.yaml", sqlite_url, slack, desks, kill_after,
                                                  messages_each=20, replies=0, idempotent=True)

        findings = Findings(summary("SQLite, idempotent retries after a kill", seed, kill_after, load))
        # The client retried each request it got no answer to, with the same key and body.
        findings.add("retries", [f"{m.name}: the retry with its key was answered {m.status} {m.body}, not its answer "
                                 "nor 409 request_applied_answer_lost" for m in load.messages if m.retries and not m.took_effect])
        with httpx.Client(timeout=REQUEST_TIMEOUT) as client:
            # A retry of a request whose answer did arrive (the client cannot tell the two
            # apart) gets that first answer again, the key having survived the restart.
            for message in [m for m in load.messages if m.answer is Answer.ACKNOWLEDGED]:
                first = dict(message.body)
                load.post(client, message)
                if message.status != 200 or message.body != first:
                    findings.add("replays", [f"{message.name}: the replay with its key was answered {message.status} {message.body}, "
                                  f"not the first answer {first}"])
        posts, seen = settled(load, slack, restarted.base_url)

        findings.add("subscriber messages into Slack", relay_problems(load, posts))
        for message in load.messages:
            stored = sum(1 for m in seen[message.conversation.cid] if m.role == "subscriber" and m.text == message.text)
            if (stored != 1) if message.took_effect else (stored > 1):
                findings.add("stored messages", [f"{message.name} ({message.answer}) is stored {stored} times in its conversation"])
        report(findings, [], desks)
