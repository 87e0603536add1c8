"""Typed return fields: declaration rules and best-effort coercion of returned values."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from forms.fields import (
    FieldValueError,
    ReturnField,
    ReturnValuesInvalid,
    coerce_returned,
    coerce_value,
    preview_line,
    read_number,
)


def field(**kw: object) -> ReturnField:
    return ReturnField.model_validate({"name": "f", "type": "string", **kw})


@pytest.mark.parametrize(("kind", "raw", "typed"), [
    ("string", "  hello   world ", "hello world"),
    ("multiline", "line 1\r\nline 2\n", "line 1\nline 2"),
    ("number", "42", 42),
    ("number", "3.5", 3.5),
    ("number", "1,250,000", 1250000),
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
    ("number", "twelve", 'must be a number like 1250 or 12.50 (got "twelve")'),
    ("number", "nan", 'must be a number like 1250 or 12.50 (got "nan")'),
    ("number", float("nan"), "must be a finite number"),
    ("number", True, "must be a number like 1250 or 12.50, not true/false"),
    ("number", [1], "must be a single value, not a list or an object"),
    ("boolean", "maybe", 'must be yes or no (got "maybe")'),
    ("date", "10/06/2026", 'must be a date as YYYY-MM-DD, such as 2026-06-10 (got "10/06/2026")'),
    ("date", "2026-02-30", "must be a date as YYYY-MM-DD"),
    ("date", "202612-06-10", "must be a date as YYYY-MM-DD"),  # a six-digit year, as a picker without max lets through
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


@pytest.mark.parametrize(("raw", "number", "mark"), [
    ("12,50", 12.5, ","),            # the issue: a decimal comma is a decimal, not 1250
    ("-1,5", -1.5, ","),
    ("0,125", 0.125, ","),           # a leading zero is never a thousands group
    ("1234,567", 1234.567, ","),     # four digits before the mark: not a thousands group
    ("1.234,50", 1234.5, ","),       # both marks: the last one is the decimal mark
    ("1,234.50", 1234.5, "."),
    ("1.234.567", 1234567, ","),     # one mark twice: thousands
    ("1,234,567", 1234567, "."),
    ("1 234,5", 1234.5, ","),        # spaces group, so the one mark is the decimal
    ("1\u00a0234.5", 1234.5, "."),
    ("1'234.50", 1234.5, "."),
    ("12.5", 12.5, "."),
    (",5", 0.5, ","),
    ("+7", 7, None),
    ("1e3", 1000.0, None),
    (12.5, 12.5, None),              # JSON numbers are what they are
])
def test_read_number_accepts_what_reads_one_way(raw: object, number: float, mark: str | None) -> None:
    read = read_number(raw)
    assert (read.value, read.decimal_mark) == (number, mark)
    assert type(read.value) is type(number)


@pytest.mark.parametrize(("raw", "message"), [
    ("1,250", 'is ambiguous: "1,250" could mean 1250 or 1.25; write 1250 or 1.25, whichever you mean'),
    ("1.250", 'is ambiguous: "1.250" could mean 1250 or 1.25; write 1250 or 1.25, whichever you mean'),
    ("1,125", 'is ambiguous: "1,125" could mean 1125 or 1.125; write 1125 or 1.1250, whichever you mean'),
    ("250,000", 'is ambiguous: "250,000" could mean 250000 or 250; write 250000 or 250, whichever you mean'),
    ("1,250.5,3", 'can be read more than one way (got "1,250.5,3")'),
    ("1 234.567,5", 'can be read more than one way (got "1 234.567,5")'),
    ("12,34,567", 'must group its digits in threes (got "12,34,567")'),
    ("1.", 'must be a number like 1250 or 12.50 (got "1.")'),
    ("1,,2", 'must be a number like 1250 or 12.50 (got "1,,2")'),
    ("\u0663", 'must be a number like 1250 or 12.50'),  # an Arabic-Indic digit: not ours to guess
])
def test_read_number_refuses_what_reads_two_ways_and_shows_it(raw: str, message: str) -> None:
    with pytest.raises(FieldValueError, match=re.escape(message)):
        read_number(raw)


def test_coerce_returned_types_values_and_reports_missing_required() -> None:
    fields = [
        field(name="order_status", type="enum", enum_values=["shipped", "lost"], required=True),
        field(name="eta_date", type="date", required=True),
        field(name="items", type="number"),
    ]
    result = coerce_returned(fields, {"items": "12,50", "order_status": "shipped", "eta_date": ""})
    assert result.values == {"order_status": "shipped", "items": 12.5}
    assert result.missing_required == ["eta_date"]


def test_coerce_returned_refuses_wrong_types_and_unasked_fields_naming_each() -> None:
    fields = [field(name="eta_date", type="date"), field(name="items", type="number")]
    with pytest.raises(ReturnValuesInvalid) as caught:
        coerce_returned(fields, {"eta_date": "next week", "items": "3", "colour": "red"})
    assert caught.value.problems == {
        "eta_date": 'must be a date as YYYY-MM-DD, such as 2026-06-10 (got "next week")',
        "colour": "is not a field this handoff asked for (it asked for: eta_date, items)",
    }
    error = caught.value.to_json()
    assert error["error"] == "invalid_return_values"
    assert caught.value.status == 422
    assert set(error["details"]["fields"]) == {"return_values.eta_date", "return_values.colour"}
    assert error["details"]["hint"].startswith("return_values.eta_date: must be a date as YYYY-MM-DD")
    with pytest.raises(ReturnValuesInvalid, match="it asked for none; use the note"):
        coerce_returned([], {"resolution": "Refunded"})


def test_one_answer_writes_its_numbers_with_one_decimal_mark() -> None:
    fields = [field(name="net", type="number", label="Net"), field(name="gross", type="number", label="Gross"),
              field(name="parcels", type="number")]
    with pytest.raises(ReturnValuesInvalid) as caught:
        coerce_returned(fields, {"net": "1.234,5", "gross": "1,234.5", "parcels": "3"})
    assert caught.value.problems == {
        "net": 'uses a decimal comma ("1.234,5") but Gross uses a decimal point ("1,234.5");'
               " write every number with the same decimal mark",
        "gross": 'uses a decimal point ("1,234.5") but Net uses a decimal comma ("1.234,5");'
                 " write every number with the same decimal mark",
    }
    same = coerce_returned(fields, {"net": "1.234,5", "gross": "1.500,25", "parcels": 3})
    assert same.values == {"net": 1234.5, "gross": 1500.25, "parcels": 3}


def test_preview_lines_are_readable() -> None:
    assert preview_line(field(name="eta_date", type="date", required=True, label="ETA")) == "ETA [date, YYYY-MM-DD] (required)"
    assert preview_line(field(name="order_status", type="enum", enum_values=["a", "b"])) == "Order status [one of: a, b]"
