"""Schemathesis hooks of tests/test_contract.py's run (tests/schemathesis.toml names this module).

A client sends each request with a new `Idempotency-Key` (docs/api.md, "Retrying safely"); the
generator draws keys from the header's schema and repeats them across requests, and a repeated
key with another body is refused by design (422 `idempotency_key_reused`). So a valid key is
made new here, just before its request goes out, as a client makes it; a key the schema
refuses (the negative cases) goes out as drawn. Replays and reuse are tested in
tests/test_idempotency.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import schemathesis

from bot.web.idempotency import HEADER, valid_key


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    key = (case.headers or {}).get(HEADER)
    if isinstance(key, str) and valid_key(key):
        case.headers[HEADER] = str(uuid.uuid4())
