"""check-config on who a route reaches (bot/config/reach.py and the target syntax of
bot/config/routes.py): every person a team, a schedule or a route names is declared, every
team and schedule a route names exists, a person offered handoffs has a contact method the
desk can use, `assign` needs a team; each refusal names its key path and the fix."""

from __future__ import annotations

from typing import Any

from tests.conftest import config_problem, make_config

SLACK = {"id": 5, "kind": "slack", "label": "Slack", "bot_token": "xoxb-test", "signing_secret": "s" * 32, "channel": "C0ROOM"}
PEOPLE = [{"id": "olga", "name": "Olga Petrova", "email": "olga@example.com"},
          {"id": "ben", "name": "Ben Okoye", "email": "ben@example.com"}]
NIGHTS = {"id": "nights", "label": "Nights", "timezone": "Europe/Berlin",
          "layers": [{"name": "primary", "people": ["olga", "ben"], "shift": "1d", "start": "2026-12-07"}]}


def route(*notify: Any, **step: Any) -> list[dict[str, Any]]:
    return [{"id": 20, "label": "Support", "steps": [{"notify": list(notify), "claim_within": "5m", **step}]}]


def problem(**sections: Any) -> str:
    return config_problem(channels=sections.pop("channels", [SLACK]), **sections)


def test_targets_name_people_teams_and_schedules_that_exist() -> None:
    report = problem(people=PEOPLE, routes=route("person:olgaa", "team:support", "oncall:night"))
    assert "routes[0].steps[0].notify[0]: no person 'olgaa' (declared: ben, olga); did you mean 'olga'? under people:" in report
    assert "routes[0].steps[0].notify[1]: no team 'support' (declared: none) under teams:" in report
    assert "routes[0].steps[0].notify[2]: no schedule 'night' (declared: none) under oncall:" in report


def test_a_target_that_is_no_target_says_what_one_looks_like() -> None:
    report = problem(people=PEOPLE, routes=route("olga"))
    assert "'olga' is no target: use a channel id (3), person:<id>, team:<id> or oncall:<schedule id>" in report


def test_teams_and_schedules_name_declared_people() -> None:
    report = problem(people=PEOPLE[:1], teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}],
                     oncall=[NIGHTS])
    assert "teams[0].members[1]: no person 'ben' (declared: olga) under people:" in report
    assert "oncall[0].layers[0].people[1]: no person 'ben' (declared: olga) under people:" in report


def test_a_person_offered_handoffs_needs_a_contact_method_the_desk_can_use() -> None:
    owner_only = [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}]
    report = problem(channels=owner_only, people=PEOPLE, routes=route("person:olga"))
    assert "people[0].contact: olga is offered handoffs (routes[0].steps[0].notify[0]) but has no contact method the desk can use" in report
    named = problem(people=[{**PEOPLE[0], "contact": ["telegram"]}], routes=route("person:olga"))
    assert "people[0].contact[0]: no telegram channel is configured, so olga cannot be reached on telegram" in named


def test_assign_one_at_a_time_needs_a_team() -> None:
    report = problem(people=PEOPLE, routes=route("person:olga", assign="round_robin"))
    assert "routes[0].steps[0].assign: assign: round_robin applies to a team target (team:<id>)" in report


def test_an_override_s_times_are_both_local_or_both_with_an_offset() -> None:
    schedule = {**NIGHTS, "overrides": [{"person": "olga", "covers": "ben", "from": "2026-12-24 18:00",
                                         "to": "2026-12-25T08:00:00+01:00"}]}
    report = problem(people=PEOPLE, oncall=[schedule])
    assert "oncall[0].overrides[0]" in report and "both be local times" in report


def test_a_config_that_reaches_people_loads() -> None:
    config = make_config(
        "sqlite:///x.db", channels=[SLACK], people=PEOPLE, oncall=[NIGHTS],
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}],
        routes=route(5, "team:support", "oncall:nights", assign="least_busy", max_concurrent=3, contact_after="2m"),
    )
    [step] = config.routes[0].steps
    assert step.channels == [5] and [str(t) for t in step.targets] == ["team:support", "oncall:nights"]


def test_an_approval_through_a_route_needs_a_channel_among_its_steps() -> None:
    action = {"id": "refund", "description": "Refund an order", "approval_channels": [20],
              "run": {"url": "http://127.0.0.1:9/refund", "secret": "r" * 32}}
    report = problem(people=PEOPLE, routes=route("person:olga"), actions=[action])
    assert "actions[0].approval_channels[0]: route 20 names no channel: an approval is asked in a route's channels" in report
