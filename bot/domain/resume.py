"""The `[Bot resumed — …]` system message the agent reads after a handoff ends.

Its format is a contract (docs/architecture.md, "Contracts"): agents are prompted to read the `Returned data:`
block and use the field names as given. Everything a person typed is flattened or
indented here, so a note or a value can never forge a line of its own (a fake
`Returned data:` header or a second `[Bot resumed …]`).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from bot.config import format_duration
from bot.runtime.text import one_line
from bot.store.vocabulary import ReleaseReason

MAX_NOTE = 500


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        lines = value.strip().splitlines() or [""]
        return "\n    ".join(line.rstrip() for line in lines)
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    return json.dumps(value, ensure_ascii=False)


def resume_message(
    *,
    reason: ReleaseReason,
    outcome: str,
    note: str | None,
    returned: dict[str, Any],
    missing_required: list[str],
    idle_timeout: timedelta | None = None,
) -> str:
    phrase = ReleaseReason(reason).resume_phrase(format_duration(idle_timeout) if idle_timeout else "a while")
    head = f"[Bot resumed — {phrase}. Outcome: {outcome}."
    if note and note.strip():
        head += " " + one_line(note, MAX_NOTE).replace("]", ")")
    lines = [head + "]"]
    if returned:
        lines.append("Returned data:")
        lines.extend(f"  • {one_line(str(key), 64)}: {_format_value(value)}" for key, value in returned.items())
    if missing_required:
        lines.append("Missing required: " + ", ".join(missing_required))
    return "\n".join(lines)
