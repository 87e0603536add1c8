"""Typed return fields: the contract for the data a recipient hands back.

The agent declares `expected_return` in `handoff_request`; the same declaration drives the
tool's validation, the plain-text preview in the dispatch message, the return form and the
`Returned data:` block of the resume message. Keeping it in one model means the three can
never disagree about what a field is.

Validation of *returned* values is best-effort by design (seed: missing required fields never
block a release): `coerce_returned` keeps what it can, reports what it could not, and the
caller records both.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.text import CleanStr, scrub

FieldType = Literal["string", "multiline", "number", "boolean", "enum", "date", "url"]
FIELD_TYPES: tuple[str, ...] = ("string", "multiline", "number", "boolean", "enum", "date", "url")
MAX_RETURN_FIELDS = 20
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class ReturnField(BaseModel):
    """One field the recipient is asked to fill before releasing the handoff."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        description="Identifier-like key (letters, digits, underscore), unique in the list.",
        json_schema_extra={"pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"},
    )
    type: FieldType = Field(description="string, multiline, number, boolean, enum, date (YYYY-MM-DD) or url.")
    enum_values: list[CleanStr] | None = Field(
        default=None, description="Allowed values; required when type is enum, forbidden otherwise."
    )
    label: CleanStr | None = Field(default=None, max_length=100, description="Human label shown on the form.")
    description: CleanStr | None = Field(default=None, max_length=500, description="Help text shown under the input.")
    required: bool = Field(default=False, description="Reported as missing when not returned; never blocks release.")
    placeholder: CleanStr | None = Field(default=None, max_length=200, description="Example value shown in the empty input.")

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _IDENTIFIER.match(value):
            raise ValueError(
                "must be identifier-like: a letter or underscore, then letters, digits or underscores (max 64)"
            )
        return value

    @field_validator("enum_values")
    @classmethod
    def _enum_values_shape(cls, values: list[str] | None) -> list[str] | None:
        if values is None:
            return None
        cleaned = [v.strip() for v in values]
        if not 1 <= len(cleaned) <= 50:
            raise ValueError("must list between 1 and 50 values")
        if any(not v or len(v) > 100 for v in cleaned):
            raise ValueError("each value must be 1-100 characters")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("values must be unique")
        return cleaned

    @model_validator(mode="after")
    def _enum_values_iff_enum(self) -> ReturnField:
        if self.type == "enum" and not self.enum_values:
            raise ValueError("enum_values is required when type is 'enum'")
        if self.type != "enum" and self.enum_values is not None:
            raise ValueError(f"enum_values is only allowed when type is 'enum' (this field is '{self.type}')")
        return self

    @property
    def display_label(self) -> str:
        return self.label or self.name.replace("_", " ").capitalize()


def check_unique_names(fields: list[ReturnField]) -> list[ReturnField]:
    """Raise when two fields share a name: the returned data is keyed by name."""
    seen: set[str] = set()
    for field in fields:
        if field.name in seen:
            raise ValueError(f"field names must be unique; '{field.name}' appears more than once")
        seen.add(field.name)
    return fields


class FieldValueError(ValueError):
    """A returned value does not fit its field's type."""


def coerce_value(field: ReturnField, raw: Any) -> Any:
    """Turn one raw value (form text or JSON) into its typed form, or raise FieldValueError.

    Returns None for an empty value so "left blank" and "not sent" mean the same thing.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    kind = field.type
    if kind in ("string", "multiline"):
        text = scrub(raw if isinstance(raw, str) else str(raw))
        text = text.strip() if kind == "string" else text.strip("\n\r ")
        if len(text) > 10_000:
            raise FieldValueError("is longer than 10,000 characters")
        return " ".join(text.split()) if kind == "string" else text.replace("\r\n", "\n")
    if kind == "number":
        if isinstance(raw, bool):
            raise FieldValueError("must be a number")
        if isinstance(raw, int | float):
            number = raw
        else:
            text = str(raw).strip().replace(",", "") if isinstance(raw, str) else raw
            try:
                number = int(text) if re.fullmatch(r"[+-]?\d+", str(text)) else float(text)
            except (TypeError, ValueError):
                raise FieldValueError("must be a number") from None
        if isinstance(number, float) and not math.isfinite(number):
            raise FieldValueError("must be a finite number")
        return number
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "yes", "on", "1", "y"):
            return True
        if text in ("false", "no", "off", "0", "n"):
            return False
        raise FieldValueError("must be yes or no")
    if kind == "enum":
        text = str(raw).strip()
        if text not in (field.enum_values or []):
            raise FieldValueError(f"must be one of: {', '.join(field.enum_values or [])}")
        return text
    if kind == "date":
        text = str(raw).strip()
        try:
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                raise ValueError(text)
            return dt.date.fromisoformat(text).isoformat()
        except ValueError:
            raise FieldValueError("must be a date as YYYY-MM-DD") from None
    if kind == "url":
        text = str(raw).strip()
        parsed = urlparse(text)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or any(c.isspace() for c in text):
            raise FieldValueError("must be an http(s) URL")
        return text
    raise FieldValueError(f"has unknown type {kind!r}")  # unreachable: the model restricts types


class CoercedReturn(BaseModel):
    """The outcome of best-effort validation of returned values."""

    values: dict[str, Any]
    missing_required: list[str]
    invalid: dict[str, str]


def coerce_returned(fields: list[ReturnField], raw: dict[str, Any] | None) -> CoercedReturn:
    """Type what can be typed, keep the rest, and report missing required and invalid fields.

    Values for declared fields come first, in declaration order; keys nobody asked for are
    kept (as given) after them, because dropping data a person typed helps nobody.
    An invalid value is kept as text so nothing is lost, and reported in `invalid`.
    """
    raw = dict(raw or {})
    values: dict[str, Any] = {}
    invalid: dict[str, str] = {}
    for field in fields:
        if field.name not in raw:
            continue
        given = raw.pop(field.name)
        try:
            typed = coerce_value(field, given)
        except FieldValueError as exc:
            invalid[field.name] = str(exc)
            typed = given if isinstance(given, str | int | float | bool) else str(given)
        if typed is not None:
            values[field.name] = typed
    for key, given in raw.items():
        if given is not None and given != "":
            values[str(key)] = given
    missing = [f.name for f in fields if f.required and f.name not in values]
    return CoercedReturn(values=values, missing_required=missing, invalid=invalid)


_KIND_WORDS = {"string": "text", "multiline": "text, several lines", "number": "number", "boolean": "yes/no",
               "date": "date, YYYY-MM-DD", "url": "link"}


def preview_line(field: ReturnField) -> str:
    """One plain-text line describing a field, for dispatch messages."""
    if field.type == "enum":
        kind = "one of: " + ", ".join(field.enum_values or [])
    else:
        kind = _KIND_WORDS[field.type]
    marker = " (required)" if field.required else ""
    hint = f" — {field.description}" if field.description else ""
    return f"{field.display_label} [{kind}]{marker}{hint}"
