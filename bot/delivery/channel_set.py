"""The running channel adapters, by id, and which of them the agent may use right now.

A channel that fails to start is kept out of `handoff_request`'s enum (with the reason
logged and shown in /healthz) instead of taking the whole server down or letting the model
pick a channel that cannot deliver.

Fronts live here too. A front on the same connection as a channel (one bot token) is served
by that channel's adapter, which then also takes subscribers' chats; a front of its own is
an adapter that only serves subscribers and is never offered to handoff_request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from channels import adapter_class
from channels.base import ChannelAdapter, ChannelConfig, ChannelContext, ChannelError, TransientChannelError

log = structlog.get_logger(__name__)


@dataclass
class ChannelState:
    adapter: ChannelAdapter
    available: bool = False
    problem: str | None = None
    retryable: bool = False
    stale: bool = False  # lost after start: stop() it before starting it again
    recipients: bool = True  # a handoff can go to it (False: a front of its own)
    subscribers: bool = False  # it serves a front


class ChannelSet:
    def __init__(
        self, configs: list[ChannelConfig], overrides: dict[int, ChannelAdapter] | None = None,
        on_change: Callable[[ChannelAdapter, bool], None] | None = None, fronts: Iterable[Any] = (),
    ) -> None:
        """`overrides` replaces the adapter built from config for a channel id; the demo and
        tests use it to run a channel against a local server. `on_change(adapter, available)`
        hears every start, failure and loss (for the metrics). `fronts` are the config's
        provider fronts (bot.config.ProviderFront)."""
        overrides = overrides or {}
        self._on_change = on_change or (lambda adapter, available: None)
        self._ctx_for: Callable[[int], ChannelContext] | None = None  # set by start()
        self._states: dict[int, ChannelState] = {}
        for config in configs:
            adapter = overrides.get(config.id) or adapter_class(config.kind)(config)
            self._states[config.id] = ChannelState(adapter, problem=None if config.enabled else "disabled in config")
        for front in fronts:
            if front.shares_channel:
                self._states[front.channel_id].subscribers = True
                continue
            adapter = overrides.get(front.channel_id) or adapter_class(front.kind)(front.settings)
            self._states[front.channel_id] = ChannelState(adapter, recipients=False, subscribers=True)

    async def start(self, ctx_for: Callable[[int], ChannelContext]) -> None:
        self._ctx_for = ctx_for
        for cid, state in self._states.items():
            if state.adapter.config.enabled:
                await self._start_one(cid, state)

    async def retry_unavailable(self) -> None:
        """Start again the channels that failed with a transient error (the provider was
        down when we started, or its connection was lost later): run by the periodic sweep,
        so a blip heals itself."""
        for cid, state in self._states.items():
            if state.retryable and not state.available:
                if state.stale:
                    await self._stop_one(cid, state)
                await self._start_one(cid, state)

    def lost(self, channel_id: int, error: ChannelError) -> None:
        """An adapter reports it stopped working after a successful start."""
        state = self._states[channel_id]
        if not state.available:
            return
        state.available, state.stale = False, True
        state.problem, state.retryable = error.hint, isinstance(error, TransientChannelError)
        log.error("channel_lost", channel_id=channel_id, kind=state.adapter.kind, problem=error.hint,
                  restart="on the next sweep" if state.retryable else "after the config is fixed and the desk restarted")
        self._on_change(state.adapter, False)

    async def _start_one(self, cid: int, state: ChannelState) -> None:
        assert self._ctx_for is not None, "start() first"
        try:
            await state.adapter.start(self._ctx_for(cid))
        except TransientChannelError as exc:
            state.problem, state.retryable = exc.hint, True
            log.warning("channel_unavailable_will_retry", channel_id=cid, kind=state.adapter.kind, problem=exc.hint)
        except ChannelError as exc:
            state.problem, state.retryable = exc.hint, False
            log.error("channel_unavailable", channel_id=cid, kind=state.adapter.kind, problem=exc.hint)
        except Exception as exc:  # a broken adapter must not stop the others
            state.problem, state.retryable = f"failed to start: {type(exc).__name__}", False
            log.exception("channel_start_crashed", channel_id=cid, kind=state.adapter.kind)
        else:
            state.available, state.problem, state.retryable = True, None, False
            log.info("channel_started", channel_id=cid, kind=state.adapter.kind)
        self._on_change(state.adapter, state.available)

    async def _stop_one(self, cid: int, state: ChannelState) -> None:
        try:
            await state.adapter.stop()
        except Exception:
            log.exception("channel_stop_failed", channel_id=cid)
        state.available = state.stale = False

    async def stop(self) -> None:
        for cid, state in self._states.items():
            if state.available or state.stale:
                await self._stop_one(cid, state)

    def adapters(self) -> list[ChannelAdapter]:
        """Every configured adapter, started or not, in config order."""
        return [s.adapter for s in self._states.values()]

    def get(self, channel_id: int) -> ChannelAdapter | None:
        state = self._states.get(channel_id)
        return state.adapter if state else None

    def is_available(self, channel_id: int) -> bool:
        state = self._states.get(channel_id)
        return bool(state and state.available)

    def serves_subscribers(self, channel_id: int) -> bool:
        state = self._states.get(channel_id)
        return bool(state and state.subscribers)

    def available(self) -> list[ChannelAdapter]:
        """Channels a handoff can go to now, in config order."""
        return [s.adapter for s in self._states.values() if s.available and s.recipients]

    def health(self) -> list[dict[str, object]]:
        return [
            {"id": cid, "kind": s.adapter.kind, "label": s.adapter.label, "available": s.available, "problem": s.problem,
             "serves": [role for role, on in (("recipients", s.recipients), ("subscribers", s.subscribers)) if on]}
            for cid, s in self._states.items()
        ]
