"""The name an inbox owner replies as: what it may be, and its signed cookie."""

from __future__ import annotations

import pytest
from fastapi.responses import Response

from bot.web.owner_name import COOKIE, DEFAULT_NAME, InvalidName, NameCookie, parse_name


def test_a_name_keeps_what_the_owner_typed_inside_its_surrounding_spaces() -> None:
    assert parse_name("  Zoë  de la Cruz 🌻 ") == "Zoë  de la Cruz 🌻"
    assert parse_name("S" * 40) == "S" * 40


@pytest.mark.parametrize("raw", ["", "\t", "x" * 41, "Sam\rOwner", "Sam\u200bKim", "Sam\u2028Kim", "\x00"])
def test_a_name_subscribers_could_misread_is_refused_with_the_field_named(raw: str) -> None:
    with pytest.raises(InvalidName) as refused:
        parse_name(raw)
    assert refused.value.message.startswith("name: expected ")


def stored(cookie: NameCookie, name: str) -> str:
    response = Response()
    cookie.store(response, name)
    header = response.headers["set-cookie"]
    assert header.startswith(f"{COOKIE}=")
    return header.split(";", 1)[0].split("=", 1)[1].strip('"')


def test_the_cookie_reads_back_only_what_this_desk_signed() -> None:
    cookie = NameCookie(["key-1"], secure=True)
    value = stored(cookie, "Kim")
    assert cookie.read(value) == "Kim"
    assert NameCookie(["key-0", "key-1"], secure=True).read(value) == "Kim"  # still read after a key rotation
    assert NameCookie(["another-key"], secure=True).read(value) == DEFAULT_NAME
    assert cookie.read(value[:-2] + "xx") == DEFAULT_NAME
    assert cookie.read(None) == DEFAULT_NAME


def test_the_cookie_is_secure_behind_https_only() -> None:
    secure, plain = Response(), Response()
    NameCookie(["k"], secure=True).store(secure, "Kim")
    NameCookie(["k"], secure=False).store(plain, "Kim")
    assert "secure" in secure.headers["set-cookie"].lower()
    assert "secure" not in plain.headers["set-cookie"].lower()
