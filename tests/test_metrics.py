"""bot/runtime/metrics.py: one registry per server, so servers in one process do not collide."""

from __future__ import annotations

from datetime import timedelta

from bot.runtime.metrics import Metrics
from bot.store.vocabulary import ReleaseReason
from tests.conftest import Harness, StartDesk
from tests.test_offers import later, people_desk, reply_in_dm, request


def test_two_servers_in_one_process_count_separately() -> None:
    first, second = Metrics(), Metrics()
    first.releases.labels("form").inc()
    first.releases.labels("form").inc()
    second.releases.labels("form").inc()
    assert first.registry.get_sample_value("handoff_releases_total", {"reason": "form"}) == 2
    assert second.registry.get_sample_value("handoff_releases_total", {"reason": "form"}) == 1


def test_the_exposition_is_prometheus_text_with_the_labels() -> None:
    metrics = Metrics()
    metrics.channel_up.labels("3", "slack").set(1)
    text = metrics.exposition().decode()
    assert '# TYPE handoff_channel_available gauge' in text
    assert 'handoff_channel_available{channel_id="3",kind="slack"} 1.0' in text


# --------------------------------------------------------------------------- offers to people


def offers_total(harness: Harness) -> dict[str, float]:
    """`handoff_offers_total` by result, as the desk's registry exposes it."""
    registry = harness.desk.metrics.registry
    found = {result: registry.get_sample_value("handoff_offers_total", {"result": result})
             for result in ("offered", "claimed", "taken", "missed", "ended", "failed")}
    return {result: value for result, value in found.items() if value}


async def test_handoff_offers_total_counts_how_each_offer_to_a_person_ended(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben", "sam"]}],
    )
    # Olga lets her turn pass, Ben claims: one missed, one claimed
    _, first = await request(harness)
    await later(harness, timedelta(minutes=5))
    assert await reply_in_dm(harness, 5, "ben") == "relayed"
    assert offers_total(harness) == {"offered": 2, "missed": 1, "claimed": 1}
    # the next is offered to Sam, and the owner hands it back before he claims: the owner took it
    _, second = await request(harness)
    assert second["people_offered"] == ["sam"]
    await harness.desk.handoffs.release(second["handoff_session_id"], reason=ReleaseReason.OWNER, actor="test")
    assert offers_total(harness) == {"offered": 3, "missed": 1, "claimed": 1, "taken": 1}
    # a release that comes too late changes no row and counts nothing more
    await harness.desk.handoffs.release(first["handoff_session_id"], reason=ReleaseReason.OWNER, actor="test")
    await harness.desk.handoffs.release(second["handoff_session_id"], reason=ReleaseReason.OWNER, actor="test")
    assert offers_total(harness) == {"offered": 3, "missed": 1, "claimed": 1, "taken": 1}


async def test_a_broadcast_claim_counts_the_others_as_taken_and_an_unclaimed_end_as_missed(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben", "sam"]}],
    )
    await request(harness)
    assert await reply_in_dm(harness, 5, "ben") == "relayed"
    assert offers_total(harness) == {"offered": 3, "claimed": 1, "taken": 2}
    await request(harness)  # offered to all three again; nobody claims, the last step's time runs out
    await later(harness, timedelta(minutes=5))
    assert offers_total(harness) == {"offered": 6, "claimed": 1, "taken": 2, "missed": 3}
