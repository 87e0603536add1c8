"""A desk killed while its chains are pipelined: the fake Slack answers slowly, so each
conversation's messages queue up behind the one being sent, claimed at insert and held in
the chain's memory (bot/delivery/outbox.py). Whatever the kill cut off (sends answered but
not yet recorded, followers claimed and never sent), the restarted desk delivers every
acknowledged message to its thread exactly once and in order, soon after it is ready."""

from __future__ import annotations

import random
from contextlib import closing
from pathlib import Path

import pytest

from tests.crash_harness import Desks, Findings, SlackInThread, summary
from tests.test_crash import crash_seed, judge, killed_and_restarted

SLACK_LATENCY = 0.1  # seconds per Slack call: slower than the load posts, so followers pile up

pytestmark = pytest.mark.timeout(300)


def test_a_desk_killed_with_followers_in_its_chains_repeats_and_loses_nothing(tmp_path: Path, sqlite_url: str) -> None:
    seed = crash_seed()
    kill_after = random.Random(seed).randint(60, 200)  # of the 200 acknowledgements the load gets
    with SlackInThread() as slack, closing(Desks()) as desks:
        slack.fake.latency = SLACK_LATENCY
        load, restarted, crash = killed_and_restarted(tmp_path / "desk.yaml", sqlite_url, slack, desks, kill_after,
                                                      messages_each=20, replies=20)
        judge(Findings(summary("SQLite, a pipelined desk killed and restarted", seed, kill_after, load)), load, crash,
              slack, restarted.base_url, desks)
