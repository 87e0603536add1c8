"""Typed return fields: declaration rules and best-effort coercion of returned values."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from forms.fields import FieldValueError, ReturnField, coerce_returned, coerce_value, preview_line


def field(**kw: object) -> ReturnField:
    return ReturnField.model_validate({"name": "f", "type": "string", **kw})


@pytest.mark.parametrize(("kind", "raw", "typed"), [
    ("string", "  hello   world ", "hello world"),
    ("multiline", "line 1\r\nline 2\n", "line 1\nline 2"),
    ("number", "42", 42),
    ("number", "3.5", 3.5),
    ("number", "1,250", 1250),
    ("number", 7, 7),
    ("boolean", "yes", True),
    ("boolean", "off", False),
    ("boolean", True, True),
    ("date", "2026-06-10", "2026-06-10"),
    ("url", "https://carrier.example/track/abc", "https://carrier.example/track/abc"),
    ("string", "   ", None),
])
def test_coerce_valid(kind: str, raw: object, typed: object) -> None:
    assert coerce_value(field(type=kind), raw) == typed


@pytest.mark.parametrize(("kind", "raw", "message"), [
    ("number", "twelve", "must be a number"),
    ("number", "nan", "must be a finite number"),
    ("number", True, "must be a number"),
    ("boolean", "maybe", "must be yes or no"),
    ("date", "10/06/2026", "must be a date as YYYY-MM-DD"),
    ("date", "2026-02-30", "must be a date as YYYY-MM-DD"),
    ("url", "javascript:alert(1)", "must be an http(s) URL"),
    ("url", "https://exa mple.com", "must be an http(s) URL"),
])
def test_coerce_invalid(kind: str, raw: object, message: str) -> None:
    with pytest.raises(FieldValueError, match=re.escape(message)):
        coerce_value(field(type=kind), raw)


def test_enum_values_are_checked() -> None:
    status = field(type="enum", enum_values=["shipped", "lost"])
    assert coerce_value(status, "lost") == "lost"
    with pytest.raises(FieldValueError, match="must be one of: shipped, lost"):
        coerce_value(status, "stolen")


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "1abc"}, "must be identifier-like"),
    ({"name": "has space"}, "must be identifier-like"),
    ({"type": "enum"}, "enum_values is required when type is 'enum'"),
    ({"type": "number", "enum_values": ["a"]}, "enum_values is only allowed when type is 'enum'"),
    ({"type": "enum", "enum_values": ["a", "a"]}, "values must be unique"),
    ({"type": "color"}, "Input should be 'string'"),
    ({"colour": "red"}, "Extra inputs are not permitted"),
])
def test_bad_declarations(data: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        field(**data)


def test_coerce_returned_reports_missing_and_invalid_but_keeps_everything() -> None:
    fields = [
        field(name="order_status", type="enum", enum_values=["shipped", "lost"], required=True),
        field(name="eta_date", type="date", required=True),
        field(name="items", type="number"),
    ]
    result = coerce_returned(fields, {"items": "nine", "order_status": "shipped", "extra": "kept"})
    assert result.values == {"order_status": "shipped", "items": "nine", "extra": "kept"}
    assert result.missing_required == ["eta_date"]
    assert result.invalid == {"items": "must be a number"}


def test_preview_lines_are_readable() -> None:
    assert preview_line(field(name="eta_date", type="date", required=True, label="ETA")) == "ETA [date, YYYY-MM-DD] (required)"
    assert preview_line(field(name="order_status", type="enum", enum_values=["a", "b"])) == "Order status [one of: a, b]"
