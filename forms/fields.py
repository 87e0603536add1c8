"""Typed return fields: the contract for the data a recipient hands back.

The agent declares `expected_return` in `handoff_request`; the same declaration drives the
tool's validation, the plain-text preview in the dispatch message, the return form and the
`Returned data:` block of the resume message. Keeping it in one model means the three can
never disagree about what a field is.

Returned values are checked by one function, `coerce_returned`, for the return form, the
owner's release API and a sibling agent's `handoff_release` alike: a value that does not fit
its field, or a field nobody asked for, is refused with a message naming it, never stored
changed. Missing required fields never block a release; they are reported.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.errors import DeskError
from bot.runtime.text import CleanStr, scrub

FieldType = Literal["string", "multiline", "number", "boolean", "enum", "date", "url"]
FIELD_TYPES: tuple[str, ...] = ("string", "multiline", "number", "boolean", "enum", "date", "url")
MAX_RETURN_FIELDS = 20
# The value format of the form's date picker (and of JSON): what the error asks for.
DATE_EXPECTED = "must be a date as YYYY-MM-DD, such as 2026-06-10"
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
    """A returned value does not fit its field's type. The message says what was expected
    and, where seeing it helps to correct it, what was given."""


class ReturnValuesInvalid(DeskError):
    """Returned values that cannot be stored as given: a wrong type, or a field the handoff
    never asked for. Nothing is released; the caller corrects and tries again.

    `problems` maps each field name to what is wrong with it (the form shows each next to
    its input); the JSON error names them as `return_values.<name>`.
    """

    code = "invalid_return_values"
    status = 422

    def __init__(self, problems: dict[str, str]) -> None:
        self.problems = problems
        fields = {f"return_values.{name}": message for name, message in problems.items()}
        super().__init__("; ".join(f"{path}: {message}" for path, message in fields.items()), fields=fields)


def shown(raw: Any) -> str:
    """What was given, quoted and cut short, for an error message."""
    text = " ".join(str(raw).split())
    return f'"{text[:40]}…"' if len(text) > 40 else f'"{text}"'


# --------------------------------------------------------------------------- numbers

DecimalMark = Literal[".", ","]
_DIGITS = re.compile(r"[0-9]+")
_EXPONENT = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?[eE][+-]?[0-9]+")
_SEPARATORS = re.compile(r"([.,]|[ \u00a0\u202f\u2009'\u2019])")  # spaces and apostrophes only ever group digits
_AN_EXAMPLE = "like 1250 or 12.50"


@dataclass(frozen=True)
class ReadNumber:
    """A number read from what a person or a client wrote, and the convention it used:
    `decimal_mark` is "." for a decimal point (or commas between thousands), "," for a
    decimal comma (or dots between thousands), None when the text used neither."""

    value: int | float
    decimal_mark: DecimalMark | None = None


def read_number(raw: Any) -> ReadNumber:
    """Read a number without ever changing its magnitude: what could be read two ways is
    refused with a message that shows it, never guessed.

    Accepted: JSON numbers; `1250`, `-3`, `12.5`, `12,50` (a decimal comma);
    `1,234,567.5` and `1.234.567,5` (thousands grouped in threes, the last mark is the
    decimal one); `1 234,5` and `1'234.5` (spaces and apostrophes group thousands).
    Refused: one `,` or `.` followed by exactly three digits after a one-to-three digit
    number (`1,250`, `1.250`): a thousands separator in half the world, a decimal mark in
    the other; a mark used twice after the other one (`1,250.5,3`); groups not of three.
    """
    if isinstance(raw, bool):
        raise FieldValueError(f"must be a number {_AN_EXAMPLE}, not true/false")
    if isinstance(raw, int):
        return ReadNumber(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise FieldValueError("must be a finite number")
        return ReadNumber(raw)
    if not isinstance(raw, str):
        raise FieldValueError(f"must be a number {_AN_EXAMPLE}")
    text = raw.strip()
    if _EXPONENT.fullmatch(text):
        return ReadNumber(float(text), "." if "." in text else None)
    return _read_number_text(text)


def _read_number_text(text: str) -> ReadNumber:
    sign = "-" if text.startswith("-") else ""
    body = text[1:] if text[:1] in "+-" else text
    runs = _SEPARATORS.split(body)
    digits, separators = runs[0::2], runs[1::2]  # digits, then what stands between them
    starts_with_decimal = digits[0] == "" and separators in ([","], ["."])  # ,5 or .5
    if not (_DIGITS.fullmatch(digits[0]) or starts_with_decimal) or not all(_DIGITS.fullmatch(d) for d in digits[1:]):
        raise FieldValueError(f"must be a number {_AN_EXAMPLE} (got {shown(text)})")
    kinds = [s if s in ".," else " " for s in separators]
    decimal = _decimal_mark(text, digits, kinds)
    if decimal and kinds[-1] != decimal:  # nothing may follow the decimals: 1,5 000
        raise FieldValueError(f"can be read more than one way (got {shown(text)}); write it {_AN_EXAMPLE}")
    grouping = kinds[:-1] if decimal else kinds
    whole, fraction = (digits[:-1], digits[-1]) if decimal else (digits, "")
    if grouping:
        if len(set(grouping)) != 1 or decimal in grouping:
            raise FieldValueError(f"can be read more than one way (got {shown(text)}); write it {_AN_EXAMPLE}")
        if not (1 <= len(whole[0]) <= 3 and not whole[0].startswith("0") and all(len(g) == 3 for g in whole[1:])):
            raise FieldValueError(
                f"must group its digits in threes (got {shown(text)}); or write it without separators, {_AN_EXAMPLE}")
    number = "".join(whole) or "0"
    if decimal:
        return ReadNumber(float(f"{sign}{number}.{fraction}"), decimal)
    thousands = grouping[0] if grouping else " "
    return ReadNumber(int(f"{sign}{number}"), _OTHER_MARK.get(thousands))


_OTHER_MARK: dict[str, DecimalMark] = {",": ".", ".": ","}  # commas between thousands go with a decimal point


def _is_mark(kind: str) -> TypeGuard[DecimalMark]:
    return kind in (".", ",")


def _decimal_mark(text: str, digits: list[str], kinds: list[str]) -> DecimalMark | None:
    """Which of `.` and `,` is the decimal mark, if any; refuse what reads two ways."""
    marks = [k for k in kinds if _is_mark(k)]
    if not marks:
        return None
    last = marks[-1]
    if len(set(marks)) == 2:  # both: the last one is the decimal mark, and it may appear only once
        if marks.count(last) != 1:
            raise FieldValueError(f"can be read more than one way (got {shown(text)}); write it {_AN_EXAMPLE}")
        return last
    if len(marks) > 1:  # the same mark twice or more groups thousands: 1,234,567
        return None
    if " " in kinds:  # spaces group, so the one mark is the decimal one: 1 234,5
        return last
    whole, fraction = digits[0], digits[1]
    if len(fraction) == 3 and 1 <= len(whole) <= 3 and not whole.startswith("0"):
        as_decimal = f"{whole}.{fraction}".rstrip("0").rstrip(".")
        unambiguous = as_decimal if fraction.endswith("0") else f"{as_decimal}0"  # 1.125 reads two ways, 1.1250 one
        raise FieldValueError(
            f"is ambiguous: {shown(text)} could mean {whole}{fraction} or {as_decimal};"
            f" write {whole}{fraction} or {unambiguous}, whichever you mean")
    return last


def coerce_value(field: ReturnField, raw: Any) -> Any:
    """Turn one raw value (form text or JSON) into its typed form, or raise FieldValueError.

    Returns None for an empty value so "left blank" and "not sent" mean the same thing.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, dict | list):
        raise FieldValueError("must be a single value, not a list or an object")
    kind = field.type
    if kind in ("string", "multiline"):
        text = scrub(raw if isinstance(raw, str) else str(raw))
        text = text.strip() if kind == "string" else text.strip("\n\r ")
        if len(text) > 10_000:
            raise FieldValueError("is longer than 10,000 characters")
        return " ".join(text.split()) if kind == "string" else text.replace("\r\n", "\n")
    if kind == "number":
        return read_number(raw).value
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "yes", "on", "1", "y"):
            return True
        if text in ("false", "no", "off", "0", "n"):
            return False
        raise FieldValueError(f"must be yes or no (got {shown(raw)})")
    if kind == "enum":
        text = str(raw).strip()
        if text not in (field.enum_values or []):
            raise FieldValueError(f"must be one of: {', '.join(field.enum_values or [])} (got {shown(raw)})")
        return text
    if kind == "date":
        text = str(raw).strip()
        try:
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                raise ValueError(text)
            return dt.date.fromisoformat(text).isoformat()
        except ValueError:
            raise FieldValueError(f"{DATE_EXPECTED} (got {shown(raw)})") from None
    if kind == "url":
        text = str(raw).strip()
        parsed = urlparse(text)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or any(c.isspace() for c in text):
            raise FieldValueError(f"must be an http(s) URL (got {shown(raw)})")
        return text
    raise FieldValueError(f"has unknown type {kind!r}")  # unreachable: the model restricts types


