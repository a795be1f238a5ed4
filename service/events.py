"""In-process publish/subscribe of rollout progress, for GET /v1/rollouts/{id}/events (one
rollout) and GET /v1/events (every rollout: the web view's live overview).

Events are a live view, not a log: a subscriber sees what happens after it subscribes (the
durable record is the store). A slow subscriber loses events rather than slowing the service.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from service.errors import Busy

SUBSCRIBER_QUEUE = 1024


@dataclass(frozen=True)
class Event:
    kind: str  # submitted / trajectory / group / rollout
    data: dict[str, Any]
    rollout_id: str = ""


class EventHub:
    def __init__(self, max_subscribers: int | None = None) -> None:
        # Key None: subscribers to every rollout's events.
        self._subs: dict[str | None, set[asyncio.Queue[Event]]] = defaultdict(set)
        self.max_subscribers = max_subscribers

    def subscribe(self, rollout_id: str | None) -> asyncio.Queue[Event]:
        """A queue of one rollout's events, or of every rollout's (None). Busy (429) past
        `max_subscribers` (None: no cap), as each holds a connection and up to 1024 events."""
        cap = self.max_subscribers
        if cap is not None and sum(len(subs) for subs in self._subs.values()) >= cap:
            raise Busy(f"{self.max_subscribers} event streams are open; close one, or retry later")
        q: asyncio.Queue[Event] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._subs[rollout_id].add(q)
        return q

    def unsubscribe(self, rollout_id: str | None, q: asyncio.Queue[Event]) -> None:
        subs = self._subs.get(rollout_id)
        if subs is not None:
            subs.discard(q)
            if not subs:
                del self._subs[rollout_id]

    def publish(self, rollout_id: str, kind: str, data: dict[str, Any]) -> None:
        event = Event(kind, data, rollout_id)
        for q in [*self._subs.get(rollout_id, ()), *self._subs.get(None, ())]:
            try:
                q.put_nowait(event)
            except asyncio.QueueFull:
                pass  # live view only: the store has the record
