"""bot/runtime/metrics.py: one registry per server, so servers in one process do not collide."""

from __future__ import annotations

from bot.runtime.metrics import Metrics


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
