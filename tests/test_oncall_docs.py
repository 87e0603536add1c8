"""docs/oncall.md's example config holds: it loads as it is shown (every target, team,
schedule, override and person declared), and its schedule puts on call whom the page says
an override does (Ines covering Ben's primary nights over Christmas)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bot.config.loading import expand_env
from bot.domain.oncall import config_overrides, gap_warnings, shifts_at
from tests.conftest import make_config
from tests.test_readme import doc_blocks

PAGE = Path(__file__).resolve().parent.parent / "docs" / "oncall.md"
ENV = {"SLACK_BOT_TOKEN": "xoxb-docs", "SLACK_SIGNING_SECRET": "s" * 32}


def page_config() -> dict[str, Any]:
    [block] = [b for b in doc_blocks(PAGE) if b.lang == "yaml" and "oncall:" in b.body]
    data, problems = expand_env(yaml.safe_load("\n".join(block.body)), ENV)
    assert problems == [], problems
    return dict(data)


def test_the_page_s_example_loads_and_its_override_covers_ben(tmp_path: Path) -> None:
    config = make_config(f"sqlite:///{tmp_path / 'desk.db'}", **page_config())
    [nights] = config.oncall
    steps = config.routes[0].steps
    assert [str(t) for s in steps for t in s.targets] == ["team:support", "oncall:nights", "person:sam"]
    on_call = {s.layer: s.person_id for s in shifts_at(nights, config_overrides(nights), datetime(2026, 12, 24, 1, 0, tzinfo=UTC), config.hours)}
    assert on_call == {"primary": "olga", "secondary": "sam"}  # 02:00 on 24 Dec, Berlin: Olga's night
    christmas = datetime(2026, 12, 25, 1, 0, tzinfo=UTC)  # 02:00 on 25 Dec: Ben's night, Ines covers him
    assert {s.layer: s.person_id for s in shifts_at(nights, config_overrides(nights), christmas, config.hours)} == {
        "primary": "ines", "secondary": "sam"}
    assert gap_warnings(config, datetime(2026, 12, 7, 9, 0, tzinfo=UTC)) == []  # the primary layer never rests