class CoercedReturn(BaseModel):
    """Returned values, typed, and the required fields nobody filled."""

    values: dict[str, Any]
    missing_required: list[str]


def coerce_returned(fields: list[ReturnField], raw: dict[str, Any] | None) -> CoercedReturn:
    """The one check of returned values, for the form, the owner's API and a sibling agent.

    Values come back typed, in declaration order. A wrong type, a key the handoff never
    asked for, or numbers written with both decimal conventions in one answer raise
    ReturnValuesInvalid naming every such field: a value is never stored changed or
    unasked. Missing required fields never block; they are reported.
    """
    raw = dict(raw or {})
    declared = {f.name for f in fields}
    problems: dict[str, str] = {}
    values: dict[str, Any] = {}
    for field in fields:
        try:
            typed = coerce_value(field, raw.get(field.name))
        except FieldValueError as exc:
            problems[field.name] = str(exc)
            continue
        if typed is not None:
            values[field.name] = typed
    problems |= _mixed_decimal_marks([f for f in fields if f.name in values], raw)
    asked = ", ".join(f.name for f in fields)
    for key in raw:
        if key not in declared:
            problems[str(key)] = (f"is not a field this handoff asked for (it asked for: {asked})" if asked else
                                  "is not a field this handoff asked for (it asked for none; use the note)")
    if problems:
        raise ReturnValuesInvalid(problems)
    missing = [f.name for f in fields if f.required and f.name not in values]
    return CoercedReturn(values=values, missing_required=missing)


def _mixed_decimal_marks(fields: list[ReturnField], raw: dict[str, Any]) -> dict[str, str]:
    """One answer writes its numbers one way: a decimal comma in one field and a decimal
    point in another means at least one of them was not read as meant."""
    marks = {f: mark for f in fields if f.type == "number" and (mark := read_number(raw[f.name]).decimal_mark)}
    if len(set(marks.values())) < 2:
        return {}
    words = {",": "a decimal comma", ".": "a decimal point"}
    problems = {}
    for field, mark in marks.items():
        other = next(f for f, m in marks.items() if m != mark)
        problems[field.name] = (
            f"uses {words[mark]} ({shown(raw[field.name])}) but {other.display_label} uses {words[marks[other]]}"
            f" ({shown(raw[other.name])}); write every number with the same decimal mark")
    return problems


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
