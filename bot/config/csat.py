"""`csat:`, the satisfaction question asked after a handoff ends (off by default).

Which releases ask is a list of release reasons: by default the ones where a person handled
the conversation (a return form, `/release` or its button, the owner, a sibling agent).
An idle timeout or a handoff nobody claimed resolved nothing a subscriber could rate, so
they ask only when named."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from bot.config.values import _Section, each_once

AskAfter = Literal["form", "release_token", "owner", "agent", "idle_timeout", "unclaimed"]
PERSON_HANDLED: tuple[AskAfter, ...] = ("form", "release_token", "owner", "agent")


class CsatConfig(_Section):
    enabled: bool = Field(default=False, description="Ask the subscriber whether the handoff solved it.")
    ask_after: list[AskAfter] = Field(
        default_factory=lambda: list(PERSON_HANDLED),
        description="The release reasons after which the question is asked.",
    )
    comment: bool = Field(default=True, description="After the answer, offer an optional comment (up to 500 characters).")

    @field_validator("ask_after")
    @classmethod
    def _no_repeats(cls, value: list[AskAfter]) -> list[AskAfter]:
        return each_once(value, "names {} more than once")
