"""What the desk takes in about a handoff: the inputs of `handoff_request` and
`handoff_release` (a contract clients depend on: the model and the API read their schemas),
a recipient's `/release` command, and the return fields a stored handoff asked for.

They guard the edges: a channel id that is a boolean, an oversized or blank-keyed
`extra_context`, duplicate return-field names and an unknown outcome are refused here, before
anything is stored; an old row whose return fields a newer rule rejects is read leniently
(`stored_fields`), so it can still be released.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import structlog
from pydantic import BaseModel, BeforeValidator, ConfigDict, EmailStr, Field, ValidationInfo, WithJsonSchema, field_validator

from bot.domain.resume import MAX_NOTE
from bot.runtime.text import CleanStr
from bot.store.models import HandoffSession
from bot.store.vocabulary import OUTCOMES_SPOKEN, Outcome
from forms.fields import MAX_RETURN_FIELDS, ReturnField, check_unique_names

log = structlog.get_logger(__name__)


OutcomeInput = Annotated[
    Outcome, WithJsonSchema({"enum": [outcome.value for outcome in Outcome], "type": "string"})
]
"""An outcome as the tools and the API take it. The schema is the one clients know: the words
inline, not a `$ref` to an enum definition carrying the class docstring (a field using it
names its title, which the replaced schema no longer derives)."""
EXTRA_CONTEXT_MAX_BYTES = 4096


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a channel id (an integer), not true/false")
    return value


class HandoffRequestInput(BaseModel):
    """Input of `handoff_request`, a contract clients depend on (docs/architecture.md).
    `channel_id` is checked against the channels available at call time, which a static
    model cannot know."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    channel_id: Annotated[int, BeforeValidator(_not_bool)] = Field(
        description="The handoff channel to use; one of the ids listed in the description."
    )
    summary: CleanStr = Field(
        min_length=20, max_length=2000, description="What is happening, who the user is, what they need (20-2000 chars)."
    )
    expected_action: CleanStr = Field(
        min_length=10, max_length=1000, description="The concrete next step for the recipient (10-1000 chars)."
    )
    urgency: Literal["low", "normal", "high"] = Field(default="normal", description="How soon someone should look.")
    contact_back_email: EmailStr | None = Field(
        default=None, description="Where to reach the user; defaults to the subscriber's email when known."
    )
    include_transcript: bool = Field(default=True, description="Attach the recent conversation transcript.")
    extra_context: dict[CleanStr, CleanStr] | None = Field(
        default=None, description="Structured key/value context for the recipient, up to about 4 KB."
    )
    expected_return: list[ReturnField] | None = Field(
        default=None,
        max_length=MAX_RETURN_FIELDS,
        description="Up to 20 fields the recipient fills when handing back; they come back in the resume message.",
    )

    @field_validator("channel_id")
    @classmethod
    def _available_channel(cls, value: int, info: ValidationInfo) -> int:
        allowed = (info.context or {}).get("channel_ids")
        if allowed is not None and value not in allowed:
            raise ValueError(f"must be one of the available handoff channels {allowed}")
        return value

    @field_validator("extra_context")
    @classmethod
    def _small_context(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        size = len(json.dumps(value, ensure_ascii=False).encode())
        if size > EXTRA_CONTEXT_MAX_BYTES:
            raise ValueError(f"is {size} bytes when serialized; the limit is {EXTRA_CONTEXT_MAX_BYTES}")
        if any(not key.strip() or len(key) > 100 for key in value):
            raise ValueError("keys must be 1-100 characters")
        return value

    @field_validator("expected_return")
    @classmethod
    def _unique_names(cls, value: list[ReturnField] | None) -> list[ReturnField] | None:
        return None if value is None else check_unique_names(value)


class HandoffReleaseInput(BaseModel):
    """Input of `handoff_release` (sibling agents)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    handoff_session_id: str = Field(min_length=1, max_length=40, description="The handoff you are serving.")
    outcome: OutcomeInput = Field(title="Outcome", description=f"{OUTCOMES_SPOKEN}.")
    note: CleanStr | None = Field(default=None, max_length=2000, description="One or two sentences for the original agent.")
    return_values: dict[str, Any] | None = Field(
        default=None,
        description="Values for the expected return fields, keyed by field name: only fields the handoff asked for, "
                    "each of its type (numbers as JSON numbers, dates as YYYY-MM-DD). Anything else is refused with "
                    "an error naming the field, and nothing is released until you call again with it corrected.",
    )


def stored_fields(handoff: HandoffSession) -> list[ReturnField]:
    """The handoff's return fields, skipping any a newer version of the rules rejects: an
    old row must never make a release impossible."""
    fields = []
    for data in handoff.expected_return:
        try:
            fields.append(ReturnField.model_validate(data))
        except ValueError:
            log.warning("stored_return_field_invalid", handoff_session_id=handoff.id, field=data.get("name"))
    return fields


def parse_release_command(text: str) -> tuple[Outcome | None, str | None] | None:
    """`/release`, `/release resolved`, `/release needs_followup call back Monday`.

    Returns (outcome, note) or None when the text is not a release command. An unknown
    first word is part of the note, so `/release done, refunded` still releases.
    """
    words = text.split(maxsplit=1)  # any whitespace: "/release\nnote" from a mail client too
    if not words or words[0].split("@", 1)[0].lower() != "/release":  # chat commands may carry "@botname"
        return None
    rest = words[1].strip() if len(words) > 1 else ""
    parts = rest.split(maxsplit=1)
    if parts and parts[0].lower() in tuple(Outcome):
        return Outcome(parts[0].lower()), (parts[1].strip() if len(parts) > 1 else "")[:MAX_NOTE] or None
    return None, rest[:MAX_NOTE] or None

