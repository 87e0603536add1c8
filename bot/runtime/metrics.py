"""Prometheus metrics, on a registry per server so several servers (tests, the demo) can
live in one process without colliding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
Result = TypeVar("Result", bound=str)  # a result word, such as an OfferResult

# A person answers in minutes and a handoff lasts minutes to hours: buckets from 10 s to a
# day, so p50 and p90 fall inside a bucket rather than in the +Inf overflow.
MINUTES_TO_HOURS = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.handoff_requests = Counter(
            "handoff_requests", "handoff_request calls by channel kind and result", ["channel_kind", "result"], registry=r)
        self.dispatch_seconds = Histogram(
            "handoff_dispatch_seconds", "Time to deliver a handoff dispatch, retries included", ["channel_kind"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.releases = Counter("handoff_releases", "Handoffs released, by reason", ["reason"], registry=r)
        self.release_noops = Counter(
            "handoff_release_noops", "Release attempts that lost a race or came too late", ["reason"], registry=r)
        self.relayed = Counter("handoff_relayed_messages", "Messages relayed during a bypass", ["direction"], registry=r)
        self.deliveries = Counter(
            "handoff_outbox_deliveries", "Outbox delivery attempts", ["channel_kind", "purpose", "result"], registry=r)
        self.inbound = Counter("handoff_inbound_events", "Recipient events received", ["channel_kind", "result"], registry=r)
        self.agent_turn_seconds = Histogram(
            "handoff_agent_turn_seconds", "Time the agent took to answer a turn",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60), registry=r)
        self.approvals = Counter(
            "handoff_approvals", "Approval requests by how they ended (requested, approved, denied, expired, …)",
            ["action", "result"], registry=r)
        self.user_actions = Counter(
            "handoff_user_actions", "User actions by how they ended (requested, done, cancelled, timeout, failed)",
            ["reason", "result"], registry=r)
        self.waiting_polls = Gauge(
            "handoff_long_polls_waiting", "Requests parked on a long-poll in this process (answered at once on shutdown)",
            registry=r)
        self.taken_over = Counter(
            "handoff_taken_over", "Outbox items and inbound events taken over from an instance that stopped beating",
            ["what"], registry=r)
        self.claims = Counter(
            "handoff_claims", "Claims of handoffs on a route: claimed, or noop (someone had it already)", ["result"], registry=r)
        self.time_to_claim = Histogram(
            "handoff_time_to_claim_seconds", "From a route's handoff reaching its first person to someone claiming it",
            ["route", "channel_kind"], buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200), registry=r)
        self.escalations = Counter(
            "handoff_escalations", "A route's ladder moving to its next step, by why (nobody_claimed, failed_delivery)",
            ["route", "why"], registry=r)
        self.offers = Counter(
            "handoff_offers", "Offers of a route's handoff to a person directly: offered, claimed, taken (someone else "
            "claimed), missed (their turn passed or nobody claimed), ended (the handoff ended otherwise), failed (every contact "
            "method failed), passed (skipped: away, at capacity …)",
            ["result"], registry=r)
        self.fallbacks = Counter(
            "handoff_recipient_failures", "Dispatches of a route's step that failed (the ladder falls back)", ["channel_kind"],
            registry=r)
        self.unclaimed = Counter(
            "handoff_unclaimed", "Handoffs on a route handed back because nobody claimed them", ["route"], registry=r)
        self.time_to_human = Histogram(
            "handoff_time_to_human_seconds",
            "From a handoff reaching its first person to a person acting on it: the claim on a route, the first reply on a channel",
            ["channel_kind", "route"], buckets=MINUTES_TO_HOURS, registry=r)
        self.duration = Histogram(
            "handoff_duration_seconds", "From a handoff reaching its first person to its release",
            ["channel_kind", "route"], buckets=MINUTES_TO_HOURS, registry=r)
        self.satisfaction = Counter(
            "handoff_satisfaction", "Answers to the satisfaction question after a handoff (yes, no)", ["answer"], registry=r)
        self.oncall_gaps = Gauge(
            "handoff_oncall_gaps_seconds", "Seconds in the next 7 days when nobody is on call, per on-call schedule "
            "(computed as /metrics is scraped)", ["schedule"], registry=r)
        self.channel_up = Gauge("handoff_channel_available", "1 when the channel is available", ["channel_id", "kind"], registry=r)

    def offers_ended(self, ended: Mapping[Result, int]) -> None:
        """Count the offers a claim, a passed turn or a release just ended, by result
        (`ladder.end_offers` says how many rows it changed, so a lost race counts nothing)."""
        for result, count in ended.items():
            self.offers.labels(result).inc(count)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
