"""`BoundedDict`: an in-process cache of the most recent `size` keys, for what is cheap to
look up again but must not grow without bound (conversation ids of chats, approval prompts a
provider showed, parts of a long message already sent)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar, overload

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class BoundedDict(OrderedDict[K, V]):
    """A dict that forgets its least recently stored key once it holds more than `size`.

    Storing a key makes it the most recent. With `refresh_on_read`, so does reading it with
    `get` (a least-recently-*used* cache: a chat that keeps talking is never forgotten);
    without, the order is that of storing (the oldest prompt goes first)."""

    def __init__(self, size: int, *, refresh_on_read: bool = False) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        super().__init__()
        self.size = size
        self.refresh_on_read = refresh_on_read

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)

    @overload
    def get(self, key: K, default: None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D) -> V | D: ...
    def get(self, key: K, default: V | D | None = None) -> V | D | None:
        if key not in self:
            return default
        if self.refresh_on_read:
            self.move_to_end(key)
        return super().__getitem__(key)
