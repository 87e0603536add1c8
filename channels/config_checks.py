"""What a channel's config model checks that several providers share: a provider's service
URL (`service_url`) and a list of recipients (`clean_recipients`). Kept beside the port
(channels/base.py) so each provider's config module imports one small module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal
from urllib.parse import urlparse

# What a service URL of each kind may start with, and how its error names the kind.
_URL_KINDS = {"http": (("http", "https"), "an http(s) URL"), "ws": (("ws", "wss"), "a ws(s) URL")}


def service_url(value: str, example: str, kind: Literal["http", "ws"] = "http") -> str:
    """`value` as given when it is an absolute http(s) (or ws(s)) URL, or a ValueError naming
    `example`: a config key for a provider's API (or a local or test server)."""
    schemes, what = _URL_KINDS[kind]
    parsed = urlparse(value)
    if parsed.scheme not in schemes or not parsed.netloc:
        raise ValueError(f"must be {what} such as {example}")
    return value



def clean_recipients(values: list[str], clean: Callable[[str], str], *, name_items: bool = True,
                     twice: str | None = None) -> list[str]:
    """A channel config's recipient list (`to`), each entry through `clean` (which raises
    ValueError for one it refuses). The refusal names the entry's position ("item 1: …")
    unless `name_items` is off, for a `clean` whose message quotes the entry already; with
    `twice`, the same recipient listed twice (once cleaned) is refused with those words, so
    nobody gets every message two times."""
    cleaned = []
    for index, item in enumerate(values):
        try:
            cleaned.append(clean(item))
        except ValueError as exc:
            if not name_items:
                raise
            raise ValueError(f"item {index}: {exc}") from None
    if twice is not None and len(set(cleaned)) != len(cleaned):
        raise ValueError(twice)
    return cleaned
