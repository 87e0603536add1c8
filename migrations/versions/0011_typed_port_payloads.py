"""store outbox and inbound payloads in the typed shape of the channel port

Outbox items and inbound events keep what crossed the channel port as JSON. The port's
messages used to be one model with a `purpose` (and a `notice`, a `sender`, optional parts);
they are now one class per kind with a `kind` discriminator (channels/base.py). This rewrites
every stored payload into the new shape, so a desk upgraded with items still in flight
delivers (and handles) them as before. The shapes are written out here, not imported: a
migration must keep working when the code it once matched has moved on.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 12:00:00
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op


revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HANDOFF_NOTICES = ("released", "form_link", "routing")


def typed_outbound(old: dict[str, Any]) -> dict[str, Any]:
    """An outbox payload of the old shape (`purpose`, `handoff_session_id`, …) in the new one."""
    stream, text, key = old.get("handoff_session_id") or "", old.get("text") or "", old.get("delivery_key")
    body = old["body"] if old.get("body") is not None else text
    purpose, notice = old.get("purpose"), old.get("notice")
    common = {"text": text, "delivery_key": key}
    if purpose == "dispatch":
        return {"kind": "dispatch", **common, "handoff_id": stream, "brief": old.get("brief"), "subject": old.get("subject") or ""}
    if purpose == "relay":
        return {"kind": "relay", **common, "handoff_id": stream, "author": old.get("author") or "Subscriber", "body": body,
                "thread": old.get("thread") or {}}
    if purpose == "subscriber":
        return {"kind": "to_subscriber", **common, "conversation_id": stream, "chat": str((old.get("thread") or {}).get("chat") or ""),
                "author": old.get("author"), "body": body, "user_action": old.get("user_action")}
    if notice == "approval":
        return {"kind": "approval_prompt", **common, "approval": old.get("approval")}
    if notice == "approval_closed":
        return {"kind": "approval_closed", **common, "approval": old.get("approval"), "prompt": old.get("thread") or {}}
    return {"kind": "notice", **common, "handoff_id": stream, "about": notice if notice in _HANDOFF_NOTICES else "routing",
            "thread": old.get("thread") or {}}


def typed_inbound(old: dict[str, Any]) -> dict[str, Any]:
    """An inbound payload of the old shape (`sender`, `decision`, `opened`, …) in the new one."""
    common = {"dedupe_key": old.get("dedupe_key"), "author": old.get("author")}
    thread_key, text = old.get("thread_key") or "", old.get("text") or ""
    if old.get("failed_delivery"):
        return {"kind": "failed_delivery", **common, **old["failed_delivery"]}
    if old.get("sender") == "subscriber":
        if old.get("answer"):
            return {"kind": "user_action_answer", **common, "chat": thread_key, **old["answer"]}
        if old.get("opened"):
            return {"kind": "chat_opened", **common, "chat": thread_key}
        return {"kind": "subscriber_text", **common, "chat": thread_key, "text": text}
    if old.get("decision"):
        return {"kind": "decision", **common, **old["decision"]}
    return {"kind": "recipient_text", **common, "thread_key": thread_key, "text": text}


def _rewrite(table_name: str, convert: Any) -> None:
    table = sa.table(table_name, sa.column("id", sa.Integer), sa.column("payload", sa.JSON))
    connection = op.get_bind()
    rows = connection.execute(sa.select(table.c.id, table.c.payload)).all()
    for row_id, payload in rows:
        if isinstance(payload, dict) and "kind" not in payload:
            connection.execute(table.update().where(table.c.id == row_id).values(payload=convert(payload)))


def upgrade() -> None:
    _rewrite("outbox", typed_outbound)
    _rewrite("inbound_events", typed_inbound)


def downgrade() -> None:
    """The old code cannot read the new shape, and the new shape holds nothing the old one
    lacked; downgrading past this revision means draining the outbox first."""
