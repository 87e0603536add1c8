"""The value types config keys share: durations (`30m`, `90s`, `24h`), sizes (`1MiB`,
`256KiB`), optional and signing secrets, http(s) URLs, and `_Section`, the base of every section model (unknown keys are
refused, a loaded config is frozen)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, SecretStr

from channels.config_checks import service_url

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> timedelta:
    """Parse `30m`, `90s`, `24h`, `1h30m`, `250ms` or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30m, 90s or 24h")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            pos, seconds = 0, 0.0
            for match in _DURATION_PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise ValueError(f"expected a duration such as 30m, 90s or 24h, got {value!r}")
    if seconds <= 0:
        raise ValueError("must be a positive duration")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """`timedelta(minutes=30)` -> `30 minutes`, for messages people read."""
    seconds = delta.total_seconds()
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    if seconds >= 60:
        return f"{seconds / 60:.1f} minutes"
    return f"{seconds:g} seconds"


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def between(low: str, high: str, why: str | None = None) -> AfterValidator:
    """A Duration's bounds, both included: outside them the value is refused with a message
    that names them (and why they are there), never moved inside."""
    lowest, highest = parse_duration(low), parse_duration(high)

    def check(value: timedelta) -> timedelta:
        if not lowest <= value <= highest:
            raise ValueError(f"must be between {low} and {high}" + (f" ({why})" if why else ""))
        return value

    return AfterValidator(check)

_SIZE = re.compile(r"(\d+)(b|kb|kib|mb|mib)?")
_UNIT_BYTES = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2}


def parse_size(value: Any) -> int:
    """Parse `1MiB`, `256KiB`, `64kB`, `500B` or a number of bytes, into bytes. KiB and MiB are
    powers of 1024, kB and MB of 1000, as everywhere else."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 1MiB, 256KiB or 65536")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.fullmatch(str(value).strip().lower().replace(" ", ""))
        if match is None:
            raise ValueError(f"expected a size such as 1MiB, 256KiB or 65536, got {value!r}")
        size = int(match.group(1)) * _UNIT_BYTES[match.group(2) or "b"]
    if size <= 0:
        raise ValueError("must be a positive size")
    return size


def format_size(size: int) -> str:
    """`1048576` -> `1 MiB`, `1500` -> `1500 bytes`, for messages people read."""
    for unit, factor in (("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


DataSize = Annotated[int, BeforeValidator(parse_size)]


def _empty_to_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


OptionalSecret = Annotated[SecretStr | None, BeforeValidator(_empty_to_none)]


def _at_least_16(value: SecretStr) -> SecretStr:
    if len(value.get_secret_value()) < 16:
        raise ValueError("must be at least 16 characters (generate one with: openssl rand -hex 32)")
    return value


# A shared HMAC key the owner makes up and gives both sides (webhook agent, action endpoint).
SigningSecret = Annotated[SecretStr, AfterValidator(_at_least_16)]
SIGNING_SECRET_HELP = "a random value you make up (openssl rand -hex 32) and give the other side too"


def repeated(values: list[Any]) -> list[Any]:
    """The values a list names more than once, sorted: a list that means a set says so."""
    return sorted({value for value in values if values.count(value) > 1})


_T = TypeVar("_T")


def each_once(values: list[_T], message: str) -> list[_T]:
    """`values` as given, or a ValueError saying `message`, its `{}` filled with the values
    named more than once (`repeated`, comma-separated): for a validator of a list that means a set."""
    twice = repeated(values)
    if twice:
        raise ValueError(message.format(", ".join(map(str, twice))))
    return values


def http_url(value: str, example: str) -> str:
    """An absolute http(s) URL without its trailing slash, or a ValueError naming an example."""
    return service_url(value, example).rstrip("/")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
