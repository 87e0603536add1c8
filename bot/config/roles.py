"""What a person may do: the three roles, each including the ones below it."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """What a person may do, each role including the ones below it: a viewer reads (the
    inbox, reports), an agent also acts on handoffs (replies, claims, releases, approval
    votes), an admin also manages people and settings."""

    VIEWER = "viewer"
    AGENT = "agent"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def allows(self, needed: Role) -> bool:
        """Whether this role may do what `needed` may."""
        return self.rank >= needed.rank


_RANKS = {Role.VIEWER: 0, Role.AGENT: 1, Role.ADMIN: 2}
