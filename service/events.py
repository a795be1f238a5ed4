"""In-process publish/subscribe of rollout progress, for GET /v1/rollouts/{id}/events.

Events are a live view, not a log: a subscriber sees what happens after it subscribes (the
durable record is the store). A slow subscriber loses events rather than slowing the service.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

SUBSCRIBER_QUEUE = 1024


@dataclass(frozen=True)
class Event:
    kind: str  # trajectory / group / rollout
    data: dict[str, Any]


class EventHub:
    def __init__(self) -> None:
        self._subs: dict[str, set[asyncio.Queue[Event]]] = defaultdict(set)

    def subscribe(self, rollout_id: str) -> asyncio.Queue[Event]:
        q: asyncio.Queue[Event] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._subs[rollout_id].add(q)
        return q

    def unsubscribe(self, rollout_id: str, q: asyncio.Queue[Event]) -> None:
        subs = self._subs.get(rollout_id)
        if subs is not None:
            subs.discard(q)
            if not subs:
                del self._subs[rollout_id]

    def publish(self, rollout_id: str, kind: str, data: dict[str, Any]) -> None:
        event = Event(kind, data)
        for q in list(self._subs.get(rollout_id, ())):
            try:
                q.put_nowait(event)
            except asyncio.QueueFull:
                pass  # live view only: the store has the record
